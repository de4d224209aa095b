// Decoders from tokenizer.json's "decoder": ByteLevel, ByteFallback, Fuse, Strip, Replace,
// Metaspace, Sequence. They work on token strings as Hugging Face's decode_chain does; the
// strings may hold raw bytes after ByteLevel/ByteFallback, and the tokenizer converts the
// concatenation to UTF-8 (lossily) once at the end. Anything else is an error at load.
// Thread safety: immutable after parsing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace epserve::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
};

// `where` names the component in errors ("tokenizer.json: decoder"). Null gives nullptr.
StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j, const std::string& where);

}  // namespace epserve::text
