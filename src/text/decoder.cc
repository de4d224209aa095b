#include "text/decoder.h"

#include "text/json_util.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace epserve::text {

namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->Apply(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Each token's characters back to bytes; a token with a character outside the alphabet (an
// added token such as "<｜User｜>") is kept as it is, as Hugging Face does.
class ByteLevelDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    const ByteLevelAlphabet& alphabet = GetByteLevelAlphabet();
    std::string bytes;
    for (std::string& t : *tokens) {
      bytes.clear();
      size_t pos = 0;
      bool ok = true;
      while (pos < t.size()) {
        const int n = Utf8SequenceLength(static_cast<uint8_t>(t[pos]));
        if (n == 0 || pos + n > t.size()) {
          ok = false;
          break;
        }
        const char32_t cp = NextCodePoint(t, &pos);
        if (cp >= alphabet.char_to_byte.size() || alphabet.char_to_byte[cp] < 0) {
          ok = false;
          break;
        }
        bytes.push_back(static_cast<char>(alphabet.char_to_byte[cp]));
      }
      if (ok) t.swap(bytes);
    }
  }
};

// "<0xAB>" tokens become the byte 0xAB.
class ByteFallbackDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        char* end = nullptr;
        const std::string hex = t.substr(3, 2);
        const long v = std::strtol(hex.c_str(), &end, 16);
        if (end == hex.c_str() + 2) t.assign(1, static_cast<char>(v));
      }
    }
  }
};

class FuseDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of the character `content`.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void Apply(std::vector<std::string>* tokens) const override {
    const size_t n = content_.size();
    for (std::string& t : *tokens) {
      size_t begin = 0, end = t.size();
      for (int i = 0; i < start_ && begin + n <= end && t.compare(begin, n, content_) == 0; ++i)
        begin += n;
      for (int i = 0; i < stop_ && end >= begin + n && t.compare(end - n, n, content_) == 0; ++i)
        end -= n;
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::vector<std::string>* tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (std::string& t : *tokens) {
      if (!IsValidUtf8(t)) continue;  // raw bytes from an earlier ByteLevel: nothing to match
      matches.clear();
      pattern_.FindAll(t, &matches);
      std::string out;
      size_t prev = 0;
      for (auto [b, e] : matches) {
        if (e == b) continue;
        out.append(t, prev, b - prev);
        out.append(content_);
        prev = e;
      }
      out.append(t, prev);
      t.swap(out);
    }
  }

 private:
  Regex pattern_;
  std::string content_;
};

// The replacement character back to spaces; the first token loses its leading space unless the
// prepend scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      size_t prev = 0, hit;
      while ((hit = t.find(replacement_, prev)) != std::string::npos) {
        out.append(t, prev, hit - prev);
        out.push_back(' ');
        prev = hit + replacement_.size();
      }
      out.append(t, prev);
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      t.swap(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array())
      return TypeError(where + ".decoders", "an array", j.value("decoders", nlohmann::json()));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(auto part,
                       ParseDecoder((*it)[i], where + ".decoders[" + std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where, " "));
    ASSIGN_OR_RETURN(int64_t start, GetInt(j, "start", where, 0));
    ASSIGN_OR_RETURN(int64_t stop, GetInt(j, "stop", where, 0));
    return std::unique_ptr<Decoder>(
        new StripDecoder(std::move(content), static_cast<int>(start), static_cast<int>(stop)));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(Regex pattern,
                     ParsePattern(j.value("pattern", nlohmann::json()), where + ".pattern"));
    ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), std::move(content)));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where, "\xE2\x96\x81"));
    bool strip_first = true;
    if (j.contains("prepend_scheme")) {
      ASSIGN_OR_RETURN(std::string s, GetString(j, "prepend_scheme", where, "always"));
      strip_first = s != "never";
    } else {
      ASSIGN_OR_RETURN(strip_first, GetBool(j, "add_prefix_space", where, true));
    }
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(std::move(replacement), strip_first));
  }
  return Unsupported(where, type);
}

}  // namespace epserve::text
