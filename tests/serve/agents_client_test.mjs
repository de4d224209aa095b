// serve.agents: what agents and frameworks need from the server, through the clients they use:
// the official openai client, LangChain (bindTools, withStructuredOutput) and the Vercel AI SDK
// (generateText with tools, generateObject). The server runs the tiny random-weight model with
// --scripted-outputs (agents_scripts.json): a message containing a script's `when` is answered
// with exactly that script's tokens, so the tool-call parser sees the model format's real token
// stream; everything else (forced tool calls, structured outputs) is sampled from the model.
// usage: node agents_client_test.mjs BASE_URL MODEL API_KEY
import OpenAI from "openai";
import assert from "node:assert/strict";
import Ajv from "ajv/dist/2020.js";  // JSON Schema 2020-12 (prefixItems), as the grammar reads them
import { ChatOpenAI } from "@langchain/openai";
import { tool as lcTool } from "@langchain/core/tools";
import { generateText, generateObject, tool as aiTool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";

const [base, model, apiKey] = process.argv.slice(2);
const serverUrl = base;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, timeout: 30000, maxRetries: 0 });
const ajv = new Ajv({ strict: false, validateSchema: false });
const post = async (path, body) => {
  const r = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30000),
  });
  return { status: r.status, body: await r.json() };
};
const user = (content) => [{ role: "user", content }];

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const time = {
  type: "function",
  function: {
    name: "get_time",
    parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] },
  },
};

// Streams a chat request; returns the message it adds up to, the finish reason and the chunks.
async function streamChat(req) {
  const calls = [];
  let content = "", reasoning = "", finish = null, usage = null;
  const chunks = [];
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    chunks.push(chunk);
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta ?? {};
    // Reasoning and content never share a chunk.
    assert.ok(!(d.content && d.reasoning_content), JSON.stringify(chunk));
    content += d.content ?? "";
    reasoning += d.reasoning_content ?? "";
    for (const t of d.tool_calls ?? []) {
      if (t.id) {
        assert.equal(t.index, calls.length, "a new call has the next index");
        assert.equal(t.type, "function");
        assert.ok(t.function.name, "the first delta names the function");
        calls.push({ id: t.id, name: t.function.name, arguments: t.function.arguments ?? "", prefixes: [] });
      } else {
        assert.ok(calls[t.index], `a fragment of call ${t.index} before its first delta`);
        calls[t.index].arguments += t.function.arguments ?? "";
      }
      calls[t.index].prefixes.push(calls[t.index].arguments);
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, reasoning, calls, finish, usage, chunks };
}

