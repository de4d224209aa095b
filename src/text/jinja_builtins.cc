// Attribute/item lookup, slicing, iteration, str/dict/list methods, %-formatting and tests.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>

#include "text/jinja_builtins.h"

namespace epserve::text::jinja {

StatusOr<std::vector<Value>> BindArgs(const CallArgs& args, std::initializer_list<std::string_view> names,
                                      std::string_view fn) {
  std::vector<Value> out(names.size());
  if (args.positional.size() > names.size()) {
    return Status::InvalidArgument(std::string(fn) + "() takes at most " + std::to_string(names.size()) +
                                   " argument(s), got " + std::to_string(args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Status::InvalidArgument(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    }
    out[it - names.begin()] = value;
  }
  return out;
}

std::string AsciiUpper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string AsciiLower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}
size_t CodePointLength(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string StripPy(std::string_view s, const Value& chars, bool left, bool right) {
  std::u32string cps = DecodeUtf8(s);
  std::u32string set = chars.is_string() ? DecodeUtf8(chars.as_string()) : std::u32string();
  bool use_set = chars.is_string();
  auto strip = [&](char32_t c) { return use_set ? set.find(c) != std::u32string::npos : IsPyWhitespace(c); };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

namespace {

bool IsAsciiUpper(char32_t c) { return c >= 'A' && c <= 'Z'; }
bool IsAsciiLower(char32_t c) { return c >= 'a' && c <= 'z'; }

Value BoundMethod(const Value& obj, const std::string& name) {
  return Value::MakeCallable(Callable{
      .name = name, .is_macro = false, .fn = [obj, name](CallArgs& args) { return CallMethod(obj, name, args); }});
}

const std::set<std::string>& StrMethods() {
  static const std::set<std::string> k = {"startswith", "endswith", "split",   "rsplit",  "strip",    "lstrip",
                                          "rstrip",     "replace",  "upper",   "lower",   "title",    "capitalize",
                                          "find",       "rfind",    "index",   "count",   "join",     "format",
                                          "isdigit",    "isalpha",  "isalnum", "isspace", "islower",  "isupper",
                                          "splitlines", "swapcase", "zfill",   "rindex",  "partition"};
  return k;
}
const std::set<std::string>& DictMethods() {
  static const std::set<std::string> k = {"items", "keys", "values", "get"};
  return k;
}

Status Unsafe(const std::string& attr, const Value& obj) {
  return Status::InvalidArgument("access to attribute '" + attr + "' of '" + obj.TypeName() + "' object is unsafe.");
}

// Python's slice index normalization (PySlice_AdjustIndices).
std::vector<int64_t> SliceIndices(int64_t len, const Value& start_v, const Value& stop_v, int64_t step) {
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

StatusOr<std::vector<std::string>> SplitPy(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    std::u32string cps = DecodeUtf8(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && IsPyWhitespace(cps[i])) ++i;
      if (i == cps.size()) break;
      size_t b = i;
      while (i < cps.size() && !IsPyWhitespace(cps[i])) ++i;
      words.emplace_back(b, i);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      // The unsplit remainder keeps its inner whitespace (stripped only on the split side).
      if (!from_right) {
        auto rest = cps.substr(words[maxsplit].first);
        size_t e = rest.size();
        while (e > 0 && IsPyWhitespace(rest[e - 1])) --e;
        words.resize(maxsplit);
        for (auto [b, e2] : words) parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, e2 - b)));
        parts.push_back(EncodeUtf8(std::u32string_view(rest).substr(0, e)));
        return parts;
      }
      size_t keep = words.size() - maxsplit;
      size_t b0 = 0;
      while (b0 < cps.size() && IsPyWhitespace(cps[b0])) ++b0;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b0, words[keep - 1].second - b0)));
      for (size_t k = keep; k < words.size(); ++k) {
        parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
      }
      return parts;
    }
    for (auto [b, e] : words) parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, e - b)));
    return parts;
  }
  if (!sep.is_string()) return Status::InvalidArgument("must be str or None, not " + sep.TypeName());
  const std::string& d = sep.as_string();
  if (d.empty()) return Status::InvalidArgument("empty separator");
  std::vector<size_t> hits;
  size_t pos = 0;
  while ((pos = s.find(d, pos)) != std::string::npos) {
    hits.push_back(pos);
    pos += d.size();
  }
  if (maxsplit >= 0 && static_cast<int64_t>(hits.size()) > maxsplit) {
    if (from_right) {
      // rsplit matches from the right: re-scan backwards.
      hits.clear();
      size_t end = s.size();
      while (static_cast<int64_t>(hits.size()) < maxsplit && end >= d.size()) {
        size_t p = s.rfind(d, end - d.size());
        if (p == std::string::npos) break;
        hits.insert(hits.begin(), p);
        end = p;
      }
    } else {
      hits.resize(maxsplit);
    }
  }
  size_t b = 0;
  for (size_t h : hits) {
    parts.push_back(s.substr(b, h - b));
    b = h + d.size();
  }
  parts.push_back(s.substr(b));
  return parts;
}

