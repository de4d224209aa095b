#include "rpc/wire.h"

namespace epserve::rpc {

EngineRequest FromProto(const GenerateRequest& m) {
  EngineRequest r;
  r.prompt.assign(m.prompt().begin(), m.prompt().end());
  r.sampling = {.temperature = m.sampling().temperature(),
                .top_p = m.sampling().top_p(),
                .top_k = m.sampling().top_k(),
                .min_p = m.sampling().min_p(),
                .seed = m.sampling().seed()};
  r.adjust.presence_penalty = m.presence_penalty();
  r.adjust.frequency_penalty = m.frequency_penalty();
  r.adjust.repetition_penalty = m.repetition_penalty() == 0.0f ? 1.0f : m.repetition_penalty();
  for (const auto& b : m.logit_bias()) r.adjust.logit_bias.emplace_back(b.token(), b.bias());
  r.adjust.min_tokens = m.min_tokens();
  r.constraint = m.constraint();
  r.max_tokens = m.max_tokens();
  r.stop_ids.assign(m.stop_ids().begin(), m.stop_ids().end());
  r.use_default_stop = m.use_default_stop();
  r.logprobs = m.logprobs();
  r.resumed_tokens = m.resumed_tokens();
  return r;
}

void ToProto(const EngineRequest& r, GenerateRequest* m) {
  for (int32_t t : r.prompt) m->add_prompt(t);
  m->mutable_sampling()->set_temperature(r.sampling.temperature);
  m->mutable_sampling()->set_top_p(r.sampling.top_p);
  m->mutable_sampling()->set_top_k(r.sampling.top_k);
  m->mutable_sampling()->set_seed(r.sampling.seed);
  m->mutable_sampling()->set_min_p(r.sampling.min_p);
  m->set_presence_penalty(r.adjust.presence_penalty);
  m->set_frequency_penalty(r.adjust.frequency_penalty);
  m->set_repetition_penalty(r.adjust.repetition_penalty);
  for (const auto& [token, bias] : r.adjust.logit_bias) {
    LogitBias* b = m->add_logit_bias();
    b->set_token(token);
    b->set_bias(bias);
  }
  m->set_min_tokens(r.adjust.min_tokens);
  m->set_constraint(r.constraint);
  m->set_max_tokens(r.max_tokens);
  for (int32_t t : r.stop_ids) m->add_stop_ids(t);
  m->set_use_default_stop(r.use_default_stop);
  m->set_logprobs(r.logprobs);
  m->set_resumed_tokens(r.resumed_tokens);
}

TokenEvent FromProto(const Event& m) {
  TokenEvent ev;
  ev.token = m.token();
  ev.logprob = m.logprob();
  for (const auto& t : m.top_logprobs()) ev.top_logprobs.emplace_back(t.token(), t.logprob());
  if (!m.finish().empty() && !ParseFinishReason(m.finish(), &ev.finish)) {
    ev.finish = FinishReason::kError;
    ev.error = "the engine sent an unknown finish reason \"" + m.finish() + "\"";
    return ev;
  }
  ev.error = m.error();
  ev.cached_prompt_tokens = m.cached_prompt_tokens();
  ev.retryable = m.retryable();
  return ev;
}

void ToProto(const TokenEvent& ev, Event* m) {
  m->set_token(ev.token);
  m->set_logprob(ev.logprob);
  for (const auto& [t, lp] : ev.top_logprobs) {
    TopLogprob* x = m->add_top_logprobs();
    x->set_token(t);
    x->set_logprob(lp);
  }
  if (ev.finish != FinishReason::kNone) m->set_finish(FinishReasonName(ev.finish));
  m->set_error(ev.error);
  m->set_cached_prompt_tokens(ev.cached_prompt_tokens);
  m->set_retryable(ev.retryable);
}

WorkerMetrics FromProto(const LoadReply& m) {
  WorkerMetrics w;
  w.num_running = m.running();
  w.num_waiting = m.waiting();
  w.kv_blocks_total = m.kv_blocks_total();
  w.kv_blocks_used = m.kv_blocks_used();
  w.prompt_tokens = m.prompt_tokens();
  w.generation_tokens = m.generation_tokens();
  w.prefix_cache_queries = m.prefix_cache_queries();
  w.prefix_cache_hits = m.prefix_cache_hits();
  w.spec_draft_tokens = m.spec_draft_tokens();
  w.spec_accepted_tokens = m.spec_accepted_tokens();
  w.stalled_ms = m.stalled_ms();
  w.replacements = m.replacements();
  w.replacement_bytes = m.replacement_bytes();
  w.replacement_pause_seconds = m.replacement_pause_seconds();
  w.cross_copies_before = m.cross_copies_before();
  w.cross_copies_since = m.cross_copies_since();
  w.grammar_cache_bytes = m.grammar_cache_bytes();
  w.grammar_cache_entries = m.grammar_cache_entries();
  w.grammar_compile_seconds = m.grammar_compile_seconds();
  for (const auto& [k, v] : m.finished()) w.finished[k] = v;
  return w;
}

void ToProto(const WorkerMetrics& w, LoadReply* m) {
  m->set_running(w.num_running);
  m->set_waiting(w.num_waiting);
  m->set_kv_blocks_total(w.kv_blocks_total);
  m->set_kv_blocks_used(w.kv_blocks_used);
  m->set_prompt_tokens(w.prompt_tokens);
  m->set_generation_tokens(w.generation_tokens);
  m->set_prefix_cache_queries(w.prefix_cache_queries);
  m->set_prefix_cache_hits(w.prefix_cache_hits);
  m->set_spec_draft_tokens(w.spec_draft_tokens);
  m->set_spec_accepted_tokens(w.spec_accepted_tokens);
  m->set_stalled_ms(w.stalled_ms);
  m->set_replacements(w.replacements);
  m->set_replacement_bytes(w.replacement_bytes);
  m->set_replacement_pause_seconds(w.replacement_pause_seconds);
  m->set_cross_copies_before(w.cross_copies_before);
  m->set_cross_copies_since(w.cross_copies_since);
  m->set_grammar_cache_bytes(w.grammar_cache_bytes);
  m->set_grammar_cache_entries(w.grammar_cache_entries);
  m->set_grammar_compile_seconds(w.grammar_compile_seconds);
  for (const auto& [k, v] : w.finished) (*m->mutable_finished())[k] = v;
}

bool ParseFinishReason(const std::string& name, FinishReason* reason) {
  for (FinishReason r :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled, FinishReason::kError})
    if (name == FinishReasonName(r)) {
      *reason = r;
      return true;
    }
  return false;
}

grpc::Status ToGrpc(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, st.message()};
    case StatusCode::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, st.message()};
    default:
      return {grpc::StatusCode::INTERNAL, st.message()};
  }
}

Status FromGrpc(const grpc::Status& st, const std::string& who) {
  if (st.ok()) return Status::Ok();
  if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
    return Status::InvalidArgument(st.error_message());
  return Status::Unavailable(who + ": " + st.error_message());
}

}  // namespace epserve::rpc
