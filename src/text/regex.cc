#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "text/json_util.h"
#include "text/utf8.h"

namespace epserve::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string EscapeLiteral(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is split out.
  std::string out = "\\Q";
  size_t pos = 0;
  while (true) {
    const size_t hit = literal.find("\\E", pos);
    if (hit == std::string_view::npos) break;
    out.append(literal.substr(pos, hit - pos));
    out.append("\\E\\\\E\\Q");
    pos = hit + 2;
  }
  out.append(literal.substr(pos));
  out.append("\\E");
  return out;
}

}  // namespace

StatusOr<Regex> Regex::Compile(std::string_view pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error, buffer, sizeof(buffer));
    return Status::InvalidArgument(where + ": invalid regex at offset " + std::to_string(offset) +
                                   ": " + reinterpret_cast<const char*>(buffer));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  holder->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return Regex(std::move(holder));
}

StatusOr<Regex> Regex::Literal(std::string_view literal, const std::string& where) {
  return Compile(EscapeLiteral(literal), where);
}

void Regex::FindAll(std::string_view subject,
                    std::vector<std::pair<size_t, size_t>>* matches) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    const int rc = code_->jit
                       ? pcre2_jit_match(code_->code, data, subject.size(), start, 0, md, nullptr)
                       : pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                     md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: no further matches
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    matches->emplace_back(ov[0], ov[1]);
    if (ov[1] > ov[0]) {
      start = ov[1];
    } else {
      if (ov[1] >= subject.size()) break;
      const int n = Utf8SequenceLength(static_cast<uint8_t>(subject[ov[1]]));
      start = ov[1] + (n > 0 ? n : 1);
    }
  }
  pcre2_match_data_free(md);
}

StatusOr<Regex> ParsePattern(const nlohmann::json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return Regex::Literal(j["String"].get<std::string>(), where);
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    return Regex::Compile(j["Regex"].get<std::string>(), where);
  }
  return Status::InvalidArgument(where + ": expected {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace epserve::text
