#include "runtime/constrained_bench.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/grammar_constraint.h"

namespace epserve {

namespace {

// One batch to its end: the time and tokens of its decode steps (every step after the one
// that prefills the prompts).
struct Decode {
  double seconds = 0;
  int64_t tokens = 0, steps = 0;
};

StatusOr<Decode> RunBatch(Model& model, const ConstrainedBenchOptions& o,
                          const ConstraintFactory& factory, bool constrained, uint64_t seed) {
  const int V = model.config().vocab_size;
  EngineOptions eo{.max_batch_tokens = 4096, .max_running = o.batch, .block_size = 64};
  eo.num_blocks = static_cast<int64_t>(o.batch) * ((o.max_tokens + 64 + 63) / 64 + 1);
  eo.default_stop_ids = model.config().eos_token_ids;
  eo.constraints = factory;
  Engine e(model, eo);
  for (int i = 0; i < o.batch; ++i) {
    EngineRequest r{.prompt = {0, 100 + i % 50, 200, 300 + i % 70},
                    .sampling = {.temperature = 1.0f, .seed = seed + static_cast<uint64_t>(i)},
                    .max_tokens = o.max_tokens};
    if (constrained)
      r.constraint =
          nlohmann::ordered_json{
              {"type", "json_schema"},
              {"schema", nlohmann::ordered_json::parse(o.schemas[i % o.schemas.size()])}}
              .dump();
    for (int32_t& t : r.prompt) t %= V;
    RETURN_IF_ERROR(e.Submit(std::move(r)).status());
  }
  Decode d;
  for (bool first = true; e.HasWork(); first = false) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<TokenEvent> events, e.Step());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t tokens = 0;
    for (const TokenEvent& ev : events) {
      tokens += ev.token >= 0 ? 1 : 0;
      if (ev.finish == FinishReason::kError) return Status::Internal("bench request: " + ev.error);
    }
    if (first) continue;
    d.seconds += dt;
    d.tokens += tokens;
    ++d.steps;
  }
  return d;
}

}  // namespace

StatusOr<ConstrainedBenchResult> RunConstrainedBench(Model& model,
                                                     std::shared_ptr<const text::Tokenizer> tok,
                                                     const ConstrainedBenchOptions& o) {
  if (o.batch < 1 || o.max_tokens < 2 || o.rounds < 1 || o.schemas.empty())
    return Status::InvalidArgument("constrained bench: batch, max_tokens, rounds, schemas");
  const ConstraintFactory factory = GrammarConstraintFactory(tok, model.config().eos_token_ids);
  ConstrainedBenchResult r;
  Decode free, con;
  for (int round = 0; round < o.rounds; ++round) {
    const uint64_t seed = 1000 * static_cast<uint64_t>(round);
    ASSIGN_OR_RETURN(Decode c, RunBatch(model, o, factory, true, seed));
    ASSIGN_OR_RETURN(Decode f, RunBatch(model, o, factory, false, seed));
    con.seconds += c.seconds, con.tokens += c.tokens, con.steps += c.steps;
    free.seconds += f.seconds, free.tokens += f.tokens, free.steps += f.steps;
  }
  auto per = [](double s, int64_t n) { return n > 0 ? s / static_cast<double>(n) : 0.0; };
  r.free_step_s = per(free.seconds, free.steps);
  r.constrained_step_s = per(con.seconds, con.steps);
  r.free_token_s = per(free.seconds, free.tokens);
  r.constrained_token_s = per(con.seconds, con.tokens);
  r.free_steps = free.steps;
  r.constrained_steps = con.steps;
  r.free_tokens = free.tokens;
  r.constrained_tokens = con.tokens;
  return r;
}

}  // namespace epserve
