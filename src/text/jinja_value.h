// jinja::Value: the data model of the Jinja engine, with Python's semantics where templates can
// observe them (str/repr of every type, truthiness, ==, ordering, float formatting, json.dumps).
// Lists and dicts are immutable once built (HF renders in an ImmutableSandboxedEnvironment) and
// shared between copies; a namespace is the one mutable, reference-semantics object.
// Thread safety: values are not synchronized; one render uses its values on one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace epserve::text::jinja {

class Value;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map (Python dict order). Lookups are linear: template dicts
// (messages, tool definitions, namespaces) are small.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const;
  void Set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function value: a builtin (range, a bound string method, ...) or a macro. Errors from a
// builtin carry no position (the call site adds it); errors from a macro already have one.
struct Callable {
  std::string name;
  bool is_macro = false;
  std::function<StatusOr<Value>(CallArgs&)> fn;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  // `hint` names what was missing, for the error when the undefined value is used.
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value MakeList(List items, bool is_tuple = false);
  static Value MakeDict(Dict dict);
  static Value MakeNamespace(Dict dict);
  static Value MakeCallable(Callable fn);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && is_tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return s_; }
  const std::string& undefined_hint() const { return s_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }  // dict or namespace
  Dict& mutable_namespace() const { return *dict_; }
  const Callable& callable() const { return *fn_; }

  // Python truthiness.
  bool Truthy() const;
  // What `{{ v }}` prints: Python str(), with undefined printing "".
  std::string Str() const;
  // Python repr() (how lists and dicts print their items).
  std::string Repr() const;
  // The Python type name used in error messages ("str", "int", "dict", "NoneType", ...).
  std::string TypeName() const;
  bool IsIdentical(const Value& other) const;  // same shared object (namespace/callable `==`)

 private:
  Kind kind_ = Kind::kUndefined;
  bool is_tuple_ = false;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;  // string value, or the undefined hint
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;  // a dict (never mutated) or a namespace
  std::shared_ptr<const Callable> fn_;
};

// Python `a == b` (1 == 1.0 == True; dicts compare by content regardless of order).
bool Equals(const Value& a, const Value& b);
// Python ordering for `<` etc.: -1, 0, 1, or an error naming both types.
StatusOr<int> Compare(const Value& a, const Value& b, std::string_view op);

// Python float repr: 1.0, 0.1, 1e+20, 1.5e-05, inf, nan.
std::string FormatPyFloat(double f);
// Decimal digits -> int64 without exceptions; nullopt when empty, not digits or out of range.
std::optional<int64_t> ParseInt64(std::string_view digits);
// Results larger than this many bytes or items (string repetition, padding, indent) are errors,
// not allocation failures.
inline constexpr int64_t kMaxBuiltSize = int64_t{1} << 26;

// 's' in single quotes, for messages ("'x' is undefined").
std::string Quoted(std::string_view s);
// Python repr of a str: 'a', "it's", 'a\nb'.
std::string PyStrRepr(std::string_view s);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Python json.dumps; errors for values JSON cannot hold (undefined, namespace, function).
StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options);

// UTF-8 helpers: code points <-> bytes (invalid bytes decode as U+FFFD).
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
void AppendUtf8(char32_t c, std::string* out);
// Python str.isspace() for one code point.
bool IsPyWhitespace(char32_t c);

}  // namespace epserve::text::jinja
