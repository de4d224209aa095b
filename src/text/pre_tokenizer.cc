#include "text/pre_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>

#include "text/json_util.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace epserve::text {

void SplitBySegments(const Piece& piece, std::vector<Segment> segments, SplitBehavior behavior,
                     std::vector<Piece>* out) {
  // The same folds as Hugging Face's NormalizedString::split; `keep` is false for removed parts.
  struct Part {
    size_t begin, end;
    bool keep;
  };
  std::vector<Part> parts;
  parts.reserve(segments.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) parts.push_back({s.begin, s.end, !s.is_match});
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) parts.push_back({s.begin, s.end, true});
      break;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, true});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) {
          parts.back().begin = it->begin;
        } else {
          parts.push_back({it->begin, it->end, true});
        }
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  for (const Part& p : parts) {
    if (!p.keep || p.end <= p.begin) continue;
    out->push_back({piece.text.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
  }
}

namespace {

// Segments covering `text` from a sorted list of non-overlapping matches.
std::vector<Segment> SegmentsFromMatches(size_t size,
                                         const std::vector<std::pair<size_t, size_t>>& matches,
                                         bool invert) {
  std::vector<Segment> segments;
  segments.reserve(2 * matches.size() + 1);
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) segments.push_back({prev, b, invert});
    segments.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size) segments.push_back({prev, size, invert});
  return segments;
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void Apply(std::vector<Piece>* pieces) const override {
    for (const auto& p : parts_) p->Apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces->size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    for (const Piece& piece : *pieces) {
      matches.clear();
      pattern_.FindAll(piece.text, &matches);
      SplitBySegments(piece, SegmentsFromMatches(piece.text.size(), matches, invert_), behavior_,
                      &out);
    }
    pieces->swap(out);
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pattern, which ByteLevel uses when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<PreTokenizer> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}
  void Apply(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
      }
    }
    if (split_) split_->Apply(pieces);
    const ByteLevelAlphabet& alphabet = GetByteLevelAlphabet();
    std::string mapped;
    for (Piece& p : *pieces) {
      mapped.clear();
      mapped.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) mapped.append(alphabet.byte_to_char[c]);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<PreTokenizer> split_;
};

// Splits on a per-character predicate (Digits: numeric characters).
class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (const Piece& piece : *pieces) {
      std::vector<Segment> segments;
      size_t pos = 0;
      while (pos < piece.text.size()) {
        const size_t begin = pos;
        const auto cat = utf8proc_category(NextCodePoint(piece.text, &pos));
        const bool numeric = cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
                             cat == UTF8PROC_CATEGORY_NO;
        segments.push_back({begin, pos, numeric});
      }
      // Rust's split(char::is_numeric) sees each numeric char as its own match; non-matches
      // between matches come as one run.
      std::vector<Segment> merged;
      for (const Segment& s : segments) {
        if (!s.is_match && !merged.empty() && !merged.back().is_match) {
          merged.back().end = s.end;
        } else {
          merged.push_back(s);
        }
      }
      SplitBySegments(piece, std::move(merged),
                      individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, &out);
    }
    pieces->swap(out);
  }

 private:
  bool individual_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (Piece& piece : *pieces) {
      std::string text;
      for (char c : piece.text) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text.push_back(c);
        }
      }
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start);
      if (prepend && text.compare(0, replacement_.size(), replacement_) != 0)
        text.insert(0, replacement_);
      Piece replaced{std::move(text), piece.at_start};
      if (!split_) {
        out.push_back(std::move(replaced));
        continue;
      }
      std::vector<Segment> segments;
      size_t prev = 0, hit;
      while ((hit = replaced.text.find(replacement_, prev)) != std::string::npos) {
        if (hit > prev) segments.push_back({prev, hit, false});
        segments.push_back({hit, hit + replacement_.size(), true});
        prev = hit + replacement_.size();
      }
      if (prev < replaced.text.size()) segments.push_back({prev, replaced.text.size(), false});
      SplitBySegments(replaced, std::move(segments), SplitBehavior::kMergedWithNext, &out);
    }
    pieces->swap(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& j, const std::string& where) {
  ASSIGN_OR_RETURN(std::string b, GetString(j, "behavior", where));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return Status::InvalidArgument(where + ".behavior: unsupported value \"" + b + "\"");
}

StatusOr<std::unique_ptr<PreTokenizer>> RegexSplit(const char* pattern, SplitBehavior behavior,
                                                   bool invert, const std::string& where) {
  ASSIGN_OR_RETURN(Regex re, Regex::Compile(pattern, where));
  return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), behavior, invert));
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                          const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  ASSIGN_OR_RETURN(std::string type, ComponentType(j, where));
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return TypeError(where + ".pretokenizers", "an array",
                       j.value("pretokenizers", nlohmann::json()));
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(auto part, ParsePreTokenizer((*it)[i], where + ".pretokenizers[" +
                                                                  std::to_string(i) + "]"));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(Regex pattern,
                     ParsePattern(j.value("pattern", nlohmann::json()), where + ".pattern"));
    ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j, where));
    ASSIGN_OR_RETURN(bool invert, GetBool(j, "invert", where, false));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(pattern), behavior, invert));
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", where, true));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", where, true));
    std::unique_ptr<PreTokenizer> split;
    if (use_regex) {
      ASSIGN_OR_RETURN(split, RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated, false, where));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(add_prefix_space, std::move(split)));
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, GetBool(j, "individual_digits", where, false));
    return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(individual));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where, "\xE2\x96\x81"));
    ASSIGN_OR_RETURN(bool split, GetBool(j, "split", where, true));
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme")) {
      ASSIGN_OR_RETURN(std::string s, GetString(j, "prepend_scheme", where, "always"));
      if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else if (s != "always") {
        return Status::InvalidArgument(where + ".prepend_scheme: unsupported value \"" + s + "\"");
      }
    } else {
      ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", where, true));
      if (!add_prefix_space) scheme = PrependScheme::kNever;
    }
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(std::move(replacement), scheme, split));
  }
  if (type == "Whitespace")
    return RegexSplit(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true, where);
  if (type == "WhitespaceSplit") return RegexSplit(R"(\s+)", SplitBehavior::kRemoved, false, where);
  return Unsupported(where, type);
}

}  // namespace epserve::text