// --- Tool calls in DeepSeek-V3's format, whole and streamed --------------------------------
{
  const req = { model, messages: user("CALL_WEATHER please"), tools: [weather, time], max_tokens: 200 };
  const whole = await client.chat.completions.create(req);
  const m = whole.choices[0].message;
  assert.equal(whole.choices[0].finish_reason, "tool_calls");
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  assert.match(m.tool_calls[0].id, /^call_[0-9a-f]{24}$/);
  assert.equal(m.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: "Paris", unit: "celsius" });
  const s = await streamChat(req);
  assert.equal(s.finish, "tool_calls");
  assert.equal(s.content, "");
  assert.equal(s.calls.length, 1);
  assert.equal(s.calls[0].name, "get_weather");
  // Streamed arguments: every prefix of the final text, and the final text is the whole one's.
  assert.equal(s.calls[0].arguments, m.tool_calls[0].function.arguments);
  for (const p of s.calls[0].prefixes) assert.ok(s.calls[0].arguments.startsWith(p), p);
}
{
  // Two calls in one block, multi-line arguments; text before the calls is content.
  const req = { model, messages: user("CALL_TWO now"), tools: [weather, time], max_tokens: 300 };
  const whole = await client.chat.completions.create(req);
  const m = whole.choices[0].message;
  assert.equal(m.content, "Checking both.");
  assert.deepEqual(m.tool_calls.map((t) => t.function.name), ["get_weather", "get_time"]);
  assert.deepEqual(JSON.parse(m.tool_calls[1].function.arguments), { zone: "Europe/Paris" });
  const s = await streamChat(req);
  assert.equal(s.content, "Checking both.");
  assert.deepEqual(s.calls.map((c) => c.arguments), m.tool_calls.map((t) => t.function.arguments));
  assert.notEqual(s.calls[0].id, s.calls[1].id);
}
{
  // A Markdown fence in ordinary content stays as it is when tools are present.
  const m = (await client.chat.completions.create({ model, messages: user("FENCE_CONTENT"), tools: [weather] })).choices[0];
  assert.equal(m.message.content, "Here:\n```json\n{\"a\": 1}\n```\nDone.");
  assert.equal(m.message.tool_calls, undefined);
  assert.equal(m.finish_reason, "stop");
}
{
  // A call cut by max_tokens: finish_reason length and no half call.
  const cut = await client.chat.completions.create({ model, messages: user("CALL_WEATHER"), tools: [weather], max_tokens: 8 });
  assert.equal(cut.choices[0].finish_reason, "length");
  assert.equal(cut.choices[0].message.tool_calls, undefined);
}
{
  // Without tools the tool tokens are neither parsed nor drawn: tool_choice "none" bans them
  // even against a +100 logit bias (which, with tools and "auto", makes the model open a call).
  const id = (await post("/v1/tokenize", { prompt: "<｜tool▁calls▁begin｜>", add_special_tokens: false })).body.tokens;
  assert.equal(id.length, 1, "the marker is one token");
  const bias = { [id[0]]: 100 };
  const auto = await client.chat.completions.create({ model, messages: user("hi"), tools: [weather], logit_bias: bias,
                                                      max_tokens: 3, temperature: 0, return_token_ids: true });
  assert.equal(auto.choices[0].token_ids[0], id[0]);
  const none = await client.chat.completions.create({ model, messages: user("hi"), tools: [weather], tool_choice: "none",
                                                      logit_bias: bias, max_tokens: 6, temperature: 0, return_token_ids: true });
  assert.ok(!none.choices[0].token_ids.includes(id[0]), JSON.stringify(none.choices[0]));
}

{
  // A call without a name is dropped, and then there is no empty tool_calls list and no
  // finish_reason "tool_calls".
  const r = await client.chat.completions.create({ model, messages: user("BROKEN_CALL"), tools: [weather] });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].finish_reason, "stop");
  // Reasoning cut by max_tokens: all of it is reasoning, finish_reason "length".
  const cut = await client.chat.completions.create({ model, messages: user("THINK_THEN_ANSWER"), max_tokens: 4,
                                                     chat_template_kwargs: { thinking: true } });
  assert.equal(cut.choices[0].finish_reason, "length");
  assert.ok(cut.choices[0].message.reasoning_content.length > 0);
  assert.equal(cut.choices[0].message.content, "");
}

// --- Forced tool calls: sampled from the random model, held to the grammar -----------------
for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({ model, messages: user("whatever you like"), tools: [weather, time],
                                                   tool_choice: "required", temperature: 1, seed, max_tokens: 400 });
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls && calls.length >= 1, JSON.stringify(r.choices[0]));
  for (const c of calls) {
    const t = [weather, time].find((x) => x.function.name === c.function.name);
    assert.ok(t, c.function.name);
    assert.ok(ajv.validate(t.function.parameters, JSON.parse(c.function.arguments)), c.function.arguments);
  }
  const named = await client.chat.completions.create({ model, messages: user("anything"), tools: [weather, time],
                                                       tool_choice: { type: "function", function: { name: "get_time" } },
                                                       temperature: 1, seed, max_tokens: 400 });
  const nc = named.choices[0].message.tool_calls;
  assert.equal(nc.length, 1);
  assert.equal(nc[0].function.name, "get_time");
  assert.ok(ajv.validate(time.function.parameters, JSON.parse(nc[0].function.arguments)));
  assert.equal(named.choices[0].finish_reason, "tool_calls");
}

