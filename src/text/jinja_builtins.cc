// Attribute/item lookup, slicing, iteration, str/dict/list methods, %-formatting and tests.
#include "text/jinja_builtins.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>

#include "text/jinja_ops.h"

namespace epserve::text::jinja {

StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                      std::initializer_list<std::string_view> names,
                                      std::string_view fn) {
  std::vector<Value> out(names.size());
  if (args.positional.size() > names.size()) {
    return Status::InvalidArgument(std::string(fn) + "() takes at most " +
                                   std::to_string(names.size()) + " argument(s), got " +
                                   std::to_string(args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Status::InvalidArgument(std::string(fn) + "() got an unexpected keyword argument '" +
                                     key + "'");
    }
    out[it - names.begin()] = value;
  }
  return out;
}

namespace {

Value BoundMethod(const Value& obj, const std::string& name) {
  return Value::MakeCallable(
      Callable{.name = name, .is_macro = false, .fn = [obj, name](CallArgs& args) {
                 return CallMethod(obj, name, args);
               }});
}

const std::set<std::string>& DictMethods() {
  static const std::set<std::string> k = {"items", "keys", "values", "get"};
  return k;
}

Status Unsafe(const std::string& attr, const Value& obj) {
  return Status::InvalidArgument("access to attribute '" + attr + "' of '" + obj.TypeName() +
                                 "' object is unsafe.");
}

// Python's slice index normalization (PySlice_AdjustIndices).
std::vector<int64_t> SliceIndices(int64_t len, const Value& start_v, const Value& stop_v,
                                  int64_t step) {
  int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? len : len - 1;
  auto adjust = [&](const Value& v, int64_t dflt) {
    if (!v.is_number()) return dflt;
    int64_t i = v.as_int();
    if (i < 0) {
      i += len;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? upper : lower);
  int64_t stop = adjust(stop_v, step < 0 ? lower : upper);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  return idx;
}

}  // namespace

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return Status::InvalidArgument(obj.undefined_hint());
    case Value::Kind::kDict:
      if (DictMethods().count(name)) return BoundMethod(obj, name);
      if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" ||
          name == "clear") {
        return Unsafe(name, obj);
      }
      [[fallthrough]];
    case Value::Kind::kNamespace: {
      const Value* v = obj.dict().Find(name);
      if (v != nullptr) return *v;
      return Value::Undefined(Quoted(obj.TypeName() + " object") + " has no attribute '" + name +
                              "'");
    }
    case Value::Kind::kString:
      if (IsStrMethod(name)) return BoundMethod(obj, name);
      break;
    case Value::Kind::kList:
      if (name == "index" || name == "count") return BoundMethod(obj, name);
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
          name == "remove" || name == "reverse" || name == "sort" || name == "clear") {
        return Unsafe(name, obj);
      }
      break;
    default:
      break;
  }
  return Value::Undefined(Quoted(obj.TypeName() + " object") + " has no attribute '" + name + "'");
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return Status::InvalidArgument(obj.undefined_hint());
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.list()[i];
    } else {
      std::u32string cps = DecodeUtf8(obj.as_string());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(EncodeUtf8(cps.substr(i, 1)));
    }
    return Value::Undefined(Quoted(obj.TypeName() + " object") + " has no element " +
                            std::to_string(key.as_int()));
  }
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const Value* v = obj.dict().Find(key.as_string());
    if (v != nullptr) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.as_string());
  return Value::Undefined(Quoted(obj.TypeName() + " object") + " has no element " + key.Repr());
}

StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop,
                      const Value& step_v) {
  if (obj.is_undefined()) return Status::InvalidArgument(obj.undefined_hint());
  int64_t step = step_v.is_number() ? step_v.as_int() : 1;
  if (step == 0) return Status::InvalidArgument("slice step cannot be zero");
  if (obj.is_list()) {
    List out;
    for (int64_t i : SliceIndices(static_cast<int64_t>(obj.list().size()), start, stop, step)) {
      out.push_back(obj.list()[i]);
    }
    return Value::MakeList(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    std::u32string cps = DecodeUtf8(obj.as_string()), out;
    for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step))
      out.push_back(cps[i]);
    return Value::String(EncodeUtf8(out));
  }
  return Status::InvalidArgument(Quoted(obj.TypeName()) + " object is not subscriptable");
}

StatusOr<List> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return List{};
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      List keys;
      for (const auto& [k, unused] : v.dict().items) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      for (char32_t c : DecodeUtf8(v.as_string()))
        chars.push_back(Value::String(EncodeUtf8(std::u32string(1, c))));
      return chars;
    }
    default:
      return Status::InvalidArgument(Quoted(v.TypeName()) + " object is not iterable");
  }
}

StatusOr<Value> GetAttrPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t b = 0;
  while (true) {
    size_t dot = path.find('.', b);
    std::string part = path.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
    ASSIGN_OR_RETURN(cur, GetItem(cur, numeric ? Value::Int(ParseInt64(part).value_or(INT64_MAX))
                                               : Value::String(part)));
    if (dot == std::string::npos) return cur;
    b = dot + 1;
  }
}

StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const CallArgs& args) {
  if (obj.is_dict()) {
    if (name == "get") {
      ASSIGN_OR_RETURN(auto a, BindArgs(args, {"key", "default"}, "get"));
      const Value* v = a[0].is_string() ? obj.dict().Find(a[0].as_string()) : nullptr;
      if (v != nullptr) return *v;
      return a[1].is_undefined() ? Value::None() : a[1];
    }
    List out;
    for (const auto& [k, v] : obj.dict().items) {
      if (name == "items") out.push_back(Value::MakeList({Value::String(k), v}, /*is_tuple=*/true));
      if (name == "keys") out.push_back(Value::String(k));
      if (name == "values") out.push_back(v);
    }
    return Value::MakeList(std::move(out));
  }
  if (obj.is_list()) {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"value"}, name));
    int64_t count = 0;
    for (size_t i = 0; i < obj.list().size(); ++i) {
      if (!Equals(obj.list()[i], a[0])) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") return Status::InvalidArgument(a[0].Repr() + " is not in list");
    return Value::Int(count);
  }
  if (!obj.is_string())
    return Status::InvalidArgument(Quoted(obj.TypeName()) + " has no method " + Quoted(name));
  return CallStrMethod(obj.as_string(), name, args);
}

StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args) {
  List values = args.is_tuple() ? args.list() : List{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && std::string_view("-+ 0#").find(fmt[j]) != std::string_view::npos) ++j;
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.'))
      ++j;
    if (j >= fmt.size()) return Status::InvalidArgument("incomplete format");
    char conv = fmt[j];
    std::string spec = fmt.substr(i, j - i);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size())
      return Status::InvalidArgument("not enough arguments for format string");
    const Value& v = values[next++];
    char buf[128];
    std::string need_number =
        std::string(1, '%').append(1, conv).append(" format: a number is required");
    if (conv == 's' || conv == 'r') {
      // Width and precision count code points; the text may be longer than any fixed buffer.
      std::u32string text = DecodeUtf8(conv == 's' ? v.Str() : v.Repr());
      size_t dot = spec.find('.');
      std::string flags_width =
          spec.substr(1, dot == std::string::npos ? std::string::npos : dot - 1);
      bool left = flags_width.find('-') != std::string::npos;
      size_t digits = flags_width.find_first_of("123456789");
      int64_t width =
          digits == std::string::npos ? 0 : ParseInt64(flags_width.substr(digits)).value_or(-1);
      int64_t precision =
          dot == std::string::npos ? -2 : ParseInt64(spec.substr(dot + 1)).value_or(0);
      if (width < 0 || width > kMaxBuiltSize || precision < -2) {
        return Status::InvalidArgument("format width or precision too large");
      }
      if (precision >= 0 && static_cast<size_t>(precision) < text.size()) text.resize(precision);
      size_t w = static_cast<size_t>(width);
      std::u32string pad(text.size() < w ? w - text.size() : 0, U' ');
      out += EncodeUtf8(left ? text + pad : pad + text);
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X') {
      if (!v.is_number()) return Status::InvalidArgument(need_number);
      int64_t n = v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int();
      std::string c_spec = spec;
      c_spec.append("ll").append(1, conv == 'i' ? 'd' : conv);
      std::snprintf(buf, sizeof(buf), c_spec.c_str(), static_cast<long long>(n));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      if (!v.is_number()) return Status::InvalidArgument(need_number);
      std::string c_spec = spec;
      c_spec.append(1, conv);
      std::snprintf(buf, sizeof(buf), c_spec.c_str(), v.as_float());
      out += buf;
    } else {
      return Status::InvalidArgument(
          std::string("unsupported format character ").append(Quoted(std::string(1, conv))));
    }
  }
  // Python only complains about unused arguments given as a tuple or a scalar (a list or dict
  // argument could be a mapping for %(name)s).
  bool mapping_like = !args.is_tuple() && (args.is_list() || args.is_dict());
  if (next < values.size() && !mapping_like) {
    return Status::InvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

bool IsSupportedTest(std::string_view name) {
  static const std::set<std::string_view> k = {
      "defined",  "undefined", "none",    "boolean",     "false",    "true",
      "string",   "number",    "integer", "float",       "mapping",  "iterable",
      "sequence", "callable",  "eq",      "equalto",     "==",       "ne",
      "!=",       "lt",        "<",       "le",          "<=",       "gt",
      ">",        "ge",        ">=",      "greaterthan", "lessthan", "in",
      "sameas",   "odd",       "even",    "divisibleby", "lower",    "upper"};
  return k.count(name) > 0;
}

StatusOr<bool> ApplyTest(std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "lower" || name == "upper") {
    ASSIGN_OR_RETURN(
        Value r, CallMethod(Value::String(v.Str()), name == "lower" ? "islower" : "isupper", {}));
    return r.as_bool();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"num"}, name));
    // jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (Python %, floats too).
    Value divisor = name == "divisibleby" ? a[0] : Value::Int(2);
    ASSIGN_OR_RETURN(Value m, BinaryOp("%", v, divisor));
    return Equals(m, Value::Int(name == "odd" ? 1 : 0));
  }
  ASSIGN_OR_RETURN(auto a, BindArgs(args, {"other"}, name));
  const Value& o = a[0];
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, o);
  if (name == "ne" || name == "!=") return !Equals(v, o);
  if (name == "sameas") {
    if (v.is_none() || v.is_bool() || v.is_undefined())
      return v.kind() == o.kind() && v.as_bool() == o.as_bool();
    return v.IsIdentical(o) && !v.is_int() && !v.is_float() && !v.is_string();
  }
  if (name == "in") {
    if (o.is_string())
      return v.is_string() && o.as_string().find(v.as_string()) != std::string::npos;
    if (o.is_dict()) return v.is_string() && o.dict().Find(v.as_string()) != nullptr;
    ASSIGN_OR_RETURN(List items, Iterate(o));
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return Equals(x, v); });
  }
  ASSIGN_OR_RETURN(int c, Compare(v, o, name));
  if (name == "lt" || name == "<" || name == "lessthan") return c < 0;
  if (name == "le" || name == "<=") return c <= 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return c > 0;
  return c >= 0;
}

}  // namespace epserve::text::jinja
