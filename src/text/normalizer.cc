#include "text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "text/json_util.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace epserve::text {

namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Apply(std::string* text) const override {
    for (const auto& p : parts_) p->Apply(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : options_(options) {}
  void Apply(std::string* text) const override {
    bool ascii = true;
    for (unsigned char c : *text) ascii &= c < 0x80;
    if (ascii) return;  // every normal form leaves ASCII alone
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                     static_cast<utf8proc_ssize_t>(text->size()), &out, options_);
    if (n >= 0) text->assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  utf8proc_option_t options_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Apply(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    size_t pos = 0;
    while (pos < text->size()) AppendUtf8(utf8proc_tolower(NextCodePoint(*text, &pos)), &out);
    text->swap(out);
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::string* text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.FindAll(*text, &matches);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : matches) {
      if (e == b) continue;
      out.append(*text, prev, b - prev);
      out.append(content_);
      prev = e;
    }
    out.append(*text, prev);
    text->swap(out);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Apply(std::string* text) const override {
    auto is_space = [](char32_t c) {
      const auto cat = utf8proc_category(c);
      return c == '\t' || c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x85 ||
             cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL ||
             cat == UTF8PROC_CATEGORY_ZP;
    };
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_space(NextCodePoint(*text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>((*text)[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!is_space(NextCodePoint(*text, &next))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j,
                                                      const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      return TypeError(where + ".normalizers", "an array",
                       j.value("normalizers", nlohmann::json()));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(
          auto part, ParseNormalizer((*it)[i], where + ".normalizers[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  const int kStable = UTF8PROC_STABLE;
  if (type == "NFC")
    return std::unique_ptr<Normalizer>(
        new UnicodeNormalizer(utf8proc_option_t(kStable | UTF8PROC_COMPOSE)));
  if (type == "NFD")
    return std::unique_ptr<Normalizer>(
        new UnicodeNormalizer(utf8proc_option_t(kStable | UTF8PROC_DECOMPOSE)));
  if (type == "NFKC") {
    return std::unique_ptr<Normalizer>(
        new UnicodeNormalizer(utf8proc_option_t(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT)));
  }
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(
        new UnicodeNormalizer(utf8proc_option_t(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT)));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Replace") {
    ASSIGN_OR_RETURN(Regex pattern,
                     ParsePattern(j.value("pattern", nlohmann::json()), where + ".pattern"));
    ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(pattern), std::move(content)));
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, GetString(j, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, GetBool(j, "strip_left", where, true));
    ASSIGN_OR_RETURN(bool right, GetBool(j, "strip_right", where, true));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  return Unsupported(where, type);
}

}  // namespace epserve::text
