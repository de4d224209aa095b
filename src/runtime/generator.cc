#include "runtime/generator.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "base/json.h"
#include "base/timer.h"
#include "runtime/lockstep.h"

namespace epserve {

StatusOr<GenerateResult> RunRequests(Engine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& opt) {
  const Lockstep ls{.world = opt.world, .group = opt.group};
  const bool leader = ls.leader();
  GenerateResult res;
  res.requests.resize(requests.size());
  // Submission order: by arrival step, then as given.
  std::vector<size_t> order(requests.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].arrival_step < requests[b].arrival_step;
  });
  size_t next = 0;
  std::map<RequestId, size_t> index_of;  // engine id -> request
  std::multimap<int, size_t> cancels;    // step -> request
  std::map<size_t, RequestId> id_of;
  for (size_t i = 0; i < requests.size(); ++i)
    if (requests[i].cancel_step >= 0) cancels.insert({requests[i].cancel_step, i});
  const double t_begin = NowSeconds();
  std::vector<float> logits;
  int64_t decode_positions = 0;  // positions decodes computed (drafts included)
  for (int step = 0;; ++step) {
    if (opt.on_step) opt.on_step(step);
    StepPlan plan;
    StepVote vote;
    if (leader) {
      for (; next < order.size() && requests[order[next]].arrival_step <= step; ++next) {
        const size_t i = order[next];
        const GenerateRequest& g = requests[i];
        RequestResult& r = res.requests[i];
        r.arrival_step = step;
        r.arrival_seconds = NowSeconds() - t_begin;
        auto id = engine.Submit({.prompt = g.prompt,
                                 .sampling = g.sampling,
                                 .max_tokens = g.max_tokens,
                                 .stop_ids = g.stop_ids,
                                 .use_default_stop = !g.ignore_eos,
                                 .sequence_id = g.sequence_id});
        if (!id.ok()) {
          r.finish = FinishReason::kError;
          r.error = id.status().message();
          r.finish_step = step;
          continue;
        }
        index_of[*id] = i;
        id_of[i] = *id;
      }
      for (auto it = cancels.begin(); it != cancels.end() && it->first <= step;) {
        if (id_of.count(it->second)) engine.Cancel(id_of[it->second]);
        it = cancels.erase(it);
      }
      plan = engine.Schedule();
      vote.active = (!plan.chunks.empty() || engine.HasWork() || next < order.size()) ? 1 : 0;
    }
    if (opt.participant != nullptr) opt.participant->Vote(&vote);
    RETURN_IF_ERROR(AgreeStep(ls, &vote));
    if (vote.active != 0 && opt.participant != nullptr)
      RETURN_IF_ERROR(opt.participant->AfterVote(vote));
    if (vote.active == 0) {
      // The plan is empty; Complete still hands out what this step's Schedule cancelled.
      if (leader) {
        for (TokenEvent& ev : engine.Complete(plan, logits)) {
          RequestResult& r = res.requests[index_of[ev.request]];
          r.finish = ev.finish;
          r.finish_step = step;
        }
      }
      break;
    }
    const double t0 = NowSeconds();
    RETURN_IF_ERROR(RunStepPlan(ls, engine.model(), &plan, engine.pool().blocks(), &logits));
    bool prefill = false;
    int64_t decode_tokens = 0;
    for (const auto& c : plan.chunks) {
      if ((c.tokens.size() == 1 || c.num_logits == 2) && c.want_logits && c.start > 0) {
        ++decode_tokens;  // a decode (or a 1-token tail); with a draft, + its acceptance below
        decode_positions += static_cast<int64_t>(c.tokens.size());
      } else {
        prefill = true;
      }
    }
    ++res.steps;
    if (!prefill) ++res.decode_steps;
    if (!leader) {
      // A follower replays the leader's plan on its own replica of the cache; blocks are
      // assigned by the leader, so its pool needs no bookkeeping.
      RETURN_IF_ERROR(RunDrafts(ls, engine, &logits));
      (prefill ? res.prefill_seconds : res.decode_seconds) += NowSeconds() - t0;
      continue;
    }
    const int64_t accepted_before = engine.stats().accepted_draft_tokens;
    std::vector<TokenEvent> events = engine.Complete(plan, logits);
    RETURN_IF_ERROR(RunDrafts(ls, engine, &logits));
    (prefill ? res.prefill_seconds : res.decode_seconds) += NowSeconds() - t0;
    decode_tokens += engine.stats().accepted_draft_tokens - accepted_before;
    for (DraftLogits& d : engine.TakeDraftLogits()) {
      RequestResult& r = res.requests[index_of[d.request]];
      r.draft_positions.push_back(d.position);
      r.draft_logits.insert(r.draft_logits.end(), d.logits.begin(), d.logits.end());
    }
    const double now = NowSeconds() - t_begin;
    for (TokenEvent& ev : events) {
      RequestResult& r = res.requests[index_of[ev.request]];
      if (ev.token >= 0) {
        if (r.tokens.empty()) {
          r.first_token_step = step;
          r.first_token_seconds = now;
          r.cached_prompt_tokens = ev.cached_prompt_tokens;
        }
        r.tokens.push_back(ev.token);
        if (opt.keep_logits) r.logits.insert(r.logits.end(), ev.logits.begin(), ev.logits.end());
      }
      if (ev.finish != FinishReason::kNone) {
        r.finish = ev.finish;
        r.error = ev.error;
        r.finish_step = step;
        r.finish_seconds = now;
      }
    }
    res.decode_tokens += decode_tokens;
  }
  res.seconds = NowSeconds() - t_begin;
  res.stats = engine.stats();
  res.prefill_tokens = res.stats.computed_tokens - decode_positions;
  return res;
}