// --- Reasoning: chat_template_kwargs {"thinking": true} (--reasoning-parser deepseek-v3) ----
{
  const req = { model, messages: user("THINK_THEN_ANSWER"), chat_template_kwargs: { thinking: true }, max_tokens: 100 };
  const whole = (await client.chat.completions.create(req));
  assert.equal(whole.choices[0].message.reasoning_content, "Let me think.\nIt is 6 times 7.");
  assert.equal(whole.choices[0].message.content, "The answer is 42.");
  assert.ok(whole.usage.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(whole.usage.completion_tokens_details.reasoning_tokens < whole.usage.completion_tokens);
  const s = await streamChat({ ...req, stream_options: { include_usage: true } });
  assert.equal(s.reasoning, whole.choices[0].message.reasoning_content);
  assert.equal(s.content, whole.choices[0].message.content);
  // Without thinking the same tokens are all content.
  const plain = await client.chat.completions.create({ ...req, chat_template_kwargs: {} });
  assert.equal(plain.choices[0].message.reasoning_content, undefined);
  assert.equal(plain.choices[0].message.content, "Let me think.\nIt is 6 times 7.</think>\n\nThe answer is 42.");
}

// --- Structured outputs ----------------------------------------------------------------------
const schemas = [
  { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false },
  { type: "object", properties: { tags: { type: "array", items: { type: "string", enum: ["a", "b", "c"] }, minItems: 1 } }, required: ["tags"] },
  { type: "object", properties: { v: { anyOf: [{ type: "number" }, { type: "null" }] }, ok: { type: "boolean" } }, required: ["v", "ok"] },
  { $defs: { p: { type: "object", properties: { x: { type: "number" }, y: { type: "number" } }, required: ["x", "y"] } },
    type: "object", properties: { from: { $ref: "#/$defs/p" }, to: { $ref: "#/$defs/p" } }, required: ["from", "to"] },
];
for (const [i, schema] of schemas.entries()) {
  for (const seed of [5, 6]) {
    const r = await client.chat.completions.create({
      model, messages: user("Give me JSON."), temperature: 1, seed, max_tokens: 300,
      response_format: { type: "json_schema", json_schema: { name: `s${i}`, schema, strict: true } } });
    const text = r.choices[0].message.content;
    assert.ok(ajv.validate(schema, JSON.parse(text)), `schema ${i} seed ${seed}: ${text} ${JSON.stringify(ajv.errors)}`);
  }
}
{
  const r = await client.chat.completions.create({ model, messages: user("JSON!"), temperature: 1, seed: 9, max_tokens: 200,
                                                   response_format: { type: "json_object" } });
  const v = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof v, "object");
  assert.ok(v !== null && !Array.isArray(v));
  // An unsupported keyword is a 400 that names it.
  await assert.rejects(client.chat.completions.create({ model, messages: user("x"),
    response_format: { type: "json_schema", json_schema: { name: "bad", schema: { type: "object", patternProperties: { "^a": {} } } } } }),
    (e) => e.status === 400 && /patternProperties/.test(e.message));
}

