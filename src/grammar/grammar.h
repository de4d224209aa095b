// Grammar-constrained decoding (structured outputs): grammars over bytes and special tokens,
// compiled from a JSON Schema subset or composed with GrammarBuilder, and a Matcher that tells
// the sampler which tokens may come next. docs/grammar.md has the design and the schema subset.
//
// Types and their promises:
//  - TokenVocab: each token id's bytes, which ids are special, the stop ids, and a byte trie of
//    the non-special tokens. Immutable once built; share it across threads.
//  - Grammar: a compiled grammar (rules of byte-set / token / rule-reference elements) plus a
//    mask cache per vocabulary. Immutable apart from that cache, which has its own lock; share
//    it across threads and requests.
//  - Matcher: the matching state of one request. Not thread-safe; cheap to create. It keeps the
//    Grammar and the TokenVocab alive.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "grammar/builder.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"

namespace epserve::grammar {

// SchemaOptions and Whitespace are declared in grammar/builder.h.

// The process-wide cache of compiled grammars (schemas here, tool-call grammars from the
// engine's constraint factory under keys of their own): an LRU bounded by the bytes its
// grammars hold, mask caches included (kDefaultGrammarCacheBytes unless set; `--grammar-cache-mb`).
// A grammar in use by a request stays alive after eviction; it is only no longer found.
inline constexpr size_t kDefaultGrammarCacheBytes = size_t{256} << 20;
struct GrammarCacheStats {
  size_t bytes = 0, entries = 0, capacity_bytes = 0;
  int64_t hits = 0, misses = 0, evictions = 0;
};
std::shared_ptr<const Grammar> FindCachedGrammar(const std::string& key);
void CacheGrammar(const std::string& key, std::shared_ptr<const Grammar> g);
void SetGrammarCacheBytes(size_t bytes);
GrammarCacheStats GrammarCacheStatistics();

// Compiles the JSON Schema subset of docs/grammar.md. Compiled grammars are kept in the cache
// above keyed by the schema's canonical dump and the options, so one schema is compiled once.
// Errors (InvalidArgument) name the keyword and its JSON pointer: "unsupported JSON Schema keyword
// 'patternProperties' at #/properties/tags". Thread safety: may be called from any thread.
// Properties are produced in the object's iteration order: sorted by key for nlohmann::json,
// declared order for nlohmann::ordered_json (parse requests with ordered_json to keep it).
StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::json& schema,
                                                           const SchemaOptions& options = {});
StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(const nlohmann::ordered_json& schema,
                                                           const SchemaOptions& options = {});

// response_format {"type": "json_object"}: any JSON object (default whitespace policy).
std::shared_ptr<const Grammar> AnyJsonObject();

}  // namespace epserve::grammar
