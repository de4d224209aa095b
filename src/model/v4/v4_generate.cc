// v4_generate: greedy decoding of a DeepSeek-V4 checkpoint with the CPU forward pass
// (model/v4/v4_model.h), writing logits and tokens in tests/reference/reference_v4.py's format:
//   v4_generate --model DIR --prompt-ids 1,2,3 [--prompt-ids ...] --max-tokens N
//               --logits-out L.npy --tokens-out T.json [--chunk N] [--threads N]
// Logits: float32 [sequences, N, vocab]; step 0 at the last prompt position. Each prompt is
// prefilled in chunks of --chunk tokens (0: whole), then every sequence decodes one token a step
// (all sequences in one Forward call). Greedy: argmax, the lowest id on ties; no EOS stop.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "base/thread_pool.h"
#include "io/npy.h"
#include "model/v4/v4_model.h"

namespace epserve::v4 {
namespace {

int Fail(const std::string& msg, int code = 1) {
  std::fprintf(stderr, "v4_generate: %s\n", msg.c_str());
  return code;
}

bool ParseInt(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

int Main(int argc, char** argv) {
  std::string model, logits_out, tokens_out;
  std::vector<std::vector<int32_t>> prompts;
  int64_t max_tokens = 0, chunk_size = 0, threads = ThreadPool::DefaultThreads();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: v4_generate --model DIR --prompt-ids 1,2,3 [--prompt-ids ...] --max-tokens N\n"
          "                   --logits-out L.npy --tokens-out T.json [--chunk N] [--threads N]\n");
      return 0;
    }
    if (i + 1 >= argc) return Fail(arg + " needs a value (or unknown flag)", 2);
    const std::string val = argv[++i];
    int64_t n = 0;
    if (arg == "--model") {
      model = val;
    } else if (arg == "--logits-out") {
      logits_out = val;
    } else if (arg == "--tokens-out") {
      tokens_out = val;
    } else if (arg == "--prompt-ids") {
      std::vector<int32_t> p;
      size_t b = 0;
      while (b <= val.size()) {
        size_t e = val.find(',', b);
        if (e == std::string::npos) e = val.size();
        const std::string tok = val.substr(b, e - b);
        if (!tok.empty()) {
          if (!ParseInt(tok, &n) || n < 0 || n > INT32_MAX)
            return Fail("--prompt-ids: bad token id '" + tok + "'", 2);
          p.push_back(static_cast<int32_t>(n));
        }
        b = e + 1;
      }
      if (p.empty()) return Fail("--prompt-ids: empty prompt", 2);
      prompts.push_back(std::move(p));
    } else if (arg == "--max-tokens" || arg == "--chunk" || arg == "--threads") {
      if (!ParseInt(val, &n) || n < (arg == "--chunk" ? 0 : 1))
        return Fail(arg + ": bad value '" + val + "'", 2);
      (arg == "--max-tokens" ? max_tokens : arg == "--chunk" ? chunk_size : threads) = n;
    } else {
      return Fail("unknown flag " + arg, 2);
    }
  }
  if (model.empty() || prompts.empty() || max_tokens < 1 || logits_out.empty() ||
      tokens_out.empty())
    return Fail("--model, --prompt-ids, --max-tokens, --logits-out and --tokens-out are required",
                2);
  auto weights = V4Weights::Load(model);
  if (!weights.ok()) return Fail(weights.status().message());
  const V4Config& c = (*weights)->config();
  const int64_t V = c.vocab_size, S = static_cast<int64_t>(prompts.size());
  ThreadPool pool(static_cast<int>(threads));
  V4Model m(**weights, pool);
  // One block per sequence, as long as its prompt and decode.
  int64_t longest = 0;
  for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size() + max_tokens);
  const KvLayout layout = m.CacheLayout(KvDType::kF32, false);
  KvBlockStorage cache(layout.num_layers, layout.row_width, longest, S, KvDType::kF32);
  std::vector<int32_t> table(S);
  for (int64_t s = 0; s < S; ++s) table[s] = static_cast<int32_t>(s);
  std::vector<int64_t> length(S, 0);
  std::vector<float> all(S * max_tokens * V), step(S * V);
  std::vector<std::vector<int32_t>> out(S);
  auto take = [&](int64_t s, int64_t i, const float* row) {
    std::copy_n(row, V, &all[(s * max_tokens + i) * V]);
    int32_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (row[v] > row[best]) best = static_cast<int32_t>(v);
    out[s].push_back(best);
  };
  auto chunk = [&](int64_t s, std::vector<int32_t> tokens) {
    SequenceChunk ch{.tokens = std::move(tokens),
                     .sequence_id = static_cast<uint32_t>(s),
                     .start = length[s],
                     .blocks = std::span<const int32_t>(&table[s], 1)};
    length[s] += static_cast<int64_t>(ch.tokens.size());
    return ch;
  };
  for (int64_t s = 0; s < S; ++s) {
    const auto& p = prompts[s];
    const int64_t n = static_cast<int64_t>(p.size()), per = chunk_size > 0 ? chunk_size : n;
    for (int64_t b = 0; b < n; b += per) {
      ForwardBatch batch;
      batch.chunks.push_back(
          chunk(s, std::vector<int32_t>(p.begin() + b, p.begin() + std::min(n, b + per))));
      Status st = m.Forward(batch, cache.view(), step.data());
      if (!st.ok()) return Fail(st.message());
    }
    take(s, 0, step.data());
  }
  for (int64_t i = 1; i < max_tokens; ++i) {
    ForwardBatch batch;
    for (int64_t s = 0; s < S; ++s) batch.chunks.push_back(chunk(s, {out[s].back()}));
    Status st = m.Forward(batch, cache.view(), step.data());
    if (!st.ok()) return Fail(st.message());
    for (int64_t s = 0; s < S; ++s) take(s, i, &step[s * V]);
  }
  if (Status st = WriteNpyF32(logits_out, {S, max_tokens, V}, all.data()); !st.ok())
    return Fail(st.message());
  std::string json = "{\"tokens\": [";
  for (int64_t s = 0; s < S; ++s) {
    json += s ? ", [" : "[";
    for (size_t i = 0; i < out[s].size(); ++i) json += (i ? ", " : "") + std::to_string(out[s][i]);
    json += "]";
  }
  json += "]}\n";
  if (Status st = WriteFileAtomically(tokens_out, json); !st.ok()) return Fail(st.message());
  return 0;
}

}  // namespace
}  // namespace epserve::v4

int main(int argc, char** argv) { return epserve::v4::Main(argc, argv); }
