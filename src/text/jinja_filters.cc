// Filters with jinja2's semantics; `tojson` is transformers' override (json.dumps with
// ensure_ascii=False and its keyword options), not jinja2's HTML-safe one.
#include <algorithm>
#include <cmath>
#include <set>

#include "text/jinja_builtins.h"

namespace epserve::text::jinja {
namespace {

StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointLength(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().items.size());
    default:
      return Status::InvalidArgument("object of type '" + v.TypeName() + "' has no len()");
  }
}

// The key a sort/unique/min/max compares by: the attribute (if any), lowercased unless
// case-sensitive.
StatusOr<Value> SortKey(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = item;
  if (attribute.is_string()) {
    ASSIGN_OR_RETURN(key, GetAttrPath(item, attribute.as_string()));
  } else if (attribute.is_int()) {
    ASSIGN_OR_RETURN(key, GetItem(item, attribute));
  }
  if (!case_sensitive && key.is_string()) key = Value::String(PyLower(key.as_string()));
  return key;
}

StatusOr<List> SortedBy(List items, const Value& attribute, bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    ASSIGN_OR_RETURN(Value key, SortKey(item, attribute, case_sensitive));
    keyed.emplace_back(std::move(key), std::move(item));
  }
  Status error;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    StatusOr<int> c = reverse ? Compare(b.first, a.first, "<") : Compare(a.first, b.first, "<");
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return *c < 0;
  });
  RETURN_IF_ERROR(error);
  List out;
  for (auto& [unused, item] : keyed) out.push_back(std::move(item));
  return out;
}

StatusOr<Value> ToJson(const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(auto a,
                   BindArgs(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson"));
  JsonDumpOptions o;
  o.ensure_ascii = a[0].Truthy();
  if (a[1].is_int() || a[1].is_bool()) {
    o.has_indent = true;
    o.indent = std::string(std::max<int64_t>(0, a[1].as_int()), ' ');
  } else if (a[1].is_string()) {
    o.has_indent = true;
    o.indent = a[1].as_string();
  } else if (!a[1].is_none() && !a[1].is_undefined()) {
    return Status::InvalidArgument("tojson: indent must be an int or a string");
  }
  if (o.has_indent) o.item_separator = ",";
  if (a[2].is_list()) {
    if (a[2].list().size() != 2 || !a[2].list()[0].is_string() || !a[2].list()[1].is_string()) {
      return Status::InvalidArgument("tojson: separators must be a pair of strings");
    }
    o.item_separator = a[2].list()[0].as_string();
    o.key_separator = a[2].list()[1].as_string();
  }
  o.sort_keys = a[3].Truthy();
  ASSIGN_OR_RETURN(std::string s, JsonDumps(v, o));
  return Value::String(std::move(s));
}

std::string Indent(const std::string& s_in, const std::string& pad, bool first, bool blank) {
  std::string s = s_in + "\n";  // jinja2's quirk for splitlines
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(b, i - b));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      b = i + 1;
    }
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i > 0 ? "\n" + pad : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : pad) + lines[i];
  }
  return first ? pad + rv : rv;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// jinja2's do_int / do_float: Python int()/float() with a default on failure.
