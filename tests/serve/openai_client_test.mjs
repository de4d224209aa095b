// serve.openai_client: the official OpenAI JavaScript client against `epserve serve`.
// usage: node openai_client_test.mjs BASE_URL MODEL [API_KEY]
import OpenAI from "openai";
import assert from "node:assert/strict";

const [base, model, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: apiKey ?? "unused", timeout: 20000, maxRetries: 0 });

const models = await client.models.list();
assert.ok(models.data.some((m) => m.id === model), JSON.stringify(models.data));

// A greedy completion, whole and streamed: the same text; usage present.
const req = { model, prompt: "The quick brown fox", max_tokens: 12, temperature: 0, ignore_eos: true };
const whole = await client.completions.create(req);
assert.equal(whole.choices[0].finish_reason, "length");
assert.equal(whole.usage.completion_tokens, 12);
assert.equal(whole.usage.total_tokens, whole.usage.prompt_tokens + 12);
assert.equal(typeof whole.usage.prompt_tokens_details.cached_tokens, "number");
let streamed = "";
let usage = null;
let finish = null;
for await (const chunk of await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(streamed, whole.choices[0].text);
assert.equal(finish, "length");
assert.equal(usage.completion_tokens, 12);

// Chat, whole and streamed.
const chatReq = { model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello!" }],
                  max_tokens: 10, temperature: 0, ignore_eos: true };
const chat = await client.chat.completions.create(chatReq);
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.usage.completion_tokens, 10);
let chatText = "";
let role = null;
for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
  const d = chunk.choices[0]?.delta ?? {};
  if (d.role) role = d.role;
  chatText += d.content ?? "";
}
assert.equal(role, "assistant");
assert.equal(chatText, chat.choices[0].message.content);

// Errors surface as the client's typed errors.
await assert.rejects(client.completions.create({ ...req, model: "no-such-model" }), (e) => e.status === 404);
await assert.rejects(client.completions.create({ ...req, n: 17 }), (e) => e.status === 400 && /'n'/.test(e.message));
console.log(`serve.openai_client: ok (${JSON.stringify(streamed)})`);