Value StringList(const std::vector<std::string>& parts) {
  List items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::MakeList(std::move(items));
}

std::string Replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t b = 0, pos;
  int64_t done = 0;
  while ((count < 0 || done < count) && (pos = s.find(old, b)) != std::string::npos) {
    out += s.substr(b, pos - b) + repl;
    b = pos + old.size();
    ++done;
  }
  return out + s.substr(b);
}

std::string PyTitle(const std::string& s) {  // str.title(): capitalize after every non-letter
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    bool upper = c >= 'A' && c <= 'Z', lower = c >= 'a' && c <= 'z';
    if (upper || lower) {
      c = prev_cased ? AsciiLower(std::string(1, c))[0] : AsciiUpper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = (static_cast<unsigned char>(c) & 0x80) != 0 && prev_cased;
    }
  }
  return out;
}

StatusOr<std::string> StrFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) return Status::InvalidArgument("format: single '{' encountered");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return Status::InvalidArgument("format: unsupported field '{" + field + "}'");
      }
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t idx = field.empty() ? auto_idx++ : std::stoul(field);
        if (idx >= args.positional.size()) return Status::InvalidArgument("format: replacement index out of range");
        v = &args.positional[idx];
      } else {
        for (const auto& [k, kv] : args.keyword) {
          if (k == field) v = &kv;
        }
        if (v == nullptr) return Status::InvalidArgument("format: missing keyword '" + field + "'");
      }
      out += v->Str();
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return Status::InvalidArgument(obj.undefined_hint());
    case Value::Kind::kDict:
      if (DictMethods().count(name)) return BoundMethod(obj, name);
      if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" || name == "clear") {
        return Unsafe(name, obj);
      }
      [[fallthrough]];
    case Value::Kind::kNamespace: {
      const Value* v = obj.dict().Find(name);
      if (v != nullptr) return *v;
      return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
    }
    case Value::Kind::kString:
      if (StrMethods().count(name)) return BoundMethod(obj, name);
      break;
    case Value::Kind::kList:
      if (name == "index" || name == "count") return BoundMethod(obj, name);
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
          name == "reverse" || name == "sort" || name == "clear") {
        return Unsafe(name, obj);
      }
      break;
    default:
      break;
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
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
    return Value::Undefined("'" + obj.TypeName() + " object' has no element " + std::to_string(key.as_int()));
  }
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const Value* v = obj.dict().Find(key.as_string());
    if (v != nullptr) return *v;
  }
  if (key.is_string()) return GetAttr(obj, key.as_string());
  return Value::Undefined("'" + obj.TypeName() + " object' has no element " + key.Repr());
}

StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
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
    for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step)) out.push_back(cps[i]);
    return Value::String(EncodeUtf8(out));
  }
  return Status::InvalidArgument("'" + obj.TypeName() + "' object is not subscriptable");
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
      for (char32_t c : DecodeUtf8(v.as_string())) chars.push_back(Value::String(EncodeUtf8(std::u32string(1, c))));
      return chars;
    }
    default:
      return Status::InvalidArgument("'" + v.TypeName() + "' object is not iterable");
  }
}

