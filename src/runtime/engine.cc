#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/check.h"

namespace epserve {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

struct Engine::Sequence {
  RequestId id = 0;
  uint32_t sequence_id = 0;
  EngineRequest request;
  Sampler sampler;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  std::vector<int32_t> stop_ids;
  int64_t prompt_len = 0;
  int generated = 0;
  int64_t num_computed = 0;     // positions whose rows are in the cache
  std::vector<int32_t> blocks;  // block table
  std::vector<uint64_t> keys;   // prefix-cache keys of blocks[0, keys.size())
  int64_t cached_prompt_tokens = 0;
  bool running = false, scheduled = false;
  // MTP: the draft token the next decode verifies (-1: none), and for a sampling request the
  // distribution it was drawn from.
  int32_t draft = -1;
  std::vector<float> draft_q;
  LogitsProcessor logits;  // the request's adjustments and constraint

  explicit Sequence(const SamplingOptions& s) : sampler(s) {}
};

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += static_cast<int64_t>(c.tokens.size());
  return n;
}

int64_t StepPlan::num_logits() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.want_logits ? c.num_logits : 0;
  return n;
}

namespace {
template <class T>
void Put(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
void PutVec(std::string& s, const std::vector<T>& v) {
  Put<int64_t>(s, static_cast<int64_t>(v.size()));
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
struct Reader {
  const std::string& s;
  size_t pos = 0;
  template <class T>
  bool Get(T* v) {
    if (pos + sizeof(T) > s.size()) return false;
    std::memcpy(v, s.data() + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  template <class T>
  bool GetVec(std::vector<T>* v) {
    int64_t n;
    if (!Get(&n) || n < 0 || pos + n * sizeof(T) > s.size()) return false;
    v->resize(n);
    std::memcpy(v->data(), s.data() + pos, n * sizeof(T));
    pos += n * sizeof(T);
    return true;
  }
};
}  // namespace

std::string StepPlan::Serialize() const {
  std::string s;
  Put<int64_t>(s, static_cast<int64_t>(chunks.size()));
  for (const auto& c : chunks) {
    Put(s, c.request);
    Put(s, c.sequence_id);
    Put(s, c.start);
    PutVec(s, c.tokens);
    PutVec(s, c.blocks);
    Put<uint8_t>(s, c.want_logits ? 1 : 0);
    Put<int32_t>(s, c.num_logits);
  }
  PutVec(s, hidden_rows);
  return s;
}

StatusOr<StepPlan> StepPlan::Deserialize(const std::string& bytes) {
  Reader r{bytes};
  StepPlan plan;
  int64_t n;
  if (!r.Get(&n) || n < 0) return Status::DataLoss("step plan: bad chunk count");
  plan.chunks.resize(n);
  for (auto& c : plan.chunks) {
    uint8_t want = 0;
    if (!r.Get(&c.request) || !r.Get(&c.sequence_id) || !r.Get(&c.start) || !r.GetVec(&c.tokens) ||
        !r.GetVec(&c.blocks) || !r.Get(&want) || !r.Get(&c.num_logits))
      return Status::DataLoss("step plan: truncated chunk");
    c.want_logits = want != 0;
  }
  if (!r.GetVec(&plan.hidden_rows)) return Status::DataLoss("step plan: truncated hidden rows");
  if (r.pos != bytes.size()) return Status::DataLoss("step plan: trailing bytes");
  return plan;
}

namespace {
// The plan's chunks as the model's batch (views into the plan's vectors).
ForwardBatch ToBatch(const StepPlan& plan) {
  ForwardBatch batch;
  batch.chunks.reserve(plan.chunks.size());
  for (const auto& c : plan.chunks)
    batch.chunks.push_back({.tokens = c.tokens,
                            .sequence_id = c.sequence_id,
                            .start = c.start,
                            .blocks = c.blocks,
                            .want_logits = c.want_logits,
                            .num_logits = c.num_logits});
  return batch;
}
}  // namespace

Status ExecutePlan(ForwardPass& model, const StepPlan& plan, const KvBlocks& kv,
                   std::vector<float>* logits) {
  const ForwardBatch batch = ToBatch(plan);
  logits->resize(std::max<int64_t>(1, plan.num_logits()) * model.vocab_size());
  return model.Forward(batch, kv, logits->data());
}

Status ExecuteDraftPlan(ForwardPass& model, const StepPlan& drafts, const KvBlocks& kv,
                        std::vector<float>* logits) {
  const ForwardBatch batch = ToBatch(drafts);
  logits->resize(std::max<int64_t>(1, drafts.num_logits()) * model.vocab_size());
  return model.ForwardMtp(batch, drafts.hidden_rows, kv, logits->data());
}

Status CheckMtp(const ModelConfig& c, bool mtp) {
  if (mtp && c.num_nextn_predict_layers < 1)
    return Status::InvalidArgument(
        "--mtp on: the model has no MTP module (num_nextn_predict_layers is 0)");
  return Status::Ok();
}

int64_t KvMemoryBlocks(const ModelConfig& c, KvDType dtype, int64_t block_size, int64_t bytes,
                       bool mtp) {
  return KvMemoryBlocks({.num_layers = c.num_hidden_layers + (mtp ? c.num_nextn_predict_layers : 0),
                         .row_width = KvRowWidth(c, dtype)},
                        dtype, block_size, bytes);
}

int64_t KvMemoryBlocks(const KvLayout& layout, KvDType dtype, int64_t block_size, int64_t bytes) {
  const int64_t per_block =
      block_size * layout.num_layers * int64_t{layout.row_width} * KvDTypeBytes(dtype);
  return bytes / per_block;
}

namespace {
KvBlockPoolOptions PoolOptions(const ForwardPass& model, const EngineOptions& o) {
  const KvLayout layout = model.CacheLayout(o.kv_dtype, o.mtp);
  return {.num_layers = layout.num_layers,
          .row_width = layout.row_width,
          .index_bytes = layout.index_bytes,
          .block_size = o.block_size,
          .num_blocks = o.num_blocks,
          .dtype = o.kv_dtype,
          .external = o.kv_storage};
}
}  // namespace

Engine::Engine(ForwardPass& model, const EngineOptions& o)
    : model_(model), options_(o), pool_(PoolOptions(model, o)) {
  CHECK(o.num_blocks > 0 && o.block_size > 0 && o.max_batch_tokens > 0 && o.max_running > 0);
  const Status supported = model.CheckEngineOptions(o.kv_dtype, o.mtp, o.overlap, o.compute);
  CHECK(supported.ok()) << supported.ToString();
  if (o.mtp) model_.SetKeepHidden(true);
  model_.SetOverlap(o.overlap);
  model_.SetCompute(o.compute);
}

Engine::~Engine() = default;

StatusOr<RequestId> Engine::Submit(EngineRequest r) { return Submit(std::move(r), nullptr); }

std::vector<int32_t> Engine::StopIdsOf(const EngineRequest& r) const {
  return !r.stop_ids.empty()
             ? r.stop_ids
             : (r.use_default_stop ? options_.default_stop_ids : std::vector<int32_t>{});
}

StatusOr<std::unique_ptr<TokenConstraint>> Engine::MakeConstraint(const EngineRequest& r) const {
  if (r.constraint.empty()) return std::unique_ptr<TokenConstraint>();
  if (!options_.constraints)
    return Status::InvalidArgument("this engine has no constraint factory (structured outputs)");
  return options_.constraints(r.constraint, StopIdsOf(r));
}

StatusOr<RequestId> Engine::Submit(EngineRequest r, std::unique_ptr<TokenConstraint> constraint) {
  const int vocab = model_.vocab_size();
  if (r.prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= vocab)
      return Status::InvalidArgument("prompt token " + std::to_string(i) + " is " +
                                     std::to_string(r.prompt[i]) + ", outside the vocabulary [0, " +
                                     std::to_string(vocab) + ")");
  if (r.max_tokens < 1)
    return Status::InvalidArgument("max_tokens must be >= 1, got " + std::to_string(r.max_tokens));
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  if (prompt + r.max_tokens > model_.max_positions())
    return Status::InvalidArgument("prompt (" + std::to_string(prompt) + " tokens) + max_tokens (" +
                                   std::to_string(r.max_tokens) +
                                   ") exceeds the model's context of " +
                                   std::to_string(model_.max_positions()));
  // The last sampled token is never fed back, so prompt + max_tokens - 1 positions at most.
  const int64_t positions = prompt + r.max_tokens - 1;
  const int64_t need = (positions + options_.block_size - 1) / options_.block_size;
  if (need > pool_.num_blocks())
    return Status::InvalidArgument(
        "request needs " + std::to_string(positions) + " cache positions (" + std::to_string(need) +
        " blocks of " + std::to_string(options_.block_size) + "); the whole KV pool holds " +
        std::to_string(pool_.num_blocks()) + " blocks (" +
        std::to_string(pool_.num_blocks() * options_.block_size) +
        " positions): raise --kv-memory or lower max_tokens");
  for (int32_t t : r.stop_ids)
    if (t < 0 || t >= vocab)
      return Status::InvalidArgument("stop token " + std::to_string(t) +
                                     " is outside the vocabulary");
  if (r.logprobs > 20)
    return Status::InvalidArgument("logprobs must be at most 20, got " +
                                   std::to_string(r.logprobs));
  for (const auto& [t, bias] : r.adjust.logit_bias)
    if (t < 0 || t >= vocab || std::isnan(bias) || bias == INFINITY)  // -inf: banned
      return Status::InvalidArgument(
          "logit_bias: token " + std::to_string(t) +
          (t < 0 || t >= vocab ? " is outside the vocabulary" : " has a NaN or +inf bias"));
  if (!(r.adjust.repetition_penalty > 0.0f) || !std::isfinite(r.adjust.repetition_penalty))
    return Status::InvalidArgument("repetition_penalty must be > 0");
  if (r.resumed_tokens < 0 || r.resumed_tokens >= prompt)
    return Status::InvalidArgument("resumed_tokens must be in [0, prompt length), got " +
                                   std::to_string(r.resumed_tokens));
  if (r.adjust.min_tokens < 0 || r.adjust.min_tokens > r.max_tokens)
    return Status::InvalidArgument("min_tokens must be in [0, max_tokens], got " +
                                   std::to_string(r.adjust.min_tokens));
  std::vector<int32_t> stop_ids = StopIdsOf(r);
  if (!r.constraint.empty() && constraint == nullptr) {
    StatusOr<std::unique_ptr<TokenConstraint>> made = MakeConstraint(r);
    if (!made.ok()) return made.status();
    constraint = std::move(*made);
  }
  const RequestId id = next_id_++;
  auto s = std::make_unique<Sequence>(r.sampling);
  s->id = id;
  s->sequence_id = r.sequence_id.value_or(static_cast<uint32_t>(id));
  s->tokens = r.prompt;
  s->prompt_len = prompt;
  s->logits = LogitsProcessor(r.adjust, r.prompt, stop_ids, std::move(constraint));
  // A resumed request's earlier output: counted and fed to the constraint as if just drawn.
  for (int64_t i = prompt - r.resumed_tokens; i < prompt; ++i) {
    Status st = s->logits.Accept(r.prompt[i]);
    if (!st.ok())
      return Status::InvalidArgument("resumed token " +
                                     std::to_string(i - (prompt - r.resumed_tokens)) + " (" +
                                     std::to_string(r.prompt[i]) + "): " + st.message());
  }
  s->sampler.SkipDraws(r.resumed_tokens);
  s->stop_ids = std::move(stop_ids);
  s->request = std::move(r);
  s->request.prompt.clear();  // kept in tokens
  stats_.prompt_tokens += prompt;
  sequences_[id] = std::move(s);
  waiting_.push_back(id);
  return id;
}

void Engine::Cancel(RequestId id) {
  if (sequences_.count(id)) pending_cancel_.push_back(id);
}

bool Engine::EnsureBlocks(Sequence& s, int64_t positions) {
  const int64_t need = (positions + options_.block_size - 1) / options_.block_size -
                       static_cast<int64_t>(s.blocks.size());
  if (need <= 0) return true;
  if (need > pool_.num_available()) return false;
  for (int64_t i = 0; i < need; ++i) {
    const int32_t b = pool_.Allocate();
    CHECK(b >= 0);
    s.blocks.push_back(b);
  }
  stats_.peak_blocks_referenced = std::max(stats_.peak_blocks_referenced, pool_.num_referenced());
  return true;
}

void Engine::ReleaseBlocks(Sequence& s) {
  // Later blocks first, so under LRU eviction a prefix's tail goes before its head.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.Release(*it);
  s.blocks.clear();
  s.keys.clear();
  s.num_computed = 0;
  s.draft = -1;  // its MTP rows are gone with the blocks
}

void Engine::Preempt(Sequence& s) {
  ReleaseBlocks(s);
  s.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  waiting_.push_front(s.id);
  ++stats_.preemptions;
}

void Engine::Finish(Sequence& s, FinishReason reason, std::string error,
                    std::vector<TokenEvent>* events) {
  ReleaseBlocks(s);
  if (s.running) running_.erase(std::find(running_.begin(), running_.end(), s.id));
  const RequestId id = s.id;
  if (!events->empty() && events->back().request == id &&
      events->back().finish == FinishReason::kNone) {
    events->back().finish = reason;
    events->back().error = std::move(error);
  } else {
    events->push_back({.request = id, .finish = reason, .error = std::move(error)});
  }
  sequences_.erase(id);
}

void Engine::CommitFullBlocks(Sequence& s) {
  const int64_t bs = options_.block_size;
  while (static_cast<int64_t>(s.keys.size() + 1) * bs <= s.num_computed) {
    const size_t b = s.keys.size();
    const uint64_t parent = b == 0 ? 0 : s.keys[b - 1];
    s.keys.push_back(
        pool_.Commit(s.blocks[b], parent, std::span<const int32_t>(s.tokens).subspan(b * bs, bs)));
  }
}

PlannedChunk Engine::MakeChunk(const Sequence& s, int64_t n) const {
  PlannedChunk c{.request = s.id, .sequence_id = s.sequence_id, .start = s.num_computed};
  const int64_t known = static_cast<int64_t>(s.tokens.size());
  if (s.num_computed + n == known + 1) {  // a decode with its draft: verify both positions
    c.tokens = {s.tokens.back(), s.draft};
    c.num_logits = 2;
  } else {
    c.tokens.assign(s.tokens.begin() + s.num_computed, s.tokens.begin() + s.num_computed + n);
  }
  c.blocks = s.blocks;
  c.want_logits = s.num_computed + n >= known;
  return c;
}

bool Engine::TryAdmit(Sequence& s, int64_t budget, PlannedChunk* chunk) {
  const int64_t len = static_cast<int64_t>(s.tokens.size());
  if (options_.prefix_cache && s.blocks.empty()) {
    // At least the last token is computed, so the step yields its logits.
    s.blocks = pool_.MatchPrefix(s.tokens, (len - 1) / options_.block_size, &s.keys);
    s.num_computed = static_cast<int64_t>(s.blocks.size()) * options_.block_size;
  }
  const int64_t n = std::min(len - s.num_computed, budget);
  if (!EnsureBlocks(s, s.num_computed + n)) {
    ReleaseBlocks(s);
    return false;
  }
  *chunk = MakeChunk(s, n);
  return true;
}

StepPlan Engine::Schedule() {
  StepPlan plan;
  for (RequestId id : pending_cancel_) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    if (!it->second->running) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    Finish(*it->second, FinishReason::kCancelled, "", &early_events_);
  }
  pending_cancel_.clear();
  int64_t budget = options_.max_batch_tokens;
  bool preempted = false;
  // Running requests: decodes first, then prefills in progress; each in admission order.
  for (bool decodes : {true, false}) {
    const std::vector<RequestId> order = running_;
    for (RequestId id : order) {
      if (budget == 0) break;
      auto it = sequences_.find(id);
      if (it == sequences_.end()) continue;
      Sequence& s = *it->second;
      if (!s.running || s.scheduled) continue;
      const int64_t remaining = static_cast<int64_t>(s.tokens.size()) - s.num_computed;
      if ((remaining == 1) != decodes) continue;
      // A draft is verified when the request may still take two tokens and the budget allows.
      const bool draft = decodes && options_.mtp && s.draft >= 0 && budget >= 2 &&
                         s.generated + 1 < s.request.max_tokens;
      const int64_t n = draft ? 2 : std::min(remaining, budget);
      // Out of blocks: preempt the most recently admitted request not in this step (possibly
      // this one), until this one fits.
      while (s.running && !EnsureBlocks(s, s.num_computed + n)) {
        Sequence* victim = &s;
        for (auto r = running_.rbegin(); r != running_.rend(); ++r) {
          Sequence& cand = *sequences_[*r];
          if (!cand.scheduled && cand.id != s.id) {
            victim = &cand;
            break;
          }
        }
        Preempt(*victim);
        preempted = true;
      }
      if (!s.running) continue;
      plan.chunks.push_back(MakeChunk(s, n));
      s.scheduled = true;
      budget -= n;
    }
  }
  // Waiting requests, first come first served, while the budget, the running limit and the
  // pool allow; not in a step that had to preempt (that would only thrash).
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_running) {
    Sequence& s = *sequences_[waiting_.front()];
    PlannedChunk chunk;
    if (!TryAdmit(s, budget, &chunk)) break;
    waiting_.pop_front();
    s.running = s.scheduled = true;
    running_.push_back(s.id);
    if (s.generated == 0) {
      s.cached_prompt_tokens = std::min(s.num_computed, s.prompt_len);
      stats_.cached_prompt_tokens += s.cached_prompt_tokens;
    }
    budget -= static_cast<int64_t>(chunk.tokens.size());
    plan.chunks.push_back(std::move(chunk));
  }
  return plan;
}

std::vector<TokenEvent> Engine::Complete(const StepPlan& plan, const std::vector<float>& logits) {
  std::vector<TokenEvent> events = std::move(early_events_);
  early_events_.clear();
  ++stats_.steps;
  const int V = model_.vocab_size();
  // The chunks whose activations went non-finite in the Forward that ran this plan.
  const std::vector<NonFiniteActivation>& bad = model_.non_finite();
  auto next_bad = bad.begin();
  int64_t row = 0, next_token0 = 0;  // the next chunk's first logits row and token in the pass
  for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
    const PlannedChunk& c = plan.chunks[ci];
    const int64_t token0 = next_token0;
    next_token0 += static_cast<int64_t>(c.tokens.size());
    auto it = sequences_.find(c.request);
    CHECK(it != sequences_.end()) << "plan names request " << c.request
                                  << " the engine does not hold";
    Sequence& s = *it->second;
    s.scheduled = false;
    s.num_computed = c.start + static_cast<int64_t>(c.tokens.size());
    stats_.computed_tokens += static_cast<int64_t>(c.tokens.size());
    while (next_bad != bad.end() && next_bad->chunk < ci) ++next_bad;
    if (next_bad != bad.end() && next_bad->chunk == ci) {
      // Before committing: its cache rows are garbage and must not enter the prefix cache.
      Finish(s, FinishReason::kError, next_bad->Message(), &events);
      continue;
    }
    if (!c.want_logits) {
      if (options_.prefix_cache) CommitFullBlocks(s);
      AddDrafts(s, c, token0, /*want_draft=*/false);
      continue;
    }
    const float* l = &logits[static_cast<size_t>(row) * V];
    row += c.num_logits;
    bool finite = true, nan = false;
    for (int64_t v = 0; v < int64_t{V} * c.num_logits; ++v) {
      finite = finite && std::isfinite(l[v]);
      nan = nan || std::isnan(l[v]);
    }
    if (!finite) {  // the hidden state was finite: the final norm or lm_head made it
      if (c.num_logits == 2) s.num_computed = c.start + 1;  // the draft was never verified
      if (options_.prefix_cache) CommitFullBlocks(s);       // its rows are sound
      Finish(s, FinishReason::kError,
             std::string("lm_head: non-finite logits (") + (nan ? "NaN" : "Inf") +
                 ") at token position " + std::to_string(s.num_computed - 1),
             &events);
      continue;
    }
    // With a draft (2 rows): speculative verification (Sampler::VerifyDraft; greedy output is
    // plain decoding's); a kept draft lets the second row give a token of its own.
    // The request's logit adjustments and constraint apply to the row drawn from (logprobs
    // report the raw row).
    bool accepted = false;
    std::string error;
    const float* p = Adjusted(s, l, &error);
    const int32_t first = p == nullptr ? -1
                          : c.num_logits == 2
                              ? s.sampler.VerifyDraft(p, V, c.tokens[1], s.draft_q, &accepted)
                              : s.sampler.Sample(p, V);
    if (c.num_logits == 2) {
      ++stats_.draft_tokens;
      stats_.accepted_draft_tokens += accepted ? 1 : 0;
      if (!accepted || p == nullptr) s.num_computed = c.start + 1;  // rows overwritten later
    }
    s.draft = -1;
    // No token allowed: a complete constrained output ends as "stop" (Adjusted leaves the
    // error empty), anything else is an error.
    const auto none = [&] { return error.empty() ? FinishReason::kStop : FinishReason::kError; };
    FinishReason reason = first < 0 ? none() : Emit(s, first, l, &error, &events);
    if (accepted && reason == FinishReason::kNone) {
      p = Adjusted(s, l + V, &error);
      reason = p == nullptr ? none() : Emit(s, s.sampler.Sample(p, V), l + V, &error, &events);
    }
    // Commit before finishing: the request's blocks stay in the prefix cache.
    if (options_.prefix_cache) CommitFullBlocks(s);
    if (reason != FinishReason::kNone) {
      Finish(s, reason, error, &events);
      continue;
    }
    AddDrafts(s, c, token0, /*want_draft=*/true);
  }
  return events;
}

const float* Engine::Adjusted(Sequence& s, const float* row, std::string* error) {
  if (!s.logits.active()) return row;
  const int V = model_.vocab_size();
  const float* p = s.logits.Apply(row, V, s.generated, s.request.max_tokens - s.generated);
  for (int v = 0; v < V; ++v)
    if (p[v] > -std::numeric_limits<float>::infinity()) return p;
  // The constraint's output is complete and only a stop token (banned: ignore_eos) could follow.
  if (s.logits.ConstraintComplete()) return nullptr;
  *error = "no token is allowed here (the request's logit_bias and constraint exclude every one)";
  return nullptr;
}

FinishReason Engine::Emit(Sequence& s, int32_t token, const float* l, std::string* error,
                          std::vector<TokenEvent>* events) {
  const int V = model_.vocab_size();
  TokenEvent ev{.request = s.id, .token = token};
  if (s.request.logprobs >= 0) {
    float mx = -INFINITY;
    for (int v = 0; v < V; ++v) mx = std::max(mx, l[v]);
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(static_cast<double>(l[v] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    ev.logprob = l[ev.token] - lse;
    if (s.request.logprobs > 0) {
      std::vector<int32_t> ids(V);
      for (int v = 0; v < V; ++v) ids[v] = v;
      const int k = std::min(s.request.logprobs, V);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                        [l](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
      for (int i = 0; i < k; ++i) ev.top_logprobs.push_back({ids[i], l[ids[i]] - lse});
    }
  }
  if (s.generated == 0) ev.cached_prompt_tokens = s.cached_prompt_tokens;
  if (options_.keep_logits) ev.logits.assign(l, l + V);
  s.tokens.push_back(ev.token);
  ++s.generated;
  ++stats_.generated_tokens;
  FinishReason reason = FinishReason::kNone;
  if (Status accepted = s.logits.Accept(ev.token); !accepted.ok()) {
    *error = accepted.message();
    reason = FinishReason::kError;
  } else if (std::find(s.stop_ids.begin(), s.stop_ids.end(), ev.token) != s.stop_ids.end())
    reason = FinishReason::kStop;
  else if (s.generated >= s.request.max_tokens)
    reason = FinishReason::kLength;
  events->push_back(std::move(ev));
  return reason;
}

void Engine::AddDrafts(const Sequence& s, const PlannedChunk& c, int64_t token0, bool want_draft) {
  if (!options_.mtp) return;
  // Every position this step computed (and kept) has its next token now: the MTP module's
  // rows for them, and from the last one a draft when the request goes on decoding.
  PlannedChunk d{.request = s.id, .sequence_id = s.sequence_id, .start = c.start};
  for (int64_t pos = c.start; pos < s.num_computed; ++pos) {
    d.tokens.push_back(s.tokens[pos + 1]);
    pending_drafts_.hidden_rows.push_back(token0 + (pos - c.start));
  }
  d.blocks = s.blocks;
  d.want_logits = want_draft;
  pending_drafts_.chunks.push_back(std::move(d));
}

StepPlan Engine::ScheduleDrafts() { return std::exchange(pending_drafts_, StepPlan()); }

void Engine::CompleteDrafts(const StepPlan& drafts, const std::vector<float>& logits) {
  const int V = model_.vocab_size();
  int64_t row = 0;
  for (const PlannedChunk& c : drafts.chunks) {
    if (!c.want_logits) continue;
    const float* l = &logits[static_cast<size_t>(row++) * V];
    if (options_.keep_draft_logits)
      draft_logits_.push_back({.request = c.request,
                               .position = c.start + static_cast<int64_t>(c.tokens.size()) - 1,
                               .logits = std::vector<float>(l, l + V)});
    auto it = sequences_.find(c.request);
    if (it == sequences_.end()) continue;
    Sequence& s = *it->second;
    if (!std::all_of(l, l + V, [](float v) { return std::isfinite(v); })) continue;  // no draft
    if (s.sampler.greedy()) {
      s.draft = ArgMax(l, V);
    } else {
      s.sampler.Distribution(l, V, &s.draft_q);
      s.draft = s.sampler.SampleFrom(s.draft_q.data(), V);
    }
  }
}

StatusOr<std::vector<TokenEvent>> Engine::Step() {
  StepPlan plan = Schedule();
  std::vector<float> logits;
  if (!plan.chunks.empty()) RETURN_IF_ERROR(ExecutePlan(model_, plan, pool_.blocks(), &logits));
  std::vector<TokenEvent> events = Complete(plan, logits);
  if (options_.mtp) {
    const StepPlan drafts = ScheduleDrafts();
    if (!drafts.chunks.empty()) {
      RETURN_IF_ERROR(ExecuteDraftPlan(model_, drafts, pool_.blocks(), &logits));
      CompleteDrafts(drafts, logits);
    }
  }
  return events;
}

}  // namespace epserve
