// Fuzzes the grammar compiler and matcher (grammar/, docs/grammar.md) with what a request can
// send: a JSON Schema (response_format, a tool's parameters), or with the prefix "P:" a string
// pattern alone. Whatever compiles is then matched: up to 48 steps of FillMask (and
// FillClosingMask near the end), each taking the lowest and the highest allowed token, where
// every token a mask allows must be accepted (the matcher's own invariant) and the state must
// never be both dead and incomplete. Compilation may refuse an input only with a Status.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "grammar/grammar.h"
#include "grammar/vocab.h"

namespace {

using epserve::grammar::Matcher;
using epserve::grammar::TokenVocab;

// The single bytes, a few multi-byte tokens a JSON output uses, one special token and a stop.
std::shared_ptr<const TokenVocab> Vocab() {
  static const std::shared_ptr<const TokenVocab> v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* t : {"{\"", "\":", "\", \"", "true", "null", "false", "\\u00", "12", "],"})
      bytes.push_back(t);
    std::vector<bool> special(bytes.size(), false);
    bytes.push_back("<special>");
    special.push_back(true);
    bytes.push_back("<stop>");
    special.push_back(true);
    const int32_t stop = static_cast<int32_t>(bytes.size()) - 1;
    return TokenVocab::Create(std::move(bytes), std::move(special), {stop});
  }();
  return v;
}

bool Allowed(const std::vector<uint64_t>& w, int32_t id) { return (w[id >> 6] >> (id & 63)) & 1; }

void Match(std::shared_ptr<const epserve::grammar::Grammar> g, bool lowest) {
  auto vocab = Vocab();
  Matcher m(std::move(g), vocab);
  std::vector<uint64_t> words((vocab->size() + 63) / 64);
  for (int step = 0; step < 48 && !m.IsTerminated() && !m.Overflowed(); ++step) {
    if (step >= 40)
      m.FillClosingMask(words.data());
    else
      m.FillMask(words.data());
    int32_t pick = -1;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (!Allowed(words, id)) continue;
      pick = id;
      if (lowest) break;
    }
    if (pick < 0) {
      if (!m.IsComplete() && !m.Overflowed() && step < 40) {
        std::fprintf(stderr, "empty mask in an incomplete state at step %d\n", step);
        std::abort();
      }
      return;
    }
    Matcher before = m;
    if (!m.AcceptToken(pick) && !m.Overflowed()) {
      std::fprintf(stderr, "token %d allowed by the mask was refused at step %d\n", pick, step);
      std::abort();
    }
    (void)before.MinBytesToComplete();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(epserve::fuzz::AsText(data, size));
  nlohmann::ordered_json schema;
  if (text.rfind("P:", 0) == 0) {
    schema = {{"type", "string"}, {"pattern", text.substr(2)}};
  } else {
    schema = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
  }
  auto g = epserve::grammar::CompileJsonSchema(schema);
  if (!g.ok()) return 0;
  Match(*g, true);
  Match(*g, false);
  return 0;
}
