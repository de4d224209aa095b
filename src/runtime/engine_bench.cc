#include "runtime/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "base/percentile.h"
#include "base/timer.h"

namespace epserve {

namespace {

struct Offered {
  double arrival = 0;  // seconds after the start
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

std::vector<Offered> MakeLoad(const EngineBenchOptions& o, int vocab) {
  std::mt19937_64 rng(o.seed);
  auto uniform = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng);
  };
  std::vector<int32_t> prefix(o.prefix_len);
  for (auto& t : prefix) t = uniform(2, vocab - 1);
  std::vector<Offered> load(o.num_requests);
  double t = 0;
  for (auto& r : load) {
    if (o.rate > 0) t += std::exponential_distribution<double>(o.rate)(rng);
    r.arrival = t;
    const int len = uniform(o.prompt_min, o.prompt_max);
    if (std::uniform_real_distribution<double>(0, 1)(rng) < o.prefix_share)
      r.prompt.assign(prefix.begin(), prefix.begin() + std::min<int>(o.prefix_len, len));
    while (static_cast<int>(r.prompt.size()) < len) r.prompt.push_back(uniform(2, vocab - 1));
    r.max_tokens = uniform(o.output_min, o.output_max);
  }
  return load;
}

struct Timeline {
  double first = -1, last = -1;
  int tokens = 0;
};

void Summarize(const std::vector<Offered>& load, const std::vector<Timeline>& tl, double seconds,
               LoadSummary* s) {
  std::vector<double> ttft, tpot;
  for (size_t i = 0; i < load.size(); ++i) {
    s->prompt_tokens += static_cast<int64_t>(load[i].prompt.size());
    s->output_tokens += tl[i].tokens;
    ttft.push_back(tl[i].first - load[i].arrival);
    if (tl[i].tokens > 1) tpot.push_back((tl[i].last - tl[i].first) / (tl[i].tokens - 1));
  }
  s->seconds = seconds;
  s->tokens_in_per_s = s->prompt_tokens / seconds;
  s->tokens_out_per_s = s->output_tokens / seconds;
  s->ttft_p50 = Percentile(ttft, 0.5), s->ttft_p90 = Percentile(ttft, 0.9),
  s->ttft_p99 = Percentile(ttft, 0.99);
  s->tpot_p50 = Percentile(tpot, 0.5), s->tpot_p90 = Percentile(tpot, 0.9),
  s->tpot_p99 = Percentile(tpot, 0.99);
  s->prefix_hit_rate =
      s->prompt_tokens > 0 ? static_cast<double>(s->cached_prompt_tokens) / s->prompt_tokens : 0;
}

void WaitUntil(double t0, double when) {
  const double now = NowSeconds() - t0;
  if (when > now) std::this_thread::sleep_for(std::chrono::duration<double>(when - now));
}

StatusOr<LoadSummary> RunContinuous(Model& model, const std::vector<Offered>& load,
                                    const EngineOptions& eo) {
  Engine engine(model, eo);
  LoadSummary s{.mode = "continuous"};
  std::vector<Timeline> tl(load.size());
  std::map<RequestId, size_t> index;
  size_t next = 0;
  const double t0 = NowSeconds();
  while (next < load.size() || engine.HasWork()) {
    if (!engine.HasWork()) WaitUntil(t0, load[next].arrival);
    for (const double now = NowSeconds() - t0; next < load.size() && load[next].arrival <= now;
         ++next) {
      ASSIGN_OR_RETURN(RequestId id, engine.Submit({.prompt = load[next].prompt,
                                                    .max_tokens = load[next].max_tokens,
                                                    .use_default_stop = false}));
      index[id] = next;
    }
    ASSIGN_OR_RETURN(std::vector<TokenEvent> events, engine.Step());
    const double now = NowSeconds() - t0;
    for (const TokenEvent& ev : events) {
      Timeline& t = tl[index[ev.request]];
      if (ev.token < 0) continue;
      if (t.tokens++ == 0) t.first = now;
      t.last = now;
    }
  }
  const double seconds = NowSeconds() - t0;
  s.cached_prompt_tokens = engine.stats().cached_prompt_tokens;
  s.computed_tokens = engine.stats().computed_tokens;
  s.steps = engine.stats().steps;
  s.preemptions = engine.stats().preemptions;
  s.draft_tokens = engine.stats().draft_tokens;
  s.accepted_draft_tokens = engine.stats().accepted_draft_tokens;
  s.peak_pool_use = static_cast<double>(engine.stats().peak_blocks_referenced) / eo.num_blocks;
  Summarize(load, tl, seconds, &s);
  return s;
}

StatusOr<LoadSummary> RunStatic(Model& model, const std::vector<Offered>& load,
                                const EngineOptions& eo, int batch) {
  LoadSummary s{.mode = "static"};
  std::vector<Timeline> tl(load.size());
  EngineOptions so = eo;
  so.prefix_cache = false;
  so.max_running = batch;
  so.max_batch_tokens = 1 << 30;  // a closed batch prefills all its prompts in one step
  int64_t peak = 0;
  const double t0 = NowSeconds();
  for (size_t b = 0; b < load.size(); b += batch) {
    const size_t e = std::min(load.size(), b + batch);
    WaitUntil(t0, load[e - 1].arrival);
    Engine engine(model, so);
    int longest = 0;
    for (size_t i = b; i < e; ++i) longest = std::max(longest, load[i].max_tokens);
    std::map<RequestId, size_t> index;
    for (size_t i = b; i < e; ++i) {
      // Every sequence runs as long as the batch's longest; only its own tokens count.
      ASSIGN_OR_RETURN(RequestId id, engine.Submit({.prompt = load[i].prompt,
                                                    .max_tokens = longest,
                                                    .use_default_stop = false}));
      index[id] = i;
    }
    while (engine.HasWork()) {
      ASSIGN_OR_RETURN(std::vector<TokenEvent> events, engine.Step());
      const double now = NowSeconds() - t0;
      for (const TokenEvent& ev : events) {
        const size_t i = index[ev.request];
        Timeline& t = tl[i];
        if (ev.token < 0 || t.tokens >= load[i].max_tokens) continue;
        if (t.tokens++ == 0) t.first = now;
        t.last = now;
      }
    }
    s.computed_tokens += engine.stats().computed_tokens;
    s.steps += engine.stats().steps;
    s.draft_tokens += engine.stats().draft_tokens;
    s.accepted_draft_tokens += engine.stats().accepted_draft_tokens;
    peak = std::max(peak, engine.stats().peak_blocks_referenced);
  }
  s.peak_pool_use = static_cast<double>(peak) / so.num_blocks;
  Summarize(load, tl, NowSeconds() - t0, &s);
  return s;
}

}  // namespace

