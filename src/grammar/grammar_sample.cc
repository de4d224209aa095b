// grammar_sample: random outputs for each schema of a schemas file (tests/grammar/schemas.json,
// a list of {"name", "schema"}), written as JSON lines {"schema", "output", "complete"} for
// tests/grammar/validate.py to check with an independent JSON Schema validator.
//
// usage: grammar_sample SCHEMAS OUT [TOKENIZER_DIR] [SAMPLES] [MAX_TOKENS]
// Without a tokenizer folder (or when it has no tokenizer.json) a small synthetic byte-level
// vocabulary stands in for DeepSeek-V3's.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "grammar/grammar.h"
#include "grammar/sampling.h"
#include "text/tokenizer.h"

namespace epserve::grammar {
namespace {

std::shared_ptr<const TokenVocab> SyntheticVocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t :
       {"{\"",  "\":",   "\": ",     "\", \"",       "\"}",  "},", "}]",    "[{",      "true",
        "null", "false", "the",      " the",         "ing",  "12", "000",   ".5",      "\\n",
        "\\\"", "\",",   "\xC3\xA9", "\xE6\x97\xA5", "name", "id", "value", "children"}) {
    bytes.push_back(t);
  }
  std::vector<bool> special(bytes.size(), false);
  bytes.push_back("<eos>");
  special.push_back(true);
  const int32_t eos = static_cast<int32_t>(bytes.size()) - 1;
  return TokenVocab::Create(std::move(bytes), std::move(special), {eos});
}

int Run(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SCHEMAS OUT [TOKENIZER_DIR] [SAMPLES] [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  const std::string dir = argc > 3 ? argv[3] : "";
  const int samples = argc > 4 ? std::atoi(argv[4]) : 5;
  const int max_tokens = argc > 5 ? std::atoi(argv[5]) : 400;
  std::shared_ptr<const TokenVocab> vocab;
  if (!dir.empty() && std::filesystem::exists(dir + "/tokenizer.json")) {
    auto tok = text::Tokenizer::Load(dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", tok.status().message().c_str());
      return 1;
    }
    auto v = TokenVocab::FromTokenizer(**tok, {(*tok)->eos_id()});
    if (!v.ok()) {
      std::fprintf(stderr, "%s\n", v.status().message().c_str());
      return 1;
    }
    vocab = *v;
    std::printf("vocabulary: %s (%d ids)\n", dir.c_str(), vocab->size());
  } else {
    vocab = SyntheticVocab();
    std::printf("vocabulary: synthetic (%d ids; no tokenizer at '%s')\n", vocab->size(),
                dir.c_str());
  }
  std::ifstream in(argv[1]);
  const nlohmann::ordered_json schemas = nlohmann::ordered_json::parse(in, nullptr, false);
  if (!schemas.is_array()) {
    std::fprintf(stderr, "%s: expected a JSON array\n", argv[1]);
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary);
  std::mt19937_64 rng(12345);
  int failures = 0, closed = 0;
  int64_t hits = 0, misses = 0;
  std::vector<double> mask_us;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < schemas.size(); ++i) {
    // Every other sample under the pretty-printing whitespace policy.
    std::shared_ptr<const Grammar> grammars[2];
    for (int k = 0; k < 2; ++k) {
      auto g = CompileJsonSchema(
          schemas[i].at("schema"),
          {.whitespace = k == 0 ? Whitespace::kSingleSpace : Whitespace::kPretty});
      if (!g.ok()) {
        std::fprintf(stderr, "schema %zu (%s): %s\n", i,
                     schemas[i].at("name").get<std::string>().c_str(),
                     g.status().message().c_str());
        break;
      }
      grammars[k] = *g;
    }
    if (grammars[1] == nullptr) {
      ++failures;
      continue;
    }
    for (int s = 0; s < samples; ++s) {
      SampleResult r = SampleRandom(grammars[s % 2], vocab, {.max_tokens = max_tokens}, &rng);
      hits += r.cache_hits;
      misses += r.cache_misses;
      mask_us.insert(mask_us.end(), r.mask_us.begin(), r.mask_us.end());
      if (r.closing_steps > 0) ++closed;
      nlohmann::json line = {{"schema", i},
                             {"output", r.bytes},
                             {"complete", r.complete},
                             {"tokens", r.ids.size()},
                             {"dead_end", r.dead_end}};
      try {
        out << line.dump() << '\n';
      } catch (const nlohmann::json::exception& e) {  // the bytes are not valid UTF-8
        std::fprintf(stderr, "schema %zu sample %d: %s\n", i, s, e.what());
        ++failures;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(mask_us.begin(), mask_us.end());
  std::printf(
      "%zu schemas x %d samples in %.1f s; %d neared their %d-token budget and closed;"
      " masks: %zu, p50 %.1f us, p99 %.1f us; cache hits %.1f%%\n",
      schemas.size(), samples, secs, closed, max_tokens, mask_us.size(),
      mask_us.empty() ? 0 : mask_us[mask_us.size() / 2],
      mask_us.empty() ? 0 : mask_us[mask_us.size() * 99 / 100],
      100.0 * hits / std::max<int64_t>(1, hits + misses));
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace epserve::grammar

int main(int argc, char** argv) { return epserve::grammar::Run(argc, argv); }
