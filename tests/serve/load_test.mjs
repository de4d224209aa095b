// serve.load: N concurrent streaming completions through the official `openai` client, half of
// them sharing long prefixes (5 requests per prefix); every streamed text must equal the same prompt run alone (greedy,
// one request at a time, after the load). Prints one JSON line: the prefix-cache hit rate and
// mean TTFT the server's /metrics report for the concurrent phase.
// usage: node load_test.mjs BASE_URL MODEL N OUT_JSON
import OpenAI from "openai";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";

const [base, model, nText, out] = process.argv.slice(2);
const n = Number(nText);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", timeout: 120000, maxRetries: 0 });

// Deterministic prompts: words from a small vocabulary, mulberry32-seeded.
let seed = 12345;
const rand = () => {
  seed = (seed + 0x6d2b79f5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const words = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud " +
  "paper engine market garden window silver forest bridge signal".split(" ");
const sentence = (k) => Array.from({ length: k }, () => words[Math.floor(rand() * words.length)]).join(" ");
// Half the requests: 5 each on n/10 long shared prefixes; the other half: short unique prompts.
// Shuffled, so no policy gets them in a convenient order.
const prefixes = Array.from({ length: Math.max(1, Math.floor(n / 10)) }, () => sentence(200));
const prompts = [];
for (let i = 0; i < n; ++i) {
  if (i % 2 === 0) prompts.push(`${prefixes[Math.floor(i / 10) % prefixes.length]} ${sentence(6)}`);
  else prompts.push(sentence(24));
}
for (let i = prompts.length - 1; i > 0; --i) {
  const j = Math.floor(rand() * (i + 1));
  [prompts[i], prompts[j]] = [prompts[j], prompts[i]];
}
const req = (prompt) => ({ model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true,
                           logprobs: 2, return_token_ids: true });
// One-process engines and expert-parallel worlds alike give every request exactly its alone
// tokens, however it was chunked and batched (docs/kernels.md, "Batch invariance").

async function metrics() {
  const r = await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10000) });
  const text = await r.text();
  const sum = (name) => text.split("\n").filter((l) => l.startsWith(name + "{"))
    .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
  return {
    hits: sum("epserve:prefix_cache_hits_total"), queries: sum("epserve:prefix_cache_queries_total"),
    ttftSum: sum("epserve:time_to_first_token_seconds_sum"), ttftCount: sum("epserve:time_to_first_token_seconds_count"),
    decisions: text.split("\n").filter((l) => l.startsWith("epserve:router_decisions_total")),
    perGroup: text.split("\n").filter((l) => l.startsWith("epserve:prompt_tokens_total{")),
  };
}

const before = await metrics();
const t0 = Date.now();
const streamed = await Promise.all(prompts.map(async (prompt) => {
  let text = "";
  let finish = null;
  const ids = [];
  for await (const chunk of await client.completions.create({ ...req(prompt), stream: true })) {
    for (const c of chunk.choices) {
      text += c.text;
      ids.push(...(c.token_ids ?? []));
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, "length");
  return { text, ids };
}));
const seconds = (Date.now() - t0) / 1000;
const after = await metrics();
const result = {
  requests: n, seconds,
  prefix_hit_rate: (after.hits - before.hits) / Math.max(1, after.queries - before.queries),
  mean_ttft_s: (after.ttftSum - before.ttftSum) / Math.max(1, after.ttftCount - before.ttftCount),
  decisions: after.decisions, prompt_tokens_per_group: after.perGroup,
};
console.log(`concurrent phase: ${n} streams in ${seconds.toFixed(1)} s`);

// Each prompt alone.
let same = 0;
for (let i = 0; i < n; ++i) {
  const alone = (await client.completions.create(req(prompts[i]))).choices[0];
  assert.equal(streamed[i].text, alone.text, `request ${i}: under load != alone`);
  assert.deepEqual(streamed[i].ids, alone.token_ids, `request ${i}: same text, other ids`);
  ++same;
}
result.equal_to_alone = same;
console.log(JSON.stringify(result));
writeFileSync(out, JSON.stringify(result));
