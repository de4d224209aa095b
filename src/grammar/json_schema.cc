// JSON Schema (the subset of docs/grammar.md) -> grammar expressions.
#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "grammar/grammar.h"
#include "grammar/json_number.h"
#include "grammar/json_values.h"
#include "grammar/pattern.h"

namespace epserve::grammar {

namespace {

using Json = nlohmann::ordered_json;
using Expr = GrammarBuilder::Expr;

// Keywords that change nothing in what is generated.
const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {"title",      "description", "default",   "examples",
                                          "$schema",    "$id",         "$comment",  "format",
                                          "deprecated", "readOnly",    "writeOnly", "discriminator",
                                          "$defs",      "definitions", "example",   "x-order"};
  return k;
}

const std::set<std::string>& Supported() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "enum",
                                          "const",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "nullable",
                                          "uniqueItems",
                                          "additionalItems"};
  return k;
}

std::string Child(const std::string& ptr, const std::string& key) {
  std::string k;
  for (char c : key) {
    if (c == '~') {
      k += "~0";
    } else if (c == '/') {
      k += "~1";
    } else {
      k += c;
    }
  }
  return ptr + "/" + k;
}

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, const Json& root, const SchemaOptions& o)
      : b_(b), root_(root), o_(o) {}

  StatusOr<Expr> Run() {
    ASSIGN_OR_RETURN(Expr e, Compile(root_, "#"));
    // Referenced schemas compile after their first use, so recursion finds the rule.
    while (!pending_.empty()) {
      auto [rule, ptr] = pending_.front();
      pending_.pop_front();
      const Json* target = Resolve(ptr);
      ASSIGN_OR_RETURN(Expr body, Compile(*target, ptr));
      b_.SetRule(rule, body);
    }
    return e;
  }

 private:
  static Status Error(const std::string& msg, const std::string& ptr) {
    return Status::InvalidArgument(msg + " at " + ptr);
  }

  // The schema a "#/..." pointer names, or null. Walked token by token with a name index per
  // object met (ordered_json finds a key by a linear search, so 100,000 $defs resolved one by
  // one were quadratic).
  const Json* Resolve(const std::string& ref) {
    if (ref == "#") return &root_;
    if (ref.rfind("#/", 0) != 0) return nullptr;
    const Json* at = &root_;
    size_t i = 2;
    while (true) {
      const size_t slash = std::min(ref.find('/', i), ref.size());
      std::string token;
      for (size_t k = i; k < slash; ++k) {
        if (ref[k] == '~' && k + 1 < slash && (ref[k + 1] == '0' || ref[k + 1] == '1')) {
          token += ref[k + 1] == '0' ? '~' : '/';
          ++k;
        } else if (ref[k] == '~') {
          return nullptr;
        } else {
          token += ref[k];
        }
      }
      if (at->is_object()) {
        const auto& index = IndexOf(*at);
        auto it = index.find(token);
        if (it == index.end()) return nullptr;
        at = it->second;
      } else if (at->is_array()) {
        if (token.empty() || token.size() > 9 || (token.size() > 1 && token[0] == '0') ||
            token.find_first_not_of("0123456789") != std::string::npos)
          return nullptr;
        const size_t n = std::stoul(token);
        if (n >= at->size()) return nullptr;
        at = &(*at)[n];
      } else {
        return nullptr;
      }
      if (slash == ref.size()) return at;
      i = slash + 1;
    }
  }

  const std::unordered_map<std::string, const Json*>& IndexOf(const Json& object) {
    auto [it, inserted] = index_.try_emplace(&object);
    if (inserted)
      for (auto m = object.begin(); m != object.end(); ++m) it->second.emplace(m.key(), &m.value());
    return it->second;
  }

  StatusOr<std::optional<int64_t>> IntKeyword(const Json& s, const char* key,
                                              const std::string& ptr) {
    if (!s.contains(key)) return std::optional<int64_t>();
    const Json& v = s.at(key);
    if (!v.is_number()) return Error(std::string("'") + key + "' must be a number", ptr);
    const double d = v.get<double>();
    if (std::floor(d) != d || std::fabs(d) > 9007199254740992.0) {  // 2^53: JSON's exact integers
      return Error(std::string("'") + key + "' = " + v.dump() +
                       " is not supported (only integer bounds within ±2^53)",
                   Child(ptr, key));
    }
    return std::optional<int64_t>(static_cast<int64_t>(d));
  }

  StatusOr<int> CountKeyword(const Json& s, const char* key, int dflt, const std::string& ptr) {
    if (!s.contains(key)) return dflt;
    const Json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(std::string("'") + key + "' must be a non-negative integer", Child(ptr, key));
    }
    if (v.get<int64_t>() > 100000) {
      return Error(std::string("'") + key + "' over 100000 is not supported", Child(ptr, key));
    }
    return static_cast<int>(v.get<int64_t>());
  }

  Status OnlyBeside(const Json& s, const std::string& main, const std::string& ptr) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != main && !Annotations().count(it.key())) {
        return Error("keyword '" + it.key() + "' beside '" + main + "' is not supported", ptr);
      }
    }
    return Status::Ok();
  }

  Expr Literal(const Json& v) { return b_.Literal(v.dump()); }

  // Recursive per schema level: CheckSchemaNesting bounded the depth before.
  StatusOr<Expr> Compile(const Json& s, const std::string& ptr) { return CompileLevel(s, ptr); }

  StatusOr<Expr> CompileLevel(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return json::AnyValue(b_, o_);
      return Error("schema 'false' matches nothing", ptr);
    }
    if (!s.is_object()) return Error("a schema must be an object or a boolean", ptr);
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!Annotations().count(it.key()) && !Supported().count(it.key())) {
        return Error("unsupported JSON Schema keyword '" + it.key() + "'", ptr);
      }
    }
    if (s.contains("uniqueItems") && s.at("uniqueItems") != Json(false)) {
      return Error("unsupported JSON Schema keyword 'uniqueItems'", ptr);
    }
    if (s.contains("$ref")) return CompileRef(s, ptr);
    if (s.contains("allOf")) {
      RETURN_IF_ERROR(OnlyBeside(s, "allOf", ptr));
      const Json& all = s.at("allOf");
      if (!all.is_array() || all.size() != 1) {
        return Error("'allOf' with other than one member is not supported", Child(ptr, "allOf"));
      }
      return Compile(all[0], Child(Child(ptr, "allOf"), "0"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      RETURN_IF_ERROR(OnlyBeside(s, key, ptr));
      const Json& alts = s.at(key);
      const std::string at = Child(ptr, key);
      if (!alts.is_array() || alts.empty())
        return Error(std::string("'") + key + "' must be a non-empty array", at);
      std::vector<Expr> exprs;
      for (size_t i = 0; i < alts.size(); ++i) {
        ASSIGN_OR_RETURN(Expr e, Compile(alts[i], Child(at, std::to_string(i))));
        exprs.push_back(e);
      }
      return b_.Alt(std::move(exprs));
    }
    if (s.contains("const")) return Literal(s.at("const"));
    if (s.contains("enum")) {
      const Json& values = s.at("enum");
      if (!values.is_array() || values.empty()) {
        return Error("'enum' must be a non-empty array", Child(ptr, "enum"));
      }
      std::vector<Expr> exprs;
      for (const Json& v : values) exprs.push_back(Literal(v));
      return b_.Alt(std::move(exprs));
    }
    return CompileTyped(s, ptr);
  }

  StatusOr<Expr> CompileRef(const Json& s, const std::string& ptr) {
    RETURN_IF_ERROR(OnlyBeside(s, "$ref", ptr));
    const Json& r = s.at("$ref");
    if (!r.is_string()) return Error("'$ref' must be a string", ptr);
    const std::string ref = r.get<std::string>();
    if (ref != "#" && ref.rfind("#/", 0) != 0) {
      return Error("'$ref' to '" + ref + "' is not supported (only \"#\" and \"#/...\")", ptr);
    }
    auto it = refs_.find(ref);
    if (it != refs_.end()) return b_.Ref(it->second);
    if (Resolve(ref) == nullptr) return Error("'$ref' to '" + ref + "' resolves to nothing", ptr);
    const GrammarBuilder::RuleId rule = b_.NewRule(ref);
    refs_[ref] = rule;
    pending_.emplace_back(rule, ref);
    return b_.Ref(rule);
  }

  StatusOr<Expr> CompileTyped(const Json& s, const std::string& ptr) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return Error("'type' must name types", Child(ptr, "type"));
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error("'type' must be a string or a non-empty array", Child(ptr, "type"));
      }
    } else {
      // No type: what the keywords imply, else any value.
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("prefixItems")) {
        types.push_back("array");
      } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
        types.push_back("string");
      } else if (s.contains("minimum") || s.contains("maximum")) {
        types.push_back("number");
      } else {
        if (s.contains("nullable")) {
          // {"nullable": true} alone: any value already includes null.
        }
        return json::AnyValue(b_, o_);
      }
    }
    if (s.contains("nullable") && s.at("nullable") == Json(true)) types.push_back("null");
    std::vector<Expr> alts;
    std::set<std::string> seen;
    for (const std::string& t : types) {
      if (!seen.insert(t).second) continue;
      ASSIGN_OR_RETURN(Expr e, CompileType(s, t, ptr));
      alts.push_back(e);
    }
    return b_.Alt(std::move(alts));
  }

  StatusOr<Expr> CompileType(const Json& s, const std::string& t, const std::string& ptr) {
    if (t == "null") return b_.Literal("null");
    if (t == "boolean") return b_.Alt({b_.Literal("true"), b_.Literal("false")});
    if (t == "string") return CompileString(s, ptr);
    if (t == "integer" || t == "number") return CompileNumber(s, t == "integer", ptr);
    if (t == "array") return CompileArray(s, ptr);
    if (t == "object") return CompileObject(s, ptr);
    return Error("unknown type '" + t + "'", Child(ptr, "type"));
  }

  StatusOr<Expr> CompileString(const Json& s, const std::string& ptr) {
    ASSIGN_OR_RETURN(int min, CountKeyword(s, "minLength", 0, ptr));
    ASSIGN_OR_RETURN(int max, CountKeyword(s, "maxLength", -1, ptr));
    if (max >= 0 && max < min) return Error("'maxLength' below 'minLength'", ptr);
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength")) {
        return Error("'pattern' together with 'minLength'/'maxLength' is not supported", ptr);
      }
      if (!s.at("pattern").is_string()) return Error("'pattern' must be a string", ptr);
      auto e = json::PatternString(b_, s.at("pattern").get<std::string>());
      if (!e.ok()) return e.status().WithContext(Child(ptr, "pattern"));
      return e;
    }
    return json::String(b_, min, max);
  }

  StatusOr<Expr> CompileNumber(const Json& s, bool integer, const std::string& ptr) {
    ASSIGN_OR_RETURN(auto lo, IntKeyword(s, "minimum", ptr));
    ASSIGN_OR_RETURN(auto hi, IntKeyword(s, "maximum", ptr));
    ASSIGN_OR_RETURN(auto xlo, IntKeyword(s, "exclusiveMinimum", ptr));
    ASSIGN_OR_RETURN(auto xhi, IntKeyword(s, "exclusiveMaximum", ptr));
    if (!integer && (xlo || xhi)) {
      return Error("'exclusiveMinimum'/'exclusiveMaximum' on numbers are not supported", ptr);
    }
    if (xlo) lo = lo ? std::max(*lo, *xlo + 1) : *xlo + 1;
    if (xhi) hi = hi ? std::min(*hi, *xhi - 1) : *xhi - 1;
    if (lo && hi && *lo > *hi) return Error("'minimum' above 'maximum': no value fits", ptr);
    if (!lo && !hi) return integer ? json::Integer(b_) : json::Number(b_);
    return integer ? json::IntegerRange(b_, lo, hi) : json::NumberRange(b_, lo, hi);
  }

  StatusOr<Expr> CompileArray(const Json& s, const std::string& ptr) {
    ASSIGN_OR_RETURN(int min, CountKeyword(s, "minItems", 0, ptr));
    ASSIGN_OR_RETURN(int max, CountKeyword(s, "maxItems", -1, ptr));
    if (max >= 0 && max < min) return Error("'maxItems' below 'minItems'", ptr);
    // Draft 2020-12's prefixItems + items, or draft-07's items: [...] + additionalItems.
    const bool old_tuple = s.contains("items") && s.at("items").is_array();
    const char* prefix_key = old_tuple ? "items" : "prefixItems";
    const char* rest_key = old_tuple ? "additionalItems" : "items";
    if (old_tuple && s.contains("prefixItems")) {
      return Error("both 'prefixItems' and an 'items' array", ptr);
    }
    if (!old_tuple && s.contains("additionalItems")) {
      return Error("'additionalItems' without an 'items' array is not supported", ptr);
    }
    std::vector<Expr> prefix;
    if (s.contains(prefix_key)) {
      const Json& p = s.at(prefix_key);
      if (!p.is_array()) return Error("'prefixItems' must be an array", ptr);
      for (size_t i = 0; i < p.size(); ++i) {
        ASSIGN_OR_RETURN(Expr e, Compile(p[i], Child(Child(ptr, prefix_key), std::to_string(i))));
        prefix.push_back(e);
      }
    }
    // The item after the prefix: the rest schema; none when it is false, or (documented) when
    // a prefix is given without one.
    std::optional<Expr> rest;
    if (s.contains(rest_key)) {
      if (s.at(rest_key) != Json(false)) {
        ASSIGN_OR_RETURN(Expr e, Compile(s.at(rest_key), Child(ptr, rest_key)));
        rest = e;
      }
    } else if (prefix.empty()) {
      rest = json::AnyValue(b_, o_);
    }
    if (prefix.empty()) {
      if (!rest)
        return min > 0
                   ? Error("'minItems' > 0 but no item may appear", ptr)
                   : StatusOr<Expr>(b_.Seq({json::Open(b_, o_, '['), json::Close(b_, o_, ']')}));
      return json::ArrayOf(b_, o_, *rest, min, max);
    }
    const size_t num_prefix = max >= 0 ? std::min<size_t>(prefix.size(), max) : prefix.size();
    const int min_extra = std::max(0, min - static_cast<int>(prefix.size()));
    const int max_extra = !rest     ? 0
                          : max < 0 ? -1
                                    : std::max(0, max - static_cast<int>(prefix.size()));
    if (min_extra > 0 && !rest)
      return Error("'minItems' exceeds 'prefixItems' and no further item may appear", ptr);
    std::vector<Expr> seq = {json::Open(b_, o_, '[')};
    for (size_t i = 0; i < num_prefix; ++i) {
      if (i > 0) seq.push_back(json::Comma(b_, o_));
      seq.push_back(prefix[i]);
    }
    if (rest && max_extra != 0 && num_prefix == prefix.size()) {
      seq.push_back(b_.Repeat(b_.Seq({json::Comma(b_, o_), *rest}), min_extra, max_extra));
    }
    seq.push_back(json::Close(b_, o_, ']'));
    return b_.Seq(std::move(seq));
  }

  StatusOr<Expr> CompileObject(const Json& s, const std::string& ptr) {
    std::set<std::string> required;
    if (s.contains("required")) {
      const Json& r = s.at("required");
      if (!r.is_array()) return Error("'required' must be an array", Child(ptr, "required"));
      for (const Json& x : r) {
        if (!x.is_string()) return Error("'required' must list strings", Child(ptr, "required"));
        required.insert(x.get<std::string>());
      }
    }
    if (!s.contains("properties")) {
      if (!required.empty()) {
        return Error("'required' names properties that 'properties' does not declare", ptr);
      }
      // A free-form object: values per additionalProperties (any when absent or true).
      if (!s.contains("additionalProperties") || s.at("additionalProperties") == Json(true)) {
        return json::AnyObject(b_, o_);
      }
      if (s.at("additionalProperties") == Json(false)) {
        return b_.Seq({json::Open(b_, o_, '{'), json::Close(b_, o_, '}')});
      }
      ASSIGN_OR_RETURN(Expr v,
                       Compile(s.at("additionalProperties"), Child(ptr, "additionalProperties")));
      return json::ObjectOf(b_, o_, v);
    }
    const Json& props = s.at("properties");
    if (!props.is_object())
      return Error("'properties' must be an object", Child(ptr, "properties"));
    const auto& declared = IndexOf(props);
    for (const std::string& r : required) {
      if (!declared.count(r)) {
        return Error("required property '" + r + "' is not declared in 'properties'", ptr);
      }
    }
    // Declared order. rest[i]: properties i.. after something was written (each with a
    // leading comma); first[i]: properties i.. when nothing was written yet.
    struct Prop {
      Expr expr;
      bool required;
    };
    std::vector<Prop> list;
    for (auto it = props.begin(); it != props.end(); ++it) {
      ASSIGN_OR_RETURN(Expr v, Compile(it.value(), Child(Child(ptr, "properties"), it.key())));
      const Expr member = b_.Seq({b_.Literal(Json(it.key()).dump() + ":"), json::Ws(b_, o_), v});
      list.push_back({member, required.count(it.key()) > 0});
    }
    const size_t n = list.size();
    std::vector<Expr> rest(n + 1), first(n + 1);
    rest[n] = first[n] = b_.Empty();
    for (size_t i = n; i-- > 0;) {
      const Expr with_comma = b_.Seq({json::Comma(b_, o_), list[i].expr, rest[i + 1]});
      const Expr leading = b_.Seq({list[i].expr, rest[i + 1]});
      if (list[i].required) {
        rest[i] = with_comma;
        first[i] = leading;
      } else {
        rest[i] = b_.Alt({with_comma, rest[i + 1]});
        first[i] = b_.Alt({leading, first[i + 1]});
      }
    }
    return b_.Seq({json::Open(b_, o_, '{'), first[0], json::Close(b_, o_, '}')});
  }

  GrammarBuilder& b_;
  const Json& root_;
  SchemaOptions o_;
  std::map<std::string, GrammarBuilder::RuleId> refs_;
  std::deque<std::pair<GrammarBuilder::RuleId, std::string>> pending_;
  std::unordered_map<const Json*, std::unordered_map<std::string, const Json*>> index_;
};

}  // namespace