int64_t BlocksForAll(const std::vector<GenerateRequest>& requests, int64_t block_size) {
  int64_t blocks = 0;
  for (const auto& r : requests)
    blocks += (static_cast<int64_t>(r.prompt.size()) + r.max_tokens + block_size - 1) / block_size;
  return std::max<int64_t>(blocks, 1);
}

StatusOr<std::vector<GenerateRequest>> ReadArrivals(const std::string& path,
                                                    int default_max_tokens) {
  std::ifstream in(path);
  if (!in) return Status::IoError(path + ": cannot open");
  std::vector<GenerateRequest> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(line, where));
    if (!j.is_object())
      return Status::InvalidArgument(where + ": expected a JSON object, got " + j.type_name());
    GenerateRequest g;
    g.max_tokens = default_max_tokens;
    g.sequence_id = static_cast<uint32_t>(out.size());
    auto get_int = [&](const char* key, auto* v) -> Status {
      if (!j.contains(key)) return Status::Ok();
      if (!j[key].is_number_integer())
        return Status::InvalidArgument(where + ": \"" + key + "\" must be an integer");
      *v = j[key].get<std::remove_pointer_t<decltype(v)>>();
      return Status::Ok();
    };
    auto get_num = [&](const char* key, float* v) -> Status {
      if (!j.contains(key)) return Status::Ok();
      if (!j[key].is_number())
        return Status::InvalidArgument(where + ": \"" + key + "\" must be a number");
      *v = j[key].get<float>();
      return Status::Ok();
    };
    auto get_ids = [&](const char* key, std::vector<int32_t>* v) -> Status {
      if (!j.contains(key)) return Status::Ok();
      if (!j[key].is_array())
        return Status::InvalidArgument(where + ": \"" + key + "\" must be an array of token ids");
      for (const auto& x : j[key]) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          return Status::InvalidArgument(where + ": \"" + key + "\" holds " + x.dump() +
                                         ", not a token id");
        v->push_back(x.get<int32_t>());
      }
      return Status::Ok();
    };
    if (!j.contains("prompt_ids"))
      return Status::InvalidArgument(where + ": missing \"prompt_ids\"");
    RETURN_IF_ERROR(get_ids("prompt_ids", &g.prompt));
    RETURN_IF_ERROR(get_ids("stop_ids", &g.stop_ids));
    RETURN_IF_ERROR(get_int("step", &g.arrival_step));
    RETURN_IF_ERROR(get_int("max_tokens", &g.max_tokens));
    RETURN_IF_ERROR(get_int("cancel_step", &g.cancel_step));
    RETURN_IF_ERROR(get_int("top_k", &g.sampling.top_k));
    RETURN_IF_ERROR(get_int("seed", &g.sampling.seed));
    RETURN_IF_ERROR(get_num("temperature", &g.sampling.temperature));
    RETURN_IF_ERROR(get_num("top_p", &g.sampling.top_p));
    if (j.contains("ignore_eos")) {
      if (!j["ignore_eos"].is_boolean())
        return Status::InvalidArgument(where + ": \"ignore_eos\" must be true or false");
      g.ignore_eos = j["ignore_eos"].get<bool>();
    }
    if (g.arrival_step < 0) return Status::InvalidArgument(where + ": \"step\" must be >= 0");
    if (g.max_tokens < 1) return Status::InvalidArgument(where + ": \"max_tokens\" must be >= 1");
    if (g.sampling.top_k < 0) return Status::InvalidArgument(where + ": \"top_k\" must be >= 0");
    if (!std::isfinite(g.sampling.temperature) || g.sampling.temperature < 0)
      return Status::InvalidArgument(where + ": \"temperature\" must be a finite number >= 0");
    if (!(g.sampling.top_p > 0 && g.sampling.top_p <= 1))
      return Status::InvalidArgument(where + ": \"top_p\" must be in (0, 1]");
    out.push_back(std::move(g));
  }
  if (out.empty()) return Status::InvalidArgument(path + ": no requests");
  return out;
}

}  // namespace epserve