Value ToInt(const Value& v, const Value& dflt, int base) {
  Value fallback = dflt.is_undefined() ? Value::Int(0) : dflt;
  if (v.is_int() || v.is_bool()) return Value::Int(v.as_int());
  if (v.is_float())
    return std::isfinite(v.as_float()) ? Value::Int(static_cast<int64_t>(v.as_float())) : fallback;
  if (!v.is_string()) return fallback;
  std::string s = StripPy(v.as_string(), Value(), true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  long long i = std::strtoll(s.c_str(), &end, base);
  if (errno == 0 && *end == '\0') return Value::Int(i);
  double d = std::strtod(s.c_str(), &end);
  if (*end == '\0' && std::isfinite(d)) return Value::Int(static_cast<int64_t>(d));
  return fallback;
}

Value ToFloat(const Value& v, const Value& dflt) {
  Value fallback = dflt.is_undefined() ? Value::Float(0) : dflt;
  if (v.is_number()) return Value::Float(v.as_float());
  if (!v.is_string()) return fallback;
  std::string s = StripPy(v.as_string(), Value(), true, true);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') return fallback;
  return Value::Float(d);
}

// select/reject/selectattr/rejectattr: args are [attr,] test name, test args...
StatusOr<Value> SelectOrReject(const Value& v, const CallArgs& args, bool by_attr, bool keep) {
  CallArgs rest = args;
  Value attr;
  if (by_attr) {
    if (rest.positional.empty() || !rest.positional[0].is_string()) {
      return Status::InvalidArgument("selectattr/rejectattr needs an attribute name");
    }
    attr = rest.positional[0];
    rest.positional.erase(rest.positional.begin());
  }
  std::string test;
  if (!rest.positional.empty()) {
    if (!rest.positional[0].is_string())
      return Status::InvalidArgument("the test name must be a string");
    test = rest.positional[0].as_string();
    rest.positional.erase(rest.positional.begin());
    if (!IsSupportedTest(test)) return Status::InvalidArgument("unsupported test '" + test + "'");
  }
  ASSIGN_OR_RETURN(List items, Iterate(v));
  List out;
  for (const Value& item : items) {
    Value probe = item;
    if (by_attr) {
      ASSIGN_OR_RETURN(probe, GetAttrPath(item, attr.as_string()));
    }
    bool hit = probe.Truthy();
    if (!test.empty()) {
      ASSIGN_OR_RETURN(hit, ApplyTest(test, probe, rest));
    }
    if (hit == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

StatusOr<Value> Map(const Value& v, const CallArgs& args) {
  ASSIGN_OR_RETURN(List items, Iterate(v));
  List out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, kv] : args.keyword) {
    if (k == "attribute") attribute = &kv;
    if (k == "default") dflt = &kv;
  }
  if (attribute != nullptr) {
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value x, GetAttrPath(item, attribute->Str()));
      out.push_back(x.is_undefined() && dflt != nullptr ? *dflt : x);
    }
    return Value::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return Status::InvalidArgument("map needs a filter name or attribute=");
  }
  std::string filter = args.positional[0].as_string();
  if (!IsSupportedFilter(filter))
    return Status::InvalidArgument("unsupported filter '" + filter + "'");
  CallArgs rest = args;
  rest.positional.erase(rest.positional.begin());
  for (const Value& item : items) {
    ASSIGN_OR_RETURN(Value x, ApplyFilter(filter, item, rest));
    out.push_back(std::move(x));
  }
  return Value::MakeList(std::move(out));
}

}  // namespace

bool IsSupportedFilter(std::string_view name) {
  static const std::set<std::string_view> k = {
      "abs",     "capitalize", "count",  "d",      "default", "dictsort",   "e",      "escape",
      "first",   "float",      "format", "indent", "int",     "items",      "join",   "last",
      "length",  "list",       "lower",  "map",    "max",     "min",        "reject", "rejectattr",
      "replace", "reverse",    "round",  "safe",   "select",  "selectattr", "sort",   "string",
      "sum",     "title",      "tojson", "trim",   "unique",  "upper"};
  return k.count(name) > 0;
}

