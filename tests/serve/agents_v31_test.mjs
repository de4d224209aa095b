// serve.agents, second half: the server started with --tool-call-format deepseek_v31 (the tiny
// model's template is V3's; the flag decides the parser) gets DeepSeek-V3.1's tool-call token
// stream; and the 50 JSON schemas of tests/grammar/schemas.json, each sampled at temperature 1
// from the random-weight model under its grammar, validate (ajv).
// usage: node agents_v31_test.mjs BASE_URL MODEL API_KEY SCHEMAS_JSON
import OpenAI from "openai";
import assert from "node:assert/strict";
import Ajv from "ajv/dist/2020.js";  // JSON Schema 2020-12 (prefixItems), as the grammar reads them
import { readFileSync } from "node:fs";

const [base, model, apiKey, schemasFile] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, timeout: 30000, maxRetries: 0 });
const user = (content) => [{ role: "user", content }];
const tools = [
  { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
  { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] } } },
];

// V3.1: two calls, whole and streamed (first delta: index, id, name; fragments always prefixes).
const req = { model, messages: user("V31_TWO"), tools, max_tokens: 200 };
const whole = await client.chat.completions.create(req);
const m = whole.choices[0].message;
assert.equal(whole.choices[0].finish_reason, "tool_calls");
assert.deepEqual(m.tool_calls.map((t) => t.function.name), ["get_weather", "get_time"]);
assert.equal(m.tool_calls[0].function.arguments, '{"city": "Oslo"}');
assert.equal(m.tool_calls[1].function.arguments, '{"zone": "UTC"}');
const calls = [];
for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
  for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
    if (t.id) calls.push({ name: t.function.name, args: t.function.arguments ?? "" });
    else calls[t.index].args += t.function.arguments ?? "";
    const final = m.tool_calls[t.index].function.arguments;
    assert.ok(final.startsWith(calls[t.index].args), calls[t.index].args);
  }
}
assert.deepEqual(calls.map((c) => c.args), m.tool_calls.map((t) => t.function.arguments));
// A forced call in V3.1's format, sampled.
const forced = await client.chat.completions.create({ model, messages: user("anything"), tools, tool_choice: "required",
                                                      temperature: 1, seed: 4, max_tokens: 300 });
assert.ok(forced.choices[0].message.tool_calls.length >= 1, JSON.stringify(forced.choices[0]));

// 50 schemas at temperature 1.
const ajv = new Ajv({ strict: false, validateSchema: false });
const schemas = JSON.parse(readFileSync(schemasFile, "utf8"));
assert.equal(schemas.length, 50);
let valid = 0;
for (const [i, { name, schema }] of schemas.entries()) {
  const r = await client.chat.completions.create({
    model, messages: user("JSON please"), temperature: 1, seed: 100 + i, max_tokens: 400,
    response_format: { type: "json_schema", json_schema: { name, schema, strict: true } } });
  const text = r.choices[0].message.content;
  let value;
  assert.doesNotThrow(() => { value = JSON.parse(text); }, `${name}: not JSON: ${text}`);
  assert.ok(ajv.validate(schema, value), `${name}: ${text}: ${JSON.stringify(ajv.errors)}`);
  ++valid;
}
console.log(`serve.agents (V3.1 format, ${valid}/50 schemas valid): ok`);
