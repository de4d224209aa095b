// serve.v4: DeepSeek-V4 (tiny-v4, random weights) behind `epserve serve`, through the official
// openai client: a greedy chat completion whole and streamed gives the same text, and a forced
// tool call (tool_choice "required", sampled under the tool grammar) streams as tool_calls
// deltas whose arguments parse and fit the function's schema, finish_reason "tool_calls"; a
// scripted V4 turn (reasoning, content, a DSML call) read back whole and streamed.
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
// A scripted V4 assistant turn, thinking (reasoning_effort asks for it): reasoning, content
// and the DSML call, whole and streamed; then the conversation with the call and its result
// goes back (rendered by the built-in V4 encoding).
const scripted = { model, messages: [{ role: "user", content: "CALL_V4 please" }], tools: [weather],
                   reasoning_effort: "high", max_tokens: 1000 };
const got = await client.chat.completions.create(scripted);
const m = got.choices[0].message;
assert.equal(got.choices[0].finish_reason, "tool_calls");
assert.equal(m.reasoning_content, "Need the weather.");
assert.equal(m.content, "Checking.");
assert.equal(m.tool_calls.length, 1);
assert.equal(m.tool_calls[0].function.name, "get_weather");
assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: "Paris \"centre\"", days: 3 });
let reasoning = "", streamedArgs = "";
for await (const chunk of await client.chat.completions.create({ ...scripted, stream: true })) {
  const d = chunk.choices[0]?.delta ?? {};
  reasoning += d.reasoning_content ?? "";
  for (const t of d.tool_calls ?? []) streamedArgs += t.function?.arguments ?? "";
}
assert.equal(reasoning, "Need the weather.");
assert.deepEqual(JSON.parse(streamedArgs), { city: "Paris \"centre\"", days: 3 });
const followUp = await client.chat.completions.create({
  model, tools: [weather], reasoning_effort: "max", max_tokens: 4, temperature: 0,
  messages: [{ role: "user", content: "Weather in Paris?" },
             { role: "assistant", content: "Checking.", reasoning_content: "Need the weather.",
               tool_calls: m.tool_calls },
             { role: "tool", tool_call_id: m.tool_calls[0].id, content: "Sunny" }] });
assert.ok(followUp.choices[0].finish_reason === "length" || followUp.choices[0].finish_reason === "stop");
await assert.rejects(client.chat.completions.create({ ...chatReq, reasoning_effort: "extreme" }),
                     (e) => e.status === 400 && /reasoning_effort/.test(e.message));
console.log(`serve.v4: ok (${JSON.stringify(text)})`);
