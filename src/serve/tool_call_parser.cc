#include "serve/tool_call_parser.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
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
constexpr std::string_view kDsmlParamBegin = "<｜DSML｜parameter";
constexpr std::string_view kDsmlParamEnd = "</｜DSML｜parameter>";

// The longest proper prefix of `marker` that `text` ends with.
size_t MarkerPrefixAtEnd(std::string_view text, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

// `s` as the inside of a JSON string, as Python's json.dumps(ensure_ascii=False) writes it
// (UTF-8 passes through byte by byte, so any split of `s` escapes the same).
std::string JsonEscape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[(c >> 4) & 15];
          out += kHex[c & 15];
        } else {
          out += c;
        }
    }
  }
  return out;
}

// The value of attribute `key` ("name" in ` name="x" string="true"`) starting the search at
// *from (moved past it); "" when absent.
std::string_view DsmlAttribute(std::string_view header, std::string_view key, size_t* from) {
  std::string pattern(key);
  pattern += "=\"";
  const size_t at = header.find(pattern, *from);
  if (at == std::string_view::npos) return {};
  const size_t begin = at + pattern.size();
  const size_t end = header.find('"', begin);
  *from = end == std::string_view::npos ? header.size() : end + 1;
  return header.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin);
}

// A V3.2 invoke's name from its header (` name="NAME"`); lenient: an unquoted name is trimmed.
std::string DsmlName(std::string_view header) {
  size_t from = 0;
  const std::string_view quoted = DsmlAttribute(header, "name", &from);
  if (!quoted.empty()) return std::string(Trim(quoted));
  std::string_view s = Trim(header);
  if (s.starts_with("name=")) s.remove_prefix(5);
  while (!s.empty() && (s.front() == '"' || s.front() == '\'')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '"' || s.back() == '\'')) s.remove_suffix(1);
  return std::string(Trim(s));
}

}  // namespace

StatusOr<ToolCallFormat> ParseToolCallFormat(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "deepseek_v3" || name == "deepseekv3" || name == "deepseek_r1")
    return ToolCallFormat::kDeepSeekV3;
  if (name == "deepseek_v31" || name == "deepseekv31" || name == "deepseek_v3.1")
    return ToolCallFormat::kDeepSeekV31;
  if (name == "deepseek_v32" || name == "deepseekv32" || name == "deepseek_v3.2")
    return ToolCallFormat::kDeepSeekV32;
  if (name == "deepseek_v4" || name == "deepseekv4") return ToolCallFormat::kDeepSeekV4;
  return Status::InvalidArgument(
      "unknown tool call format \"" + std::string(name) +
      "\" (known: deepseek_v3, deepseek_v31, deepseek_v32, deepseek_v4, none)");
}

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kDeepSeekV3:
      return "deepseek_v3";
    case ToolCallFormat::kDeepSeekV31:
      return "deepseek_v31";
    case ToolCallFormat::kDeepSeekV32:
      return "deepseek_v32";
    case ToolCallFormat::kDeepSeekV4:
      return "deepseek_v4";
  }
  return "none";
}

