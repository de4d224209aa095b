// DeepSeek tool-call formats and the parser of one call's body, the text between
// <｜tool▁call▁begin｜> and <｜tool▁call▁end｜> (V3.2: between <｜DSML｜invoke and
// </｜DSML｜invoke>; ChatOutput finds those markers):
//   V3/R1: function<｜tool▁sep｜>NAME\n```json\nARGS\n```
//   V3.1:  NAME<｜tool▁sep｜>ARGS
//   V3.2:   name="NAME">\n<｜DSML｜parameter name="P"
//   string="true|false">VALUE</｜DSML｜parameter>\n
//          ... (one parameter a line; see chat_output.h for the whole block)
// V3 arguments are the text after the fence's opening line up to its closing ```, surrounding
// whitespace trimmed (a missing language tag, newline or fence is tolerated); V3.1 arguments are
// the text after the separator, exactly. V3.2 arguments are built from the parameters as
// {"P": VALUE, ...} (", " and ": " between, as encoding_dsv32.py's decode_dsml_to_arguments
// writes them): a string="true" value becomes a JSON string; any other value is put in as
// written (whitespace trimmed) when it is valid JSON, else as a JSON string (so the arguments
// are always one JSON object); text outside parameters is ignored; a parameter cut off by the
// call's end keeps what it has.
// Thread safety: none needed (a value owned by one ChatOutput).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::serve {

// kDeepSeekV4 is V3.2's DSML with the block named tool_calls instead of function_calls.
enum class ToolCallFormat { kNone, kDeepSeekV3, kDeepSeekV31, kDeepSeekV32, kDeepSeekV4 };
// V3.2 and V4: DSML text markers, parameters one a line.
inline bool IsDsml(ToolCallFormat f) {
  return f == ToolCallFormat::kDeepSeekV32 || f == ToolCallFormat::kDeepSeekV4;
}

// "deepseek_v3" (also "deepseekv3", "deepseek_r1"), "deepseek_v31" (also "deepseekv31",
// "deepseek_v3.1"), "deepseek_v32" (also "deepseekv32", "deepseek_v3.2"), "deepseek_v4" (also
// "deepseekv4"), "none".
StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name);
// The canonical name ParseToolCallFormat reads ("deepseek_v32", "none", ...).
std::string_view ToolCallFormatName(ToolCallFormat format);
// From a chat template's text: a template that writes tool calls with a ```json fence (or
// "function<｜tool▁sep｜>") is V3/R1, one that writes <｜tool▁sep｜> without a fence is V3.1,
// one without <｜tool▁call▁begin｜> kNone; a template (or encoding script) that writes DSML
// (｜DSML｜invoke) is V3.2, or V4 when its block is ｜DSML｜tool_calls.
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
  // possible closing fence; V3.2 streams "{" and each parameter's key and string value as they
  // come, a non-string value once its parameter ends). After End(): the final arguments.
  std::string_view arguments() const;

 private:
  enum class Part { kType, kName, kOpener, kArgs, kEnded };
  // V3.2, within kArgs: between parameters, in a parameter's header (up to its '>'), in its
  // value (up to </｜DSML｜parameter>).
  enum class Dsml { kBetween, kHeader, kValue };

  void AddDsmlText(std::string_view text);
  void EndDsmlValue();

  ToolCallFormat format_;
  Part part_;
  std::string header_;  // the type, name or fence-opener text being collected
  std::string name_;
  std::string args_;  // raw argument text (V3.2: the certain JSON); the final arguments after End()
  // V3.2 only.
  Dsml dsml_ = Dsml::kBetween;
  std::string dsml_raw_;  // text not yet consumed (a possible marker prefix, a header, a value)
  bool value_is_string_ = false;
  int num_params_ = 0;
};

}  // namespace epserve::serve