Status CheckSchemaNesting(const nlohmann::ordered_json& schema) {
  std::vector<std::pair<const Json*, int>> todo = {{&schema, 1}};
  while (!todo.empty()) {
    const auto [j, depth] = todo.back();
    todo.pop_back();
    if (depth > kMaxSchemaNesting)
      return Status::InvalidArgument("schema nested deeper than " +
                                     std::to_string(kMaxSchemaNesting) + " levels of JSON");
    if (j->is_structured())
      for (const Json& child : *j) todo.push_back({&child, depth + 1});
  }
  return Status::Ok();
}

StatusOr<GrammarBuilder::Expr> GrammarBuilder::JsonSchema(const nlohmann::ordered_json& schema,
                                                          const SchemaOptions& options) {
  RETURN_IF_ERROR(CheckSchemaNesting(schema));
  SchemaCompiler compiler(*this, schema, options);
  try {
    return compiler.Run();
  } catch (const nlohmann::json::exception& e) {  // a value that is not UTF-8, written out
    return Status::InvalidArgument(std::string("the schema cannot be written as JSON: ") +
                                   e.what());
  }
}

StatusOr<GrammarBuilder::Expr> GrammarBuilder::JsonSchema(const nlohmann::json& schema,
                                                          const SchemaOptions& options) {
  return JsonSchema(nlohmann::ordered_json(schema), options);
}

}  // namespace epserve::grammar
