// ChatOutput turns a chat request's generated token ids into the parts of an OpenAI chat
// message, streamed: reasoning text (what comes before </think>), content text, and tool calls
// in DeepSeek-V3/R1, DeepSeek-V3.1, DeepSeek-V3.2 (DSML) or DeepSeek-V4 (DSML) format.
//
// Formats (each <｜...｜> is one added token; '｜' is U+FF5C and '▁' U+2581), one call shown:
//   V3/R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//          ```json
//          ARGS
//          ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//          (more calls: "\n<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>" before the calls' end)
//   V3.1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
//          <｜tool▁calls▁end｜>  (more calls follow the first directly)
//   V3.2:  \n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//          <｜DSML｜parameter name="P" string="true">VALUE</｜DSML｜parameter>\n  (one a line)
//          </｜DSML｜invoke>\n</｜DSML｜function_calls>  (more invokes follow, a "\n" between)
//          These markers are text, not added tokens (where ｜DSML｜ is one token it is put back in
//          the text): matched in the decoded text, possible prefixes held back. Whitespace
//          before the calls is not content (trailing content whitespace is held back until
//          non-space text follows); arguments are built from the parameters
//          (tool_call_parser.h). A <｜DSML｜invoke without <｜DSML｜function_calls> also starts
//          a call; stray end markers are dropped.
//   V4:    V3.2's, with the block <｜DSML｜tool_calls> ... </｜DSML｜tool_calls>.
// V3 arguments are the text between the ```json fence's opening line and its closing ```, with
// surrounding whitespace trimmed; V3.1 arguments are the text between the separator and the
// call's end, exactly. Text before the calls is content; after a call or the calls' end,
// leading whitespace is dropped and other text is content again. A <｜tool▁call▁begin｜>
// without <｜tool▁calls▁begin｜> also starts a call. With ToolCallFormat::kNone no tool token is
// parsed: they stay in the content as their text. With a format, stray tool tokens (an end
// or separator outside a call) are dropped rather than shown.
//
// Reasoning: <think> and </think> are matched as token ids when the tokenizer has them as
// single tokens (R1, V3.1), else in the decoded text (text that could be the start of one is
// held back until it is known not to be). kStartsInReasoning (R1; V3.1 with thinking: the
// prompt ends in "<think>") starts in reasoning and skips a leading <think>; kExplicitThink
// starts in reasoning only when the output starts with <think> (leading whitespace allowed).
// Reasoning ends at </think> (whitespace after it is dropped) or, leniently, at a tool-call
// start. Generation that ends in reasoning is all reasoning, no content.
//
// Stop strings apply to content only, as OutputText does: possible prefixes are held back, and
// content ends right before the first stop string found; then nothing more is produced.
//
// Streaming promises: text is decoded with an IncrementalDecoder per run between markers, so
// no piece ends inside a UTF-8 character; the concatenation of all reasoning (content) pieces
// equals reasoning() (content()); per tool call, the concatenation of its argument fragments
// is always a prefix of its final arguments and, once the call completes, equal to them. A
// call's first ToolCallDelta carries its index (0, 1, ... in order), id and complete name.
//
// Thread safety: one per request, used by one thread at a time; the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "serve/tool_call_parser.h"
#include "text/tokenizer.h"

namespace epserve::serve {

enum class ReasoningMode {
  kNone,               // no reasoning: <think> and </think> are plain content
  kStartsInReasoning,  // R1; V3.1 with thinking on
  kExplicitThink,      // reasoning only if the output starts with <think>
};

struct ToolCallDelta {
  int index = 0;
  std::string id, name;   // only on a call's first delta
  std::string arguments;  // a fragment (possibly empty on the first delta)
};

// One piece of the stream; exactly one of reasoning, content, tool_calls is non-empty.
struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ChatOutputOptions {
  ToolCallFormat tools = ToolCallFormat::kNone;
  ReasoningMode reasoning = ReasoningMode::kNone;
  std::vector<std::string> stop;  // content only; each non-empty
};

class ChatOutput {
 public:
  ChatOutput(const text::Tokenizer& tokenizer, ChatOutputOptions options);

  // Feeds one generated id and appends what it makes certain to *out, in order. A piece of the
  // same kind as *out's last entry is merged into it (text appended; a tool-call fragment
  // appended to that entry's last ToolCallDelta if of the same call, else a new ToolCallDelta),
  // so feeding a step's ids into one vector gives one entry per run of one kind: send each
  // entry as one chunk. After stopped(), adds nothing. Ids the tokenizer does not define add
  // no text.
  void Add(int32_t id, std::vector<ChatDelta>* out);
  // End of generation (call once, last): appends the held-back rest. A tool call not yet ended is
  // dropped (see truncated_call()); its first deltas may have been streamed already.
  void Finish(std::vector<ChatDelta>* out);
  // A content stop string was found: the caller should end the generation.
  bool stopped() const { return stopped_; }

  // The whole response so far (complete after Finish).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  struct ToolCall {
    std::string id, name, arguments;
  };
  const std::vector<ToolCall>& tool_calls() const { return calls_; }  // complete calls only
  // Generation ended inside a tool call (report finish_reason "length", not a half call).
  bool truncated_call() const { return truncated_; }
  // Ids up to and including the one that ended the reasoning (all of them while in it).
  int64_t reasoning_tokens() const;

 private:
  enum Marker {
    kThinkOpen,
    kThinkClose,
    kCallsBegin,
    kCallsEnd,
    kCallBegin,
    kCallEnd,
    kSep,
    kNumMarkers,
    kNoMarker = -1
  };
  enum class State { kStart, kReasoning, kSkipSpace, kContent, kCall };
  // Whether more text of the current run may follow (hold back possible marker prefixes).
  enum class RunEnd { kMayContinue, kEnded };

  Marker MarkerOfId(int32_t id) const;
  bool TextMarkerActive(Marker m) const;
  bool HoldsSpaceBeforeCalls() const;
  void EndTextRun();
  void Scan(RunEnd run);
  bool ResolveStart(RunEnd run);
  void OnText(std::string_view s);
  void OnMarker(Marker m);
  void StartCall();
  void SendCall();
  void FinishCall();
  void EmitReasoning(std::string_view s);
  void EmitContent(std::string_view s);
  void FlushContent();
  ChatDelta& Entry(int kind);

  ChatOutputOptions options_;
  text::IncrementalDecoder decoder_;
  int32_t marker_ids_[kNumMarkers];            // -1: not a single token (or not parsed)
  bool text_markers_[kNumMarkers];             // parsed, but matched in the decoded text
  std::string_view marker_text_[kNumMarkers];  // the format's markers ("": none)
  int32_t dsml_id_ = -1;                       // V3.2: ｜DSML｜ as one token, else -1
  std::mt19937_64 rng_;

  State state_;
  std::string pending_;    // decoded text not yet scanned: a possible text-marker prefix
  std::string stop_held_;  // content held back as a possible stop-string prefix
  bool stopped_ = false;

  // The call being parsed (state_ == kCall).
  std::optional<ToolCallBody> body_;
  bool announced_ = false;  // its id and name were streamed
  size_t args_sent_ = 0;    // bytes of its arguments streamed
  ToolCall call_;
  int num_announced_ = 0;

  std::string reasoning_, content_;
  std::vector<ToolCall> calls_;
  bool truncated_ = false;
  int64_t num_ids_ = 0;
  int64_t reasoning_tokens_ = 0;

  std::vector<ChatDelta>* out_ = nullptr;  // during Add and Finish
};

}  // namespace epserve::serve