ToolCallFormat GuessToolCallFormat(std::string_view chat_template) {
  // V3.2 writes "<{dsml_token}invoke name=..." with dsml_token = "｜DSML｜".
  // V4 names its block "<{dsml_token}tool_calls>".
  if (chat_template.find("｜DSML｜tool_calls") != std::string_view::npos)
    return ToolCallFormat::kDeepSeekV4;
  if (chat_template.find("｜DSML｜") != std::string_view::npos) return ToolCallFormat::kDeepSeekV32;
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
    : format_(format), part_(format == ToolCallFormat::kDeepSeekV3 ? Part::kType : Part::kName) {
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
      if (IsDsml(format_)) {  // V3.2, V4: the name's header ends at '>'
        const size_t gt = header_.find('>');
        if (gt == std::string::npos) return;
        name_ = DsmlName(std::string_view(header_).substr(0, gt));
        const std::string rest = header_.substr(gt + 1);
        header_.clear();
        part_ = Part::kArgs;
        args_ = "{";
        AddDsmlText(rest);
        return;
      }
      if (format_ == ToolCallFormat::kDeepSeekV3) {  // V3: the name ends at a newline
        const size_t newline = header_.find('\n');
        if (newline == std::string::npos) return;
        name_ = Trim(std::string_view(header_).substr(0, newline));
        header_.erase(0, newline + 1);
        part_ = Part::kOpener;
      }
      break;
    case Part::kArgs:
      if (IsDsml(format_))
        AddDsmlText(text);
      else
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

void ToolCallBody::AddDsmlText(std::string_view text) {
  dsml_raw_ += text;
  while (true) {
    switch (dsml_) {
      case Dsml::kBetween: {
        const size_t at = dsml_raw_.find(kDsmlParamBegin);
        if (at == std::string::npos) {  // text between parameters ("\n") is ignored
          dsml_raw_.erase(0, dsml_raw_.size() - MarkerPrefixAtEnd(dsml_raw_, kDsmlParamBegin));
          return;
        }
        dsml_raw_.erase(0, at + kDsmlParamBegin.size());
        dsml_ = Dsml::kHeader;
        break;
      }
      case Dsml::kHeader: {
        const size_t gt = dsml_raw_.find('>');
        if (gt == std::string::npos) return;
        const std::string_view header = std::string_view(dsml_raw_).substr(0, gt);
        size_t from = 0;
        const std::string_view key = DsmlAttribute(header, "name", &from);
        value_is_string_ = DsmlAttribute(header, "string", &from) == "true";
        if (num_params_++ > 0) args_ += ", ";
        args_ += '"';
        args_ += JsonEscape(key);
        args_ += "\": ";
        if (value_is_string_) args_ += '"';
        dsml_raw_.erase(0, gt + 1);
        dsml_ = Dsml::kValue;
        break;
      }
      case Dsml::kValue: {
        const size_t at = dsml_raw_.find(kDsmlParamEnd);
        if (at == std::string::npos) {
          if (value_is_string_) {  // stream what cannot be the start of the end marker
            const size_t sure = dsml_raw_.size() - MarkerPrefixAtEnd(dsml_raw_, kDsmlParamEnd);
            args_ += JsonEscape(std::string_view(dsml_raw_).substr(0, sure));
            dsml_raw_.erase(0, sure);
          }
          return;
        }
        const std::string rest = dsml_raw_.substr(at + kDsmlParamEnd.size());
        dsml_raw_.resize(at);
        EndDsmlValue();
        dsml_raw_ = rest;
        dsml_ = Dsml::kBetween;
        break;
      }
    }
  }
}

// Ends the value in dsml_raw_ (what is left of it): a string closes its quote; another value
// goes in as written when it is JSON, else as a string.
void ToolCallBody::EndDsmlValue() {
  if (value_is_string_) {
    args_ += JsonEscape(dsml_raw_);
    args_ += '"';
  } else {
    const std::string_view v = Trim(dsml_raw_);
    if (!v.empty() && nlohmann::json::accept(v))
      args_ += v;
    else
      args_.append(1, '"').append(JsonEscape(v)).append(1, '"');
  }
  dsml_raw_.clear();
}

void ToolCallBody::End() {
  if (IsDsml(format_)) {
    if (part_ == Part::kName) {  // the header's '>' never came
      name_ = DsmlName(header_);
      args_ = "{";
    } else if (part_ == Part::kArgs && dsml_ == Dsml::kValue) {
      EndDsmlValue();  // a parameter cut off by the call's end keeps what it has
    }
    if (part_ != Part::kEnded) args_ += "}";
    header_.clear();
    dsml_raw_.clear();
    part_ = Part::kEnded;
    return;
  }
  if (part_ == Part::kName) name_ = Trim(header_);  // no separator (V3.1) or newline (V3)
  if (part_ != Part::kArgs) args_.clear();
  if (format_ == ToolCallFormat::kDeepSeekV3) args_ = V3Arguments(args_);
  header_.clear();
  part_ = Part::kEnded;
}

std::string_view ToolCallBody::arguments() const {
  if (part_ == Part::kEnded || format_ != ToolCallFormat::kDeepSeekV3) return args_;
  return V3SureArguments(args_);
}

}  // namespace epserve::serve