StatusOr<Value> GetAttrPath(const Value& obj, const std::string& path) {
  Value cur = obj;
  size_t b = 0;
  while (true) {
    size_t dot = path.find('.', b);
    std::string part = path.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    ASSIGN_OR_RETURN(cur, GetItem(cur, numeric ? Value::Int(std::stoll(part)) : Value::String(part)));
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
  if (!obj.is_string()) return Status::InvalidArgument("'" + obj.TypeName() + "' has no method '" + name + "'");
  const std::string& s = obj.as_string();
  if (name == "format") {
    ASSIGN_OR_RETURN(std::string formatted, StrFormat(s, args));
    return Value::String(formatted);
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"prefix"}, name));
    List options = a[0].is_list() ? a[0].list() : List{a[0]};
    for (const Value& o : options) {
      if (!o.is_string()) return Status::InvalidArgument(name + " first arg must be str or a tuple of str");
      const std::string& p = o.as_string();
      bool hit = name == "startswith" ? s.compare(0, p.size(), p) == 0
                                      : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"sep", "maxsplit"}, name));
    ASSIGN_OR_RETURN(auto parts, SplitPy(s, a[0], a[1].is_number() ? a[1].as_int() : -1, name == "rsplit"));
    return StringList(parts);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"chars"}, name));
    return Value::String(StripPy(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"old", "new", "count"}, name));
    if (!a[0].is_string() || !a[1].is_string()) return Status::InvalidArgument("replace() arguments must be str");
    return Value::String(Replace(s, a[0].as_string(), a[1].as_string(), a[2].is_number() ? a[2].as_int() : -1));
  }
  if (name == "upper") return Value::String(AsciiUpper(s));
  if (name == "lower") return Value::String(AsciiLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(s.empty() ? s : AsciiUpper(s.substr(0, 1)) + AsciiLower(s.substr(1)));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"sub"}, name));
    if (!a[0].is_string()) return Status::InvalidArgument("must be str, not " + a[0].TypeName());
    const std::string& sub = a[0].as_string();
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointLength(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::Int(n);
    }
    size_t p = (name == "find" || name == "index") ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") return Status::InvalidArgument("substring not found");
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(CodePointLength(s.substr(0, p))));
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"iterable"}, name));
    ASSIGN_OR_RETURN(List items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return Status::InvalidArgument("sequence item " + std::to_string(i) + ": expected str instance, " +
                                       items[i].TypeName() + " found");
      }
      if (i > 0) out += s;
      out += items[i].as_string();
    }
    return Value::String(out);
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    std::string cur;
    for (size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
        lines.push_back(cur);
        cur.clear();
        if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      } else {
        cur += c;
      }
    }
    if (!cur.empty()) lines.push_back(cur);
    return StringList(lines);
  }
  std::u32string cps = DecodeUtf8(s);
  auto all = [&](auto pred) { return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred); };
  if (name == "isdigit") return Value::Bool(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value::Bool(all([](char32_t c) { return IsAsciiUpper(c) || IsAsciiLower(c); }));
  if (name == "isalnum") {
    return Value::Bool(all([](char32_t c) { return IsAsciiUpper(c) || IsAsciiLower(c) || (c >= '0' && c <= '9'); }));
  }
  if (name == "isspace") return Value::Bool(all(IsPyWhitespace));
  if (name == "islower" || name == "isupper") {
    bool want_lower = name == "islower", any_cased = false;
    for (char32_t c : cps) {
      if (IsAsciiUpper(c) || IsAsciiLower(c)) {
        any_cased = true;
        if (IsAsciiLower(c) != want_lower) return Value::Bool(false);
      }
    }
    return Value::Bool(any_cased);
  }
  return Status::InvalidArgument("unsupported str method '" + name + "'");
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
    while (j < fmt.size() && (std::isdigit(static_cast<unsigned char>(fmt[j])) || fmt[j] == '.')) ++j;
    if (j >= fmt.size()) return Status::InvalidArgument("incomplete format");
    char conv = fmt[j];
    std::string spec = fmt.substr(i, j - i);
    i = j;
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) return Status::InvalidArgument("not enough arguments for format string");
    const Value& v = values[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? v.Str() : v.Repr();
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), text.c_str());
      out += spec == "%" ? text : std::string(buf);
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X') {
      if (!v.is_number()) return Status::InvalidArgument("%" + std::string(1, conv) + " format: a number is required");
      int64_t n = v.is_float() ? static_cast<int64_t>(v.as_float()) : v.as_int();
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), static_cast<long long>(n));
      out += buf;
    } else if (conv == 'f' || conv == 'e' || conv == 'g') {
      if (!v.is_number()) return Status::InvalidArgument("%" + std::string(1, conv) + " format: a number is required");
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v.as_float());
      out += buf;
    } else {
      return Status::InvalidArgument(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next < values.size()) return Status::InvalidArgument("not all arguments converted during string formatting");
  return out;
}

bool IsSupportedTest(std::string_view name) {
  static const std::set<std::string_view> k = {
      "defined", "undefined", "none", "boolean", "false",  "true", "string", "number",      "integer", "float",
      "mapping", "iterable",  "sequence", "callable", "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=",
      "gt",      ">",         "ge",   ">=",     "greaterthan", "lessthan", "in", "sameas", "odd", "even",
      "divisibleby", "lower", "upper"};
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
    ASSIGN_OR_RETURN(Value r, CallMethod(Value::String(v.Str()), name == "lower" ? "islower" : "isupper", {}));
    return r.as_bool();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"num"}, name));
    if (!v.is_number() || v.is_float()) return Status::InvalidArgument("test '" + std::string(name) + "' needs an integer");
    int64_t d = name == "divisibleby" ? (a[0].is_number() ? a[0].as_int() : 0) : 2;
    if (d == 0) return Status::InvalidArgument("integer division or modulo by zero");
    int64_t m = ((v.as_int() % d) + d) % d;
    return name == "odd" ? m == 1 : m == 0;
  }
  ASSIGN_OR_RETURN(auto a, BindArgs(args, {"other"}, name));
  const Value& o = a[0];
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, o);
  if (name == "ne" || name == "!=") return !Equals(v, o);
  if (name == "sameas") {
    if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == o.kind() && v.as_bool() == o.as_bool();
    return v.IsIdentical(o) && !v.is_int() && !v.is_float() && !v.is_string();
  }
  if (name == "in") {
    if (o.is_string()) return v.is_string() && o.as_string().find(v.as_string()) != std::string::npos;
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
