#include "serve/chat_output.h"

#include <algorithm>

#include "base/check.h"

namespace epserve::serve {
namespace {

constexpr std::string_view kMarkerText[] = {
    "<think>",
    "</think>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
};
constexpr std::string_view kDsmlToken = "｜DSML｜";
// V3.2's (DSML) markers in the same order; it has no separator ("": not parsed). An invoke's
// name attribute is the start of the call's body.
constexpr std::string_view kDsmlMarkerText[] = {
    "<think>",
    "</think>",
    "<｜DSML｜function_calls>",
    "</｜DSML｜function_calls>",
    "<｜DSML｜invoke",
    "</｜DSML｜invoke>",
    "",
};
// V4's: V3.2's with the block named tool_calls.
constexpr std::string_view kDsmlV4MarkerText[] = {
    "<think>",
    "</think>",
    "<｜DSML｜tool_calls>",
    "</｜DSML｜tool_calls>",
    "<｜DSML｜invoke",
    "</｜DSML｜invoke>",
    "",
};

bool IsSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

size_t LeadingSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

// The longest proper prefix of `marker` that `text` ends with.
size_t PartialSuffix(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

}  // namespace

ChatOutput::ChatOutput(const text::Tokenizer& tokenizer, ChatOutputOptions options)
    : options_(std::move(options)), decoder_(tokenizer, {.skip_special_tokens = true}) {
  std::erase(options_.stop, std::string());
  const bool dsml = IsDsml(options_.tools);
  for (int m = 0; m < kNumMarkers; ++m) {
    marker_text_[m] = options_.tools == ToolCallFormat::kDeepSeekV4 ? kDsmlV4MarkerText[m]
                      : dsml                                        ? kDsmlMarkerText[m]
                                                                    : kMarkerText[m];
    const bool parsed = m <= kThinkClose
                            ? options_.reasoning != ReasoningMode::kNone
                            : options_.tools != ToolCallFormat::kNone && !marker_text_[m].empty();
    marker_ids_[m] = parsed ? tokenizer.TokenToId(marker_text_[m]) : -1;
    text_markers_[m] = parsed && marker_ids_[m] < 0;
  }
  // Where ｜DSML｜ is one token, it is put back in the text (the decoder would skip it as
  // special), where the markers are matched.
  dsml_id_ = dsml ? tokenizer.TokenToId(kDsmlToken) : -1;
  std::random_device seed;
  std::seed_seq seq{seed(), seed(), seed(), seed()};
  rng_.seed(seq);
  state_ = options_.reasoning == ReasoningMode::kNone ? State::kContent : State::kStart;
}

int64_t ChatOutput::reasoning_tokens() const {
  return state_ == State::kReasoning ? num_ids_ : reasoning_tokens_;
}

ChatOutput::Marker ChatOutput::MarkerOfId(int32_t id) const {
  for (int m = 0; m < kNumMarkers; ++m)
    if (marker_ids_[m] >= 0 && marker_ids_[m] == id) return static_cast<Marker>(m);
  return kNoMarker;
}

// V3.2 in content (or before it): trailing whitespace is held back, as it may precede a call.
bool ChatOutput::HoldsSpaceBeforeCalls() const {
  return IsDsml(options_.tools) && (state_ == State::kContent || state_ == State::kSkipSpace);
}

bool ChatOutput::TextMarkerActive(Marker m) const {
  if (!text_markers_[m]) return false;
  switch (state_) {
    case State::kStart:  // ResolveStart looks for <think>
      return false;
    case State::kReasoning:
      return m == kThinkClose || m == kCallsBegin || m == kCallBegin;
    case State::kSkipSpace:
    case State::kContent:
    case State::kCall:
      return m >= kCallsBegin;
  }
  return false;
}

void ChatOutput::Add(int32_t id, std::vector<ChatDelta>* out) {
  if (stopped_) return;
  out_ = out;
  ++num_ids_;
  const Marker m = MarkerOfId(id);
  if (dsml_id_ >= 0 && id == dsml_id_) {
    pending_ += decoder_.Finish();
    pending_ += kDsmlToken;
    Scan(RunEnd::kMayContinue);
  } else if (m == kNoMarker) {
    // An id the tokenizer does not define (a random model's vocabulary may be larger) adds no
    // text.
    StatusOr<std::string> piece = decoder_.Add(id);
    if (piece.ok()) pending_ += *piece;
    Scan(RunEnd::kMayContinue);
  } else {
    EndTextRun();
    if (!stopped_) OnMarker(m);
  }
  out_ = nullptr;
}

void ChatOutput::Finish(std::vector<ChatDelta>* out) {
  if (stopped_) return;
  out_ = out;
  EndTextRun();
  if (!stopped_ && state_ == State::kStart) {  // only whitespace came
    state_ = options_.reasoning == ReasoningMode::kStartsInReasoning ? State::kReasoning
                                                                     : State::kContent;
    std::string rest;
    rest.swap(pending_);
    OnText(rest);
  }
  if (state_ == State::kCall) {
    truncated_ = true;
    state_ = State::kSkipSpace;
  }
  FlushContent();
  out_ = nullptr;
}

void ChatOutput::EndTextRun() {
  pending_ += decoder_.Finish();
  Scan(RunEnd::kEnded);
}

// Splits pending_ at the text markers active in the current state; holds back (unless the run
// ended) a tail that could begin one.
void ChatOutput::Scan(RunEnd run) {
  while (!stopped_) {
    if (state_ == State::kStart) {
      if (!ResolveStart(run)) return;
      continue;
    }
    size_t best = std::string::npos;
    Marker found = kNoMarker;
    for (int m = 0; m < kNumMarkers; ++m) {
      if (!TextMarkerActive(static_cast<Marker>(m))) continue;
      const size_t pos = pending_.find(marker_text_[m]);
      if (pos < best) best = pos, found = static_cast<Marker>(m);
    }
    if (found != kNoMarker) {
      std::string before = pending_.substr(0, best);
      pending_.erase(0, best + marker_text_[found].size());
      // V3.2 writes "\n\n" before its calls: whitespace before a call is not content.
      if (HoldsSpaceBeforeCalls() && (found == kCallsBegin || found == kCallBegin))
        while (!before.empty() && IsSpace(before.back())) before.pop_back();
      OnText(before);
      if (!stopped_) OnMarker(found);
      continue;
    }
    size_t keep = 0;
    if (run == RunEnd::kMayContinue) {
      for (int m = 0; m < kNumMarkers; ++m)
        if (TextMarkerActive(static_cast<Marker>(m)))
          keep = std::max(keep, PartialSuffix(pending_, marker_text_[m]));
      if (HoldsSpaceBeforeCalls())
        while (keep < pending_.size() && IsSpace(pending_[pending_.size() - keep - 1])) ++keep;
    }
    const std::string text = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    OnText(text);
    break;
  }
  if (stopped_) pending_.clear();
}

// In kStart: leaves it when the output's start shows whether it begins with <think>.
bool ChatOutput::ResolveStart(RunEnd run) {
  const size_t space = LeadingSpace(pending_);
  const std::string_view rest = std::string_view(pending_).substr(space);
  const std::string_view open = marker_text_[kThinkOpen];
  if (text_markers_[kThinkOpen]) {
    if (rest.starts_with(open)) {
      pending_.erase(0, space + open.size());
      state_ = State::kReasoning;
      return true;
    }
    if (open.starts_with(rest) && (run == RunEnd::kMayContinue || rest.empty())) return false;
  } else if (rest.empty()) {
    return false;  // whitespace so far; a <think> token may follow
  }
  state_ =
      options_.reasoning == ReasoningMode::kStartsInReasoning ? State::kReasoning : State::kContent;
  return true;
}

void ChatOutput::OnText(std::string_view s) {
  if (s.empty()) return;
  switch (state_) {
    case State::kStart:
      CHECK(false) << "text before the start was resolved";
      return;
    case State::kReasoning:
      EmitReasoning(s);
      return;
    case State::kSkipSpace: {
      const size_t space = LeadingSpace(s);
      if (space == s.size()) return;
      state_ = State::kContent;
      EmitContent(s.substr(space));
      return;
    }
    case State::kContent:
      EmitContent(s);
      return;
    case State::kCall:
      body_->AddText(s);
      SendCall();
      return;
  }
}

void ChatOutput::OnMarker(Marker m) {
  switch (state_) {
    case State::kStart: {
      if (m == kThinkOpen) {
        pending_.clear();  // only whitespace before it
        state_ = State::kReasoning;
        return;
      }
      state_ = options_.reasoning == ReasoningMode::kStartsInReasoning ? State::kReasoning
                                                                       : State::kContent;
      std::string space;
      space.swap(pending_);
      OnText(space);
      OnMarker(m);
      return;
    }
    case State::kReasoning:
      if (m == kThinkClose) {
        reasoning_tokens_ = num_ids_;  // </think> counts
        state_ = State::kSkipSpace;
      } else if (m == kCallsBegin || m == kCallBegin) {
        // Lenient: a tool call ends the reasoning even without </think>.
        reasoning_tokens_ = num_ids_ - 1;
        state_ = State::kSkipSpace;
        if (m == kCallBegin) StartCall();
      } else {
        EmitReasoning(marker_text_[m]);
      }
      return;
    case State::kSkipSpace:
    case State::kContent:
      if (m == kThinkOpen || m == kThinkClose) {
        OnText(marker_text_[m]);
      } else if (m == kCallsBegin || m == kCallBegin) {
        FlushContent();
        state_ = State::kSkipSpace;
        if (m == kCallBegin) StartCall();
      }
      // Other tool tokens outside a call are dropped.
      return;
    case State::kCall:
      switch (m) {
        case kSep:
          body_->AddSeparator();
          break;
        case kCallEnd:
        case kCallsEnd:
          FinishCall();
          state_ = State::kSkipSpace;
          return;
        case kCallBegin:  // the previous call's end is missing
          FinishCall();
          StartCall();
          return;
        case kCallsBegin:
          return;
        default:
          body_->AddText(marker_text_[m]);
          break;
      }
      SendCall();
      return;
  }
}

void ChatOutput::StartCall() {
  state_ = State::kCall;
  body_.emplace(options_.tools);
  announced_ = false;
  args_sent_ = 0;
  call_ = ToolCall();
}

// Streams what the call's body has made certain: its name once complete (with a new id), then
// argument text.
void ChatOutput::SendCall() {
  if (!announced_) {
    if (body_->name().empty()) return;
    auto is_used = [&](const std::string& id) {
      return std::any_of(calls_.begin(), calls_.end(),
                         [&](const ToolCall& c) { return c.id == id; });
    };
    do {
      static constexpr char kHex[] = "0123456789abcdef";
      call_.id = "call_";
      for (int i = 0; i < 24; ++i) call_.id += kHex[rng_() & 15];
    } while (is_used(call_.id));
    call_.name = body_->name();
    announced_ = true;
    Entry(2).tool_calls.push_back({.index = num_announced_++, .id = call_.id, .name = call_.name});
  }
  const std::string_view sure = body_->arguments();
  CHECK(sure.size() >= args_sent_) << "a call's certain arguments shrank";
  if (sure.size() == args_sent_) return;
  const std::string_view fragment = sure.substr(args_sent_);
  args_sent_ = sure.size();
  const int index = num_announced_ - 1;
  ChatDelta& entry = Entry(2);
  if (!entry.tool_calls.empty() && entry.tool_calls.back().index == index)
    entry.tool_calls.back().arguments += fragment;
  else
    entry.tool_calls.push_back({.index = index, .arguments = std::string(fragment)});
}

// The call's end: a call without a name is dropped (nothing of it was streamed).
void ChatOutput::FinishCall() {
  body_->End();
  SendCall();
  if (announced_) {
    call_.arguments = body_->arguments();
    calls_.push_back(std::move(call_));
  }
  body_.reset();
  announced_ = false;
}

void ChatOutput::EmitReasoning(std::string_view s) {
  if (s.empty()) return;
  reasoning_ += s;
  Entry(0).reasoning += s;
}

void ChatOutput::EmitContent(std::string_view s) {
  if (s.empty() || stopped_) return;
  if (options_.stop.empty()) {
    content_ += s;
    Entry(1).content += s;
    return;
  }
  stop_held_ += s;
  size_t first = std::string::npos;
  for (const std::string& stop : options_.stop) first = std::min(first, stop_held_.find(stop));
  if (first != std::string::npos) {
    stop_held_.resize(first);
    stopped_ = true;
  }
  // Hold back the longest suffix that begins some stop string. Stop strings are valid UTF-8,
  // so such a suffix starts on a character boundary.
  size_t keep = 0;
  if (!stopped_)
    for (const std::string& stop : options_.stop)
      keep = std::max(keep, PartialSuffix(stop_held_, stop));
  const std::string sure = stop_held_.substr(0, stop_held_.size() - keep);
  stop_held_.erase(0, stop_held_.size() - keep);
  if (sure.empty()) return;
  content_ += sure;
  Entry(1).content += sure;
}

void ChatOutput::FlushContent() {
  if (stop_held_.empty()) return;
  content_ += stop_held_;
  Entry(1).content += stop_held_;
  stop_held_.clear();
}

// The entry to append a piece of `kind` (0 reasoning, 1 content, 2 tool calls) to: the last
// one if it holds that kind, else a new one.
ChatDelta& ChatOutput::Entry(int kind) {
  CHECK(out_ != nullptr);
  if (!out_->empty()) {
    const ChatDelta& last = out_->back();
    const int last_kind = !last.reasoning.empty() ? 0 : !last.content.empty() ? 1 : 2;
    if (last_kind == kind) return out_->back();
  }
  return out_->emplace_back();
}

}  // namespace epserve::serve
