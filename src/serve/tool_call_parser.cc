#include "serve/tool_call_parser.h"

#include <cctype>
#include <optional>

#include "base/check.h"

namespace epserve::serve {
namespace {

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

// The bytes a V3 call's fence-opening line takes at the start of `b` ("```json\n", with
// whitespace before it; a language tag or newline may be missing; no fence at all is 0), or
// nullopt while more text could change the answer.
std::optional<size_t> FenceOpener(std::string_view b) {
  size_t i = 0;
  while (i < b.size() && IsAsciiSpace(b[i])) ++i;
  if (i == b.size()) return std::nullopt;
  size_t ticks = 0;
  while (i + ticks < b.size() && ticks < 3 && b[i + ticks] == '`') ++ticks;
  if (ticks < 3) return i + ticks == b.size() ? std::nullopt : std::optional<size_t>(0);
  size_t j = i + 3;
  while (j < b.size() && (std::isalnum(static_cast<unsigned char>(b[j])) || b[j] == '_' ||
                          b[j] == '-' || b[j] == '.'))
    ++j;
  size_t k = j;
  while (k < b.size() && (b[k] == ' ' || b[k] == '\t' || b[k] == '\r')) ++k;
  if (k == b.size()) return std::nullopt;
  return b[k] == '\n' ? k + 1 : j;
}

// V3 arguments: the text up to the closing fence, surrounding whitespace trimmed.
std::string_view V3Arguments(std::string_view raw) {
  raw = Trim(raw);
  if (raw.ends_with("```")) raw.remove_suffix(3);
  return Trim(raw);
}

// The part of unfinished V3 argument text that begins V3Arguments() of any continuation:
// every character V3Arguments can remove is whitespace or a backtick at either end.
std::string_view V3SureArguments(std::string_view raw) {
  while (!raw.empty() && IsAsciiSpace(raw.front())) raw.remove_prefix(1);
  while (!raw.empty() && (IsAsciiSpace(raw.back()) || raw.back() == '`')) raw.remove_suffix(1);
  return raw;
}

constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

}  // namespace

StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "deepseek_v3" || name == "deepseekv3" || name == "deepseek_r1")
    return ToolCallFormat::kDeepSeekV3;
  if (name == "deepseek_v31" || name == "deepseekv31" || name == "deepseek_v3.1")
    return ToolCallFormat::kDeepSeekV31;
  return Status::InvalidArgument("unknown tool call format \"" + std::string(name) +
                                 "\" (known: deepseek_v3, deepseek_v31, none)");
}

ToolCallFormat GuessToolCallFormat(std::string_view chat_template) {
  if (chat_template.find(kCallBegin) == std::string_view::npos) return ToolCallFormat::kNone;
  // V3/R1 write "tool['type'] + '<｜tool▁sep｜>' + name + '\n' + '```json'"; V3.1 writes
  // "name + '<｜tool▁sep｜>' + arguments" with no fence.
  if (chat_template.find("```json") != std::string_view::npos ||
      chat_template.find("function<｜tool▁sep｜>") != std::string_view::npos)
    return ToolCallFormat::kDeepSeekV3;
  if (chat_template.find(kSep) != std::string_view::npos) return ToolCallFormat::kDeepSeekV31;
  return ToolCallFormat::kNone;
}

ToolCallBody::ToolCallBody(ToolCallFormat format)
    : format_(format), part_(format == ToolCallFormat::kDeepSeekV31 ? Part::kName : Part::kType) {
  CHECK(format != ToolCallFormat::kNone);
}

void ToolCallBody::AddText(std::string_view text) {
  switch (part_) {
    case Part::kType:
    case Part::kOpener:
      header_ += text;
      break;
    case Part::kName:
      header_ += text;
      if (format_ == ToolCallFormat::kDeepSeekV3) {  // V3: the name ends at a newline
        const size_t newline = header_.find('\n');
        if (newline == std::string::npos) return;
        name_ = Trim(std::string_view(header_).substr(0, newline));
        header_.erase(0, newline + 1);
        part_ = Part::kOpener;
      }
      break;
    case Part::kArgs:
      args_ += text;
      return;
    case Part::kEnded:
      return;
  }
  if (part_ == Part::kOpener) {
    const std::optional<size_t> opener = FenceOpener(header_);
    if (!opener) return;
    args_ = header_.substr(*opener);
    header_.clear();
    part_ = Part::kArgs;
  }
}

void ToolCallBody::AddSeparator() {
  if (part_ == Part::kType) {
    header_.clear();  // "function"
    part_ = Part::kName;
  } else if (part_ == Part::kName && format_ == ToolCallFormat::kDeepSeekV31) {
    name_ = Trim(header_);
    header_.clear();
    part_ = Part::kArgs;
  } else {
    AddText(kSep);
  }
}

void ToolCallBody::End() {
  if (part_ == Part::kName) name_ = Trim(header_);  // no separator (V3.1) or newline (V3)
  if (part_ != Part::kArgs) args_.clear();
  if (format_ == ToolCallFormat::kDeepSeekV3) args_ = V3Arguments(args_);
  header_.clear();
  part_ = Part::kEnded;
}

std::string_view ToolCallBody::arguments() const {
  if (part_ == Part::kEnded || format_ == ToolCallFormat::kDeepSeekV31) return args_;
  return V3SureArguments(args_);
}

}  // namespace epserve::serve
