#include "serve/output_text.h"

#include <algorithm>

namespace epserve::serve {

OutputText::OutputText(const text::Tokenizer& tokenizer, std::vector<std::string> stop)
    : decoder_(tokenizer, {.skip_special_tokens = true}), stop_(std::move(stop)) {}

std::string OutputText::Add(int32_t id) {
  if (stopped_) return "";
  StatusOr<std::string> piece = decoder_.Add(id);
  // An id the tokenizer does not define (a random model's vocabulary may be larger) adds no text.
  return Release(piece.ok() ? *piece : std::string());
}

std::string OutputText::Finish() {
  if (stopped_) return "";
  std::string rest = Release(decoder_.Finish());
  if (stopped_) return rest;
  rest += held_;
  held_.clear();
  return rest;
}

std::string OutputText::Release(std::string more) {
  held_ += more;
  if (stop_.empty()) {
    std::string out;
    out.swap(held_);
    return out;
  }
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that begins some stop string. Stop strings are valid UTF-8,
  // so such a suffix starts on a character boundary.
  size_t keep = 0;
  for (const std::string& s : stop_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string TokenText(const text::Tokenizer& tokenizer, int32_t id) {
  StatusOr<std::string> s = tokenizer.Decode(std::vector<int32_t>{id});
  return s.ok() ? *s : std::string();
}

std::vector<uint8_t> TokenBytes(const text::Tokenizer& tokenizer, int32_t id) {
  std::string bytes;
  if (!tokenizer.DecodeBytes(std::vector<int32_t>{id}, {}, &bytes).ok()) return {};
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

}  // namespace epserve::serve