// --- The sampling parameters clients send --------------------------------------------------
{
  const base = { model, prompt: "The quick brown fox", max_tokens: 8, ignore_eos: true, return_token_ids: true };
  const greedy = (await client.completions.create({ ...base, temperature: 0 })).choices[0].token_ids;
  // n: distinct seeds per choice, reproducible as a whole.
  const n3 = await client.completions.create({ ...base, temperature: 1, seed: 42, n: 3 });
  assert.deepEqual(n3.choices.map((c) => c.index), [0, 1, 2]);
  const again = await client.completions.create({ ...base, temperature: 1, seed: 42, n: 3 });
  assert.deepEqual(again.choices.map((c) => c.token_ids), n3.choices.map((c) => c.token_ids));
  assert.ok(new Set(n3.choices.map((c) => c.token_ids.join())).size > 1, "choices differ");
  assert.equal(n3.usage.completion_tokens, 24);
  await assert.rejects(client.completions.create({ ...base, n: 99 }), (e) => e.status === 400 && /'n'/.test(e.message));
  // The choices share the prompt's cache: choices 1 and 2 start once choice 0 has cached it.
  const hits = async () => (await (await fetch(`${serverUrl}/metrics`)).text()).split("\n")
    .filter((l) => l.startsWith("epserve:prefix_cache_hits_total")).reduce((a, l) => a + Number(l.trim().split(/\s+/).pop()), 0);
  const longPrompt = "N3TEST the quick brown fox jumps over the lazy dog. ".repeat(30);
  const before = await hits();
  const shared = await client.completions.create({ model, prompt: longPrompt, n: 3, max_tokens: 2, temperature: 1, seed: 8 });
  assert.ok(shared.usage.prompt_tokens > 130, `${shared.usage.prompt_tokens}`);
  assert.ok((await hits()) - before >= 2 * 128, `prefix cache hits grew by ${(await hits()) - before}`);
  let streamedChoices = new Set();
  for await (const c of await client.completions.create({ model, prompt: longPrompt + "again", n: 3, max_tokens: 3,
                                                           temperature: 1, seed: 9, stream: true })) {
    for (const ch of c.choices) streamedChoices.add(ch.index);
  }
  assert.deepEqual([...streamedChoices].sort(), [0, 1, 2]);
  // min_p 1 keeps only the likeliest token: sampling at temperature 1.5 is greedy.
  const minp = await client.completions.create({ ...base, temperature: 1.5, seed: 3, min_p: 1 });
  assert.deepEqual(minp.choices[0].token_ids, greedy);
  // logit_bias +100 on one token: every greedy token is that one.
  const forced = greedy[0] === 7 ? 8 : 7;
  const biased = await client.completions.create({ ...base, temperature: 0, logit_bias: { [forced]: 100 } });
  assert.deepEqual(biased.choices[0].token_ids, Array(8).fill(forced));
  // Penalties: a token biased to repeat is repeated less with a frequency or presence penalty,
  // and the repetition penalty keeps the prompt's tokens out of a greedy output.
  // With a bias of 8 the token wins every step: a frequency penalty of 2 (2 per repeat) takes
  // it down after a few, a presence penalty (2 once) cannot. With a bias just large enough for
  // it to win the first step, a presence penalty stops its repeats.
  const count = (ids) => ids.filter((t) => t === forced).length;
  const soft = (b) => ({ ...base, temperature: 0, max_tokens: 16, logit_bias: { [forced]: b } });
  const draw = async (req) => count((await client.completions.create(req)).choices[0].token_ids);
  assert.equal(await draw(soft(8)), 16);
  assert.ok(await draw({ ...soft(8), frequency_penalty: 2 }) < 16);
  assert.equal(await draw({ ...soft(8), presence_penalty: 2 }), 16);
  let b = 0.25;
  while (b < 8 && (await client.completions.create(soft(b))).choices[0].token_ids[0] !== forced) b += 0.25;
  const [plainCount, presCount] = [await draw(soft(b)), await draw({ ...soft(b), presence_penalty: 2 })];
  assert.ok(presCount < plainCount || plainCount === 1, `bias ${b}: ${plainCount} repeats, ${presCount} with presence_penalty`);
  assert.ok(presCount <= 1 + Math.floor(plainCount / 2), `bias ${b}: ${plainCount} repeats, ${presCount} with presence_penalty`);
  const prompt = (await post("/v1/tokenize", { prompt: "The quick brown fox" })).body.tokens;
  const rep = (await client.completions.create({ ...base, temperature: 0, max_tokens: 16, repetition_penalty: 100 })).choices[0].token_ids;
  assert.ok(rep.every((t, i) => !prompt.includes(t) && !rep.slice(0, i).includes(t)), JSON.stringify(rep));
  // min_tokens: EOS made the likeliest token is held back until min_tokens.
  const eos = { model, prompt: "The quick brown fox", max_tokens: 10, temperature: 0, logit_bias: { 1: 100 } };
  assert.equal((await client.completions.create(eos)).usage.completion_tokens, 1);
  assert.equal((await client.completions.create({ ...eos, min_tokens: 4 })).usage.completion_tokens, 5);
  // seed: the same seed gives the same sample.
  const s1 = await client.completions.create({ ...base, temperature: 1, seed: 77 });
  const s2 = await client.completions.create({ ...base, temperature: 1, seed: 77 });
  assert.deepEqual(s1.choices[0].token_ids, s2.choices[0].token_ids);
  // max_completion_tokens (chat).
  const mct = await client.chat.completions.create({ model, messages: user("hello"), max_completion_tokens: 3, ignore_eos: true });
  assert.equal(mct.usage.completion_tokens, 3);
  // stream_options.continuous_usage_stats: usage on every chunk, counting up.
  let last = 0, chunks = 0;
  for await (const c of await client.completions.create({ ...base, temperature: 0, stream: true,
                                                           stream_options: { include_usage: true, continuous_usage_stats: true } })) {
    assert.ok(c.usage, JSON.stringify(c));
    assert.ok(c.usage.completion_tokens >= last);
    last = c.usage.completion_tokens;
    ++chunks;
  }
  assert.equal(last, 8);
  assert.ok(chunks >= 8);
  // continue_final_message: the last assistant turn stays open (no end-of-sentence after it).
  const conv = [{ role: "user", content: "hi" }, { role: "assistant", content: "Hello, I am" }];
  const closed = await post("/v1/tokenize", { messages: conv, add_generation_prompt: false });
  const open = await post("/v1/tokenize", { messages: conv, continue_final_message: true });
  assert.equal(open.body.count, closed.body.count - 1, JSON.stringify([closed.body, open.body]));
  const cont = await client.chat.completions.create({ model, messages: conv, continue_final_message: true, max_tokens: 2, ignore_eos: true });
  assert.equal(cont.usage.prompt_tokens, open.body.count);
  // tokenize / detokenize round trip.
  const tok = await post("/v1/tokenize", { prompt: "hello world", add_special_tokens: false });
  assert.equal((await post("/v1/detokenize", { tokens: tok.body.tokens })).body.prompt, "hello world");
  // Fields the server does not honour are 400s that name them, never ignored.
  for (const [field, value] of [["functions", [{ name: "f" }]], ["echo", true], ["audio", {}], ["prediction", {}]]) {
    const r = await post("/v1/chat/completions", { model, messages: user("x"), [field]: value });
    assert.equal(r.status, 400, field);
    assert.equal(r.body.error.param, field);
  }
}

