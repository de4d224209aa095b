// GrammarBuilder: composes a grammar from pieces (byte literals, byte ranges, special tokens,
// JSON-schema values, sequences, alternations, repetitions and named, possibly recursive,
// rules), then lowers it to the rule form the Matcher runs (grammar/grammar_ir.h).
//
// Example, a DeepSeek-V3 tool-call block with two tools:
//   GrammarBuilder b;
//   auto call = b.Alt({b.Seq({b.Literal("get_weather\n```json\n"), *b.JsonSchema(a),
//   b.Literal("\n```")}),
//                      b.Seq({b.Literal("f2\n```json\n"), *b.JsonSchema(c), b.Literal("\n```")})});
//   auto one = b.Seq({b.Token(call_begin), b.Literal("function"), b.Token(sep), call,
//                     b.Token(call_end)});
//   auto root = b.Seq({b.Token(calls_begin), one, b.Star(b.Seq({b.Literal("\n"), one})),
//                      b.Token(calls_end)});
//   auto grammar = b.Build(root);
//
// An Expr is a handle into this builder; handles may be used any number of times (the grammar
// is a DAG of them). Recursion goes through named rules (NewRule / SetRule / Ref).
// Thread safety: one builder per thread; the built Grammar is immutable and shareable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace epserve::grammar {

class Grammar;

// How much whitespace the JSON grammars allow between tokens. Bounded on purpose: a model
// sampling at random must not be able to loop on whitespace.
enum class Whitespace {
  kNone,         // {"a":1,"b":[1,2]}
  kSingleSpace,  // at most one space after ':' and after ',' (the default): {"a": 1, "b": [1, 2]}
  // Also pretty-printed: after '{', '[' and ',' and before '}' and ']' a newline and up to 32
  // spaces of indentation (or, after ',', one space); one space after ':'.
  kPretty,
};

// The bounds on what one grammar may cost to build and to match (request data decides its
// size). A grammar past one is refused with InvalidArgument whose message starts with
// kTooComplexPrefix (IsTooComplex); `epserve serve` answers 400 with code grammar_too_complex.
inline constexpr char kTooComplexPrefix[] = "grammar too complex";
// Elements of the lowered grammar (8 bytes each, plus 8 of min_rest).
inline constexpr size_t kMaxGrammarElements = size_t{4} << 20;
// Builder expressions (a schema of the largest request body makes about 1M).
inline constexpr size_t kMaxGrammarExprs = size_t{4} << 20;
// Parse stacks one matcher state may expand to (the closure of one step, de-duplicated while it
// is expanded); Build checks the start state, the matcher every later one.
inline constexpr size_t kMaxClosure = size_t{1} << 18;
bool IsTooComplex(const Status& s);
// JSON nesting of a schema (every walk of it, nlohmann's dump included, recurses per level; a
// request's body is bounded at 64 levels before it is parsed, a spec from elsewhere here).
inline constexpr int kMaxSchemaNesting = 128;
Status CheckSchemaNesting(const nlohmann::ordered_json& schema);

struct SchemaOptions {
  Whitespace whitespace = Whitespace::kSingleSpace;
};

class GrammarBuilder {
 public:
  using Expr = int32_t;
  using RuleId = int32_t;

  GrammarBuilder();
  ~GrammarBuilder();
  GrammarBuilder(const GrammarBuilder&) = delete;
  GrammarBuilder& operator=(const GrammarBuilder&) = delete;

  Expr Empty();
  Expr Literal(std::string_view bytes);    // exactly these bytes
  Expr ByteRange(uint8_t lo, uint8_t hi);  // one byte in [lo, hi]
  Expr Token(int32_t id);                  // exactly this (special) token
  Expr Seq(std::vector<Expr> items);
  Expr Alt(std::vector<Expr> alternatives);
  Expr Optional(Expr e) { return Repeat(e, 0, 1); }
  Expr Star(Expr e) { return Repeat(e, 0, -1); }
  Expr Plus(Expr e) { return Repeat(e, 1, -1); }
  // min..max copies; max = -1: unbounded. REQUIRES: 0 <= min, max == -1 or min <= max.
  Expr Repeat(Expr e, int min, int max);

  // Named rules, for recursion: NewRule, then Ref anywhere, then SetRule once.
  RuleId NewRule(std::string name);
  void SetRule(RuleId rule, Expr body);
  Expr Ref(RuleId rule);

  // A JSON value that satisfies `schema` (the subset of docs/grammar.md; errors as for
  // CompileJsonSchema). "$ref"s resolve against `schema` itself.
  StatusOr<Expr> JsonSchema(const nlohmann::json& schema, const SchemaOptions& options = {});
  // The same, producing properties in the schema's own (declared) order.
  StatusOr<Expr> JsonSchema(const nlohmann::ordered_json& schema,
                            const SchemaOptions& options = {});
  // Any JSON value / any JSON object.
  Expr AnyJson(const SchemaOptions& options = {});
  Expr AnyJsonObjectExpr(const SchemaOptions& options = {});

  // A piece made once per builder under `key` (e.g. "json.string_char"): `make` runs on the
  // first call only.
  Expr Shared(const std::string& key, const std::function<Expr()>& make);

  // Lowers the pieces reachable from `root`. Fails for a rule left without a body, a
  // left-recursive rule (A ::= A ...), a rule that can never complete, or a grammar past the
  // bounds above (its start state included). Iterative throughout: any nesting depth is safe.
  // The builder may not be used afterwards.
  StatusOr<std::shared_ptr<const Grammar>> Build(Expr root);

  struct Impl;  // grammar/builder.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace epserve::grammar