StatusOr<Value> ApplyFilter(std::string_view name, const Value& v, const CallArgs& args) {
  if (name == "tojson") return ToJson(v, args);
  if (name == "default" || name == "d") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"default_value", "boolean"}, name));
    bool use_default = v.is_undefined() || (a[1].Truthy() && !v.Truthy());
    return use_default ? (a[0].is_undefined() ? Value::String("") : a[0]) : v;
  }
  if (name == "length" || name == "count") {
    ASSIGN_OR_RETURN(int64_t n, Length(v));
    return Value::Int(n);
  }
  if (name == "safe" || name == "string") return v.is_string() ? v : Value::String(v.Str());
  if (name == "escape" || name == "e") return Value::String(HtmlEscape(v.Str()));
  if (name == "trim") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"chars"}, name));
    return Value::String(StripPy(v.Str(), a[0], true, true));
  }
  if (name == "upper") return Value::String(PyUpper(v.Str()));
  if (name == "lower") return Value::String(PyLower(v.Str()));
  if (name == "capitalize") return CallMethod(Value::String(v.Str()), "capitalize", {});
  if (name ==
      "title") {  // jinja2: item[0].upper() + item[1:].lower() for words split at [-\s({[<]+
    std::string out;
    bool word_start = true;
    for (char32_t c : DecodeUtf8(v.Str())) {
      bool sep = IsPyWhitespace(c) ||
                 (c < 0x80 &&
                  std::string_view("-([{<").find(static_cast<char>(c)) != std::string_view::npos);
      std::string one = EncodeUtf8(std::u32string(1, c));
      out += sep ? one : (word_start ? PyUpper(one) : PyLower(one));
      word_start = sep;
    }
    return Value::String(out);
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"old", "new", "count"}, name));
    CallArgs call{.positional = {Value::String(a[0].Str()), Value::String(a[1].Str())}};
    if (a[2].is_number()) call.positional.push_back(a[2]);
    return CallMethod(Value::String(v.Str()), "replace", call);
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"d", "attribute"}, name));
    ASSIGN_OR_RETURN(List items, Iterate(v));
    std::string out, sep = a[0].is_undefined() ? "" : a[0].Str();
    for (size_t i = 0; i < items.size(); ++i) {
      Value item = items[i];
      if (!a[1].is_undefined()) {
        ASSIGN_OR_RETURN(item, GetAttrPath(item, a[1].Str()));
      }
      out += (i > 0 ? sep : "") + item.Str();
    }
    return Value::String(out);
  }
  if (name == "first" || name == "last") {
    ASSIGN_OR_RETURN(List items, Iterate(v));
    if (items.empty())
      return Value::Undefined("No " + std::string(name) + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    ASSIGN_OR_RETURN(List items, Iterate(v));
    return Value::MakeList(std::move(items));
  }
  if (name == "reverse") {
    if (v.is_string()) return Slice(v, Value(), Value(), Value::Int(-1));
    ASSIGN_OR_RETURN(List items, Iterate(v));
    std::reverse(items.begin(), items.end());
    return Value::MakeList(std::move(items));
  }
  if (name == "items" || name == "dictsort") {
    if (v.is_undefined() && name == "items") return Value::MakeList({});
    if (v.is_undefined()) return Status::InvalidArgument(v.undefined_hint());
    if (!v.is_dict()) return Status::InvalidArgument("can only get item pairs from a mapping");
    List pairs;
    for (const auto& [k, x] : v.dict().items)
      pairs.push_back(Value::MakeList({Value::String(k), x}, true));
    if (name == "items") return Value::MakeList(std::move(pairs));
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"case_sensitive", "by", "reverse"}, name));
    Value index = Value::Int(a[1].is_string() && a[1].as_string() == "value" ? 1 : 0);
    ASSIGN_OR_RETURN(List sorted, SortedBy(std::move(pairs), index, a[0].Truthy(), a[2].Truthy()));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "sort") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"reverse", "case_sensitive", "attribute"}, name));
    ASSIGN_OR_RETURN(List items, Iterate(v));
    ASSIGN_OR_RETURN(List sorted, SortedBy(std::move(items), a[2], a[1].Truthy(), a[0].Truthy()));
    return Value::MakeList(std::move(sorted));
  }
  if (name == "unique" || name == "min" || name == "max") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"case_sensitive", "attribute"}, name));
    ASSIGN_OR_RETURN(List items, Iterate(v));
    List out, keys;
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value key, SortKey(item, a[1], a[0].Truthy()));
      if (name == "unique") {
        if (std::none_of(keys.begin(), keys.end(),
                         [&](const Value& k) { return Equals(k, key); })) {
          keys.push_back(key);
          out.push_back(item);
        }
        continue;
      }
      if (out.empty()) {
        keys.push_back(key);
        out.push_back(item);
        continue;
      }
      ASSIGN_OR_RETURN(int c, Compare(key, keys[0], "<"));
      if ((name == "min" && c < 0) || (name == "max" && c > 0)) {
        keys[0] = key;
        out[0] = item;
      }
    }
    if (name == "unique") return Value::MakeList(std::move(out));
    return out.empty() ? Value::Undefined("No " + std::string(name) + " item, sequence was empty.")
                       : out[0];
  }
  if (name == "sum") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"attribute", "start"}, name));
    ASSIGN_OR_RETURN(List items, Iterate(v));
    Value total = a[1].is_undefined() ? Value::Int(0) : a[1];
    for (const Value& item : items) {
      Value x = item;
      if (!a[0].is_undefined()) {
        ASSIGN_OR_RETURN(x, GetAttrPath(item, a[0].Str()));
      }
      if (!x.is_number() || !total.is_number())
        return Status::InvalidArgument("sum: items must be numbers");
      total = (x.is_float() || total.is_float()) ? Value::Float(total.as_float() + x.as_float())
                                                 : Value::Int(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "map") return Map(v, args);
  if (name == "select" || name == "reject") return SelectOrReject(v, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr")
    return SelectOrReject(v, args, true, name == "selectattr");
  if ((name == "int" || name == "float") && v.is_undefined()) {
    return Status::InvalidArgument(v.undefined_hint());  // int(Undefined) raises in jinja2
  }
  if (name == "int") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"default", "base"}, name));
    return ToInt(v, a[0], a[1].is_number() ? static_cast<int>(a[1].as_int()) : 10);
  }
  if (name == "float") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"default"}, name));
    return ToFloat(v, a[0]);
  }
  if (name == "abs") {
    if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
    if (v.is_number()) return Value::Int(std::llabs(v.as_int()));
    return Status::InvalidArgument("bad operand type for abs(): '" + v.TypeName() + "'");
  }
  if (name == "round") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"precision", "method"}, name));
    if (!v.is_number())
      return Status::InvalidArgument("round: a number is required, not " + v.TypeName());
    double scale = std::pow(10.0, a[0].is_number() ? static_cast<double>(a[0].as_int()) : 0.0);
    std::string method = a[1].is_string() ? a[1].as_string() : "common";
    // round() of an int stays an int in Python (negative precision rounds to tens, ...).
    if (method == "common" && !v.is_float() && (!a[0].is_number() || a[0].as_int() >= 0)) {
      return Value::Int(v.as_int());
    }
    double x = v.as_float() * scale;
    double r = method == "ceil"    ? std::ceil(x)
               : method == "floor" ? std::floor(x)
                                   : std::nearbyint(x);
    if (method != "common" && method != "ceil" && method != "floor") {
      return Status::InvalidArgument("round: method must be 'common', 'ceil' or 'floor'");
    }
    return Value::Float(r / scale);
  }
  if (name == "indent") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"width", "first", "blank"}, name));
    int64_t width = a[0].is_number() ? a[0].as_int() : 4;
    if (width > 1024) return Status::InvalidArgument("indent width too large");
    std::string pad =
        a[0].is_string() ? a[0].as_string() : std::string(std::max<int64_t>(width, 0), ' ');
    return Value::String(Indent(v.Str(), pad, a[1].Truthy(), a[2].Truthy()));
  }
  if (name == "format") {
    Value fmt_args = Value::MakeList(args.positional, /*is_tuple=*/true);
    ASSIGN_OR_RETURN(std::string s, PercentFormat(v.Str(), fmt_args));
    return Value::String(s);
  }
  return Status::InvalidArgument("unsupported filter '" + std::string(name) + "'");
}

}  // namespace epserve::text::jinja
