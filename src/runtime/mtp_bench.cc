#include "runtime/mtp_bench.h"

#include <algorithm>
#include <random>

#include "base/percentile.h"
#include "runtime/generator.h"

namespace epserve {

namespace {

std::vector<GenerateRequest> MakeRequests(const MtpBenchOptions& o, int batch, int vocab) {
  std::mt19937_64 rng(o.seed);
  // Ids from 2 up skip DeepSeek's BOS and EOS.
  std::uniform_int_distribution<int32_t> id(2, std::max(2, vocab - 1));
  std::vector<GenerateRequest> reqs(batch);
  for (int i = 0; i < batch; ++i) {
    reqs[i].prompt.resize(o.prompt_len);
    for (int32_t& t : reqs[i].prompt) t = id(rng);
    reqs[i].max_tokens = o.decode_tokens;
    reqs[i].ignore_eos = true;
    reqs[i].sequence_id = static_cast<uint32_t>(i);
  }
  return reqs;
}

struct Run {
  double tokens_per_s = 0, step_ms = 0;
  int64_t drafts = 0, accepted = 0;
  std::vector<std::vector<int32_t>> tokens;
};

StatusOr<Run> RunOnce(Model& model, const std::vector<GenerateRequest>& reqs, EngineOptions eo) {
  Engine engine(model, eo);
  ASSIGN_OR_RETURN(GenerateResult res, RunRequests(engine, reqs, {}));
  Run r;
  r.tokens_per_s = res.decode_seconds > 0 ? res.decode_tokens / res.decode_seconds : 0;
  r.step_ms = res.decode_steps > 0 ? 1e3 * res.decode_seconds / res.decode_steps : 0;
  r.drafts = res.stats.draft_tokens;
  r.accepted = res.stats.accepted_draft_tokens;
  for (RequestResult& q : res.requests) {
    if (!q.error.empty()) return Status::Internal("bench request failed: " + q.error);
    r.tokens.push_back(std::move(q.tokens));
  }
  return r;
}

}  // namespace

StatusOr<std::vector<MtpBenchRow>> RunMtpBench(Model& model, const MtpBenchOptions& o) {
  RETURN_IF_ERROR(CheckMtp(model.config(), true));
  if (o.batches.empty()) return Status::InvalidArgument("no batch sizes");
  if (o.prompt_len < 1 || o.decode_tokens < 2 || o.repeats < 1)
    return Status::InvalidArgument(
        "bench mtp needs prompts of >= 1 token, >= 2 output tokens and >= 1 repeat");
  std::vector<MtpBenchRow> rows;
  for (int batch : o.batches) {
    if (batch < 1) return Status::InvalidArgument("batch sizes must be >= 1");
    const std::vector<GenerateRequest> reqs = MakeRequests(o, batch, model.config().vocab_size);
    EngineOptions eo = o.engine;
    eo.max_running = std::max(eo.max_running, batch);
    // Room for every decode's draft (2 tokens each) in one step, so a step never splits them.
    eo.max_batch_tokens = std::max<int64_t>(eo.max_batch_tokens, 2 * batch);
    eo.num_blocks = BlocksForAll(reqs, eo.block_size);
    std::vector<double> off_tps, on_tps, off_step, on_step;
    MtpBenchRow row{.batch = batch, .identical = true};
    std::vector<std::vector<int32_t>> want;
    for (int rep = 0; rep < o.repeats; ++rep) {
      for (int k = 0; k < 2; ++k) {
        const bool mtp = (k == 0) == (rep % 2 == 1);  // off, on | on, off | ...
        eo.mtp = mtp;
        ASSIGN_OR_RETURN(Run r, RunOnce(model, reqs, eo));
        if (want.empty() && !mtp) want = r.tokens;
        if (!want.empty() && r.tokens != want) row.identical = false;
        (mtp ? on_tps : off_tps).push_back(r.tokens_per_s);
        (mtp ? on_step : off_step).push_back(r.step_ms);
        if (mtp) {
          row.draft_tokens = r.drafts;
          row.accepted_draft_tokens = r.accepted;
        }
      }
    }
    row.off_tokens_per_s = Percentile(off_tps, 0.5);
    row.on_tokens_per_s = Percentile(on_tps, 0.5);
    row.off_step_ms = Percentile(off_step, 0.5);
    row.on_step_ms = Percentile(on_step, 0.5);
    row.speedup = row.off_tokens_per_s > 0 ? row.on_tokens_per_s / row.off_tokens_per_s : 0;
    row.acceptance = row.draft_tokens > 0
                         ? static_cast<double>(row.accepted_draft_tokens) / row.draft_tokens
                         : 0;
    row.tokens_per_step = 1 + row.acceptance;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace epserve
