// DeepSeek tool-call formats and the parser of one call's body, the text between
// <｜tool▁call▁begin｜> and <｜tool▁call▁end｜> (ChatOutput finds those markers):
//   V3/R1: function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//   V3.1:  NAME<｜tool▁sep｜>ARGS
// V3 arguments are the text after the fence's opening line up to its closing ```, surrounding
// whitespace trimmed (a missing language tag, newline or fence is tolerated); V3.1 arguments are
// the text after the separator, exactly.
// Thread safety: none needed (a value owned by one ChatOutput).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::serve {

enum class ToolCallFormat { kNone, kDeepSeekV3, kDeepSeekV31 };

// "deepseek_v3" (also "deepseekv3", "deepseek_r1"), "deepseek_v31" (also "deepseekv31",
// "deepseek_v3.1"), "none".
StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name);
// From a chat template's text: a template that writes tool calls with a ```json fence (or
// "function<｜tool▁sep｜>") is V3/R1, one that writes <｜tool▁sep｜> without a fence is V3.1,
// one without <｜tool▁call▁begin｜> kNone.
ToolCallFormat GuessToolCallFormat(std::string_view chat_template);

// Streams one call's body. REQUIRES: format is not kNone.
class ToolCallBody {
 public:
  explicit ToolCallBody(ToolCallFormat format);

  void AddText(std::string_view text);
  // A <｜tool▁sep｜> inside the body: where the format has none, it is text.
  void AddSeparator();
  // The call's end marker arrived: a name without arguments after it is taken as complete.
  void End();

  // Empty until the name is complete (then fixed). A call that ends without one is malformed.
  const std::string& name() const { return name_; }
  // Before End(): the argument text certain to begin the final arguments, whatever follows
  // (V3 holds back leading whitespace and a trailing run of whitespace and backticks, a
  // possible closing fence). After End(): the final arguments.
  std::string_view arguments() const;

 private:
  enum class Part { kType, kName, kOpener, kArgs, kEnded };

  ToolCallFormat format_;
  Part part_;
  std::string header_;  // the type, name or fence-opener text being collected
  std::string name_;
  std::string args_;  // raw argument text; the final arguments after End()
};

}  // namespace epserve::serve
