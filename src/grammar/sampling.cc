#include "grammar/sampling.h"

#include <bit>
#include <chrono>

#include "grammar/matcher.h"
#include "grammar/vocab.h"

namespace epserve::grammar {

int32_t NthSetBit(const uint64_t* words, size_t num_words, int64_t r) {
  for (size_t w = 0; w < num_words; ++w) {
    const int c = std::popcount(words[w]);
    if (r >= c) {
      r -= c;
      continue;
    }
    uint64_t x = words[w];
    for (int64_t k = 0; k < r; ++k) x &= x - 1;
    return static_cast<int32_t>(w * 64 + std::countr_zero(x));
  }
  return -1;
}

SampleResult SampleRandom(std::shared_ptr<const Grammar> grammar,
                          std::shared_ptr<const TokenVocab> vocab, const SampleOptions& options,
                          std::mt19937_64* rng) {
  SampleResult out;
  Matcher m(grammar, vocab);
  const size_t num_words = (static_cast<size_t>(vocab->size()) + 63) / 64;
  std::vector<uint64_t> words(num_words);
  std::uniform_real_distribution<double> unit(0, 1);
  bool closing = false;
  for (int step = 0; step < options.max_tokens && !m.IsTerminated(); ++step) {
    const int64_t remaining = options.max_tokens - step;
    // Sticky: a multi-byte closing token can drop the distance by more than one per token,
    // and leaving closing mode then would let the output grow again.
    closing = closing || remaining <= m.MinBytesToComplete() + options.closing_margin;
    const int64_t hits_before = m.cache_stats().hits;
    const auto t0 = std::chrono::steady_clock::now();
    if (closing) {
      m.FillClosingMask(words.data());
    } else {
      m.FillMask(words.data());
    }
    out.mask_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    out.step_closing.push_back(closing ? 1 : 0);
    out.step_hit.push_back(m.cache_stats().hits > hits_before ? 1 : 0);
    out.closing_steps += closing ? 1 : 0;
    if (m.IsComplete() && !vocab->stop_ids().empty() && unit(*rng) < options.stop_probability) {
      const int32_t stop = vocab->stop_ids()[0];
      CHECK(m.AcceptToken(stop));
      out.ids.push_back(stop);
      break;
    }
    if (m.IsComplete()) {  // do not pick the stop id by chance below
      for (int32_t id : vocab->stop_ids()) words[id >> 6] &= ~(uint64_t{1} << (id & 63));
    }
    int64_t count = 0;
    for (size_t w = 0; w < num_words; ++w) count += std::popcount(words[w]);
    if (count == 0) {
      out.dead_end = !m.IsComplete();
      break;
    }
    const int32_t id = NthSetBit(words.data(), num_words,
                                 std::uniform_int_distribution<int64_t>(0, count - 1)(*rng));
    const auto t1 = std::chrono::steady_clock::now();
    const bool accepted = m.AcceptToken(id);
    out.accept_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count());
    CHECK(accepted) << "token " << id << " was in the mask but not accepted";
    out.ids.push_back(id);
    if (!vocab->is_special(id)) out.bytes += vocab->bytes(id);
  }
  out.complete = m.IsComplete();
  out.cache_hits = m.cache_stats().hits;
  out.cache_misses = m.cache_stats().misses;
  return out;
}

}  // namespace epserve::grammar
