// Random generation under a grammar: what a model with random logits would produce with the
// matcher's masks applied. Used by the property tests (grammar_sample), the brute-force mask
// checks and `epserve bench grammar`; not by the server.
// Each step draws uniformly among the allowed tokens (random logits at temperature 1 come
// close to that: no token stands out) from FillMask, or from FillClosingMask once the
// remaining token budget is within `closing_margin` of MinBytesToComplete, so the output
// closes instead of being cut; then a stop id once complete (when the vocabulary has one).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace epserve::grammar {

class Grammar;
class TokenVocab;

struct SampleOptions {
  int max_tokens = 400;  // including the stop id
  // Closing masks once remaining <= MinBytesToComplete + this. One token can raise the
  // distance by many bytes (opening an object with required properties), so the margin must
  // cover the largest such jump of the schema; 64 covers the test schemas.
  int closing_margin = 64;
  double stop_probability = 1.0;  // when a stop id is allowed, take it with this probability
};

struct SampleResult {
  std::vector<int32_t> ids;
  std::string bytes;                  // the non-special tokens' bytes, in order
  bool complete = false;              // the grammar was complete at the end (terminated or not)
  bool dead_end = false;              // a mask came back empty before completion
  int closing_steps = 0;              // steps that used FillClosingMask
  std::vector<uint8_t> step_closing;  // per mask_us entry: 1 when it was a closing mask
  std::vector<uint8_t> step_hit;      // per mask_us entry: 1 when FillMask hit the cache
  std::vector<double> accept_us;      // time of each AcceptToken call
  std::vector<double> mask_us;        // time of each FillMask / FillClosingMask call
  int64_t cache_hits = 0, cache_misses = 0;
};

SampleResult SampleRandom(std::shared_ptr<const Grammar> grammar,
                          std::shared_ptr<const TokenVocab> vocab, const SampleOptions& options,
                          std::mt19937_64* rng);

// The index of the r-th set bit (r < popcount) of words[0 .. num_words).
int32_t NthSetBit(const uint64_t* words, size_t num_words, int64_t r);

}  // namespace epserve::grammar