StatusOr<EngineBenchResult> RunEngineBench(Model& model, const EngineBenchOptions& o) {
  const ModelConfig& c = model.config();
  if (o.num_requests < 1 || o.prompt_min < 1 || o.prompt_max < o.prompt_min || o.output_min < 1 ||
      o.output_max < o.output_min || o.static_batch < 1 || o.rate < 0 || o.prefix_share < 0 ||
      o.prefix_share > 1)
    return Status::InvalidArgument(
        "bench engine: bad load (requests, lengths, batch, rate or prefix share)");
  if (o.prompt_max + o.output_max > c.max_position_embeddings)
    return Status::InvalidArgument(
        "bench engine: prompt + output lengths exceed the model's context");
  std::vector<Offered> load = MakeLoad(o, c.vocab_size);
  EngineOptions eo = o.engine;
  const int64_t longest_blocks = (o.prompt_max + o.output_max + eo.block_size - 1) / eo.block_size;
  if (eo.num_blocks == 0) eo.num_blocks = longest_blocks * std::max(eo.max_running, o.static_batch);
  EngineBenchResult res{.pool_blocks = eo.num_blocks, .block_size = eo.block_size};
  ASSIGN_OR_RETURN(res.continuous, RunContinuous(model, load, eo));
  ASSIGN_OR_RETURN(res.stat, RunStatic(model, load, eo, o.static_batch));
  return res;
}

}  // namespace epserve