// --- LangChain: bindTools and withStructuredOutput ------------------------------------------
{
  const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL: `${base}/v1` }, maxRetries: 0, timeout: 30000 });
  const getWeather = lcTool(async () => "sunny", {
    name: "get_weather", description: "Weather in a city",
    schema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }),
  });
  const msg = await llm.bindTools([getWeather]).invoke("CALL_WEATHER please");
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, "get_weather");
  assert.deepEqual(msg.tool_calls[0].args, { city: "Paris", unit: "celsius" });
  const Person = z.object({ name: z.string(), age: z.number().int(), pets: z.array(z.enum(["cat", "dog"])) });
  const structured = await llm.withStructuredOutput(Person, { name: "person" }).invoke("Describe a person.", { configurable: {} });
  assert.ok(Person.safeParse(structured).success, JSON.stringify(structured));
}

// --- Vercel AI SDK: generateText with tools, generateObject ---------------------------------
{
  const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey });
  const r = await generateText({
    model: provider.chat(model), prompt: "CALL_WEATHER please", maxRetries: 0,
    tools: { get_weather: aiTool({ description: "Weather", inputSchema: z.object({ city: z.string(), unit: z.enum(["celsius", "fahrenheit"]) }) }) },
  });
  assert.equal(r.toolCalls.length, 1);
  assert.equal(r.toolCalls[0].toolName, "get_weather");
  assert.deepEqual(r.toolCalls[0].input, { city: "Paris", unit: "celsius" });
  assert.equal(r.finishReason, "tool-calls");
  const Recipe = z.object({ title: z.string(), steps: z.array(z.string()).min(1), minutes: z.number() });
  const o = await generateObject({ model: provider.chat(model), schema: Recipe, prompt: "A recipe.", maxRetries: 0, maxOutputTokens: 300 });
  assert.ok(Recipe.safeParse(o.object).success, JSON.stringify(o.object));
  // Reasoning, as the SDK's OpenAI-compatible provider reads it (reasoning_content).
  const compat = createOpenAICompatible({ name: "epserve", baseURL: `${base}/v1`, apiKey });
  const t = await generateText({ model: compat.chatModel(model), prompt: "THINK_THEN_ANSWER", maxRetries: 0,
                                 providerOptions: { epserve: { chat_template_kwargs: { thinking: true } } } });
  assert.equal(t.reasoningText, "Let me think.\nIt is 6 times 7.");
  assert.equal(t.text, "The answer is 42.");
}

console.log("serve.agents: ok");
