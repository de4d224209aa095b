// serve.v4: DeepSeek-V4 (tiny-v4, random weights) behind `epserve serve`, through the official
// openai client: a greedy chat completion whole and streamed gives the same text, and a forced
// tool call (tool_choice "required", sampled under the tool grammar) streams as tool_calls
// deltas whose arguments parse and fit the function's schema, finish_reason "tool_calls".
// usage: node v4_openai_test.mjs BASE_URL MODEL
import OpenAI from "openai";
import assert from "node:assert/strict";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", timeout: 30000, maxRetries: 0 });

const chatReq = { model, messages: [{ role: "user", content: "Hello!" }], max_tokens: 12, temperature: 0,
                  ignore_eos: true };
const whole = await client.chat.completions.create(chatReq);
assert.equal(whole.choices[0].finish_reason, "length");
assert.equal(whole.usage.completion_tokens, 12);
let text = "";
for await (const chunk of await client.chat.completions.create({ ...chatReq, stream: true })) {
  text += chunk.choices[0]?.delta?.content ?? "";
}
assert.equal(text, whole.choices[0].message.content);

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};
for (const seed of [1, 2]) {
  const calls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weather], tool_choice: "required",
    temperature: 1, seed, max_tokens: 300, stream: true })) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.finish_reason) finish = c.finish_reason;
    for (const t of c.delta?.tool_calls ?? []) {
      if (t.id) calls.push({ name: t.function.name, arguments: t.function.arguments ?? "" });
      else calls[t.index].arguments += t.function.arguments ?? "";
    }
  }
  assert.equal(finish, "tool_calls");
  assert.ok(calls.length >= 1, "no tool call streamed");
  for (const c of calls) {
    assert.equal(c.name, "get_weather");
    const args = JSON.parse(c.arguments);
    assert.deepEqual(Object.keys(args).sort(), ["city", "days"], c.arguments);
    assert.equal(typeof args.city, "string");
    assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, c.arguments);
  }
  console.log(`seed ${seed}: ${JSON.stringify(calls)}`);
}
console.log(`serve.v4: ok (${JSON.stringify(text)})`);
