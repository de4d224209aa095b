// Python str semantics for templates: methods (split, strip, replace, format, ...) and Unicode
// case mapping through utf8proc (simple mappings plus ß -> SS, as str.upper() gives).
#include <utf8proc.h>

#include <algorithm>
#include <set>

#include "text/jinja_builtins.h"

namespace epserve::text::jinja {
namespace {

bool IsCased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
bool IsLowerCp(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_LL;
}
bool IsAlphaCp(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT || cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
}
bool IsDigitCp(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
}
char32_t ToUpperCp(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t ToLowerCp(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t ToTitleCp(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

void AppendUpper(char32_t c, std::string* out) {
  if (c == 0xDF) {
    *out += "SS";
  } else {
    AppendUtf8(ToUpperCp(c), out);
  }
}

StatusOr<std::vector<std::string>> SplitPy(const std::string& s, const Value& sep, int64_t maxsplit,
                                           bool from_right) {
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
        for (auto [b, e2] : words)
          parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, e2 - b)));
        parts.push_back(EncodeUtf8(std::u32string_view(rest).substr(0, e)));
        return parts;
      }
      size_t keep = words.size() - maxsplit;
      size_t b0 = 0;
      while (b0 < cps.size() && IsPyWhitespace(cps[b0])) ++b0;
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b0, words[keep - 1].second - b0)));
      for (size_t k = keep; k < words.size(); ++k) {
        parts.push_back(EncodeUtf8(
            std::u32string_view(cps).substr(words[k].first, words[k].second - words[k].first)));
      }
      return parts;
    }
    for (auto [b, e] : words)
      parts.push_back(EncodeUtf8(std::u32string_view(cps).substr(b, e - b)));
    return parts;
  }
  if (!sep.is_string())
    return Status::InvalidArgument("must be str or None, not " + sep.TypeName());
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

std::string Replace(const std::string& s, const std::string& old, const std::string& repl,
                    int64_t count) {
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

// str.title(): a cased character after an uncased one is titlecased, the others lowercased.
std::string PyTitle(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    bool cased = IsCased(c);
    AppendUtf8(cased ? (prev_cased ? ToLowerCp(c) : ToTitleCp(c)) : c, &out);
    prev_cased = cased;
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
      if (close == std::string::npos)
        return Status::InvalidArgument("format: single '{' encountered");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return Status::InvalidArgument("format: unsupported field '{" + field + "}'");
      }
      const Value* v = nullptr;
      if (field.empty() ||
          std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t idx = field.empty() ? auto_idx++ : ParseInt64(field).value_or(INT64_MAX);
        if (idx >= args.positional.size())
          return Status::InvalidArgument("format: replacement index out of range");
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

std::string PyUpper(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUpper(c, &out);
  return out;
}
std::string PyLower(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(ToLowerCp(c), &out);
  return out;
}
std::string PyCapitalize(std::string_view s) {
  std::u32string cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i)
    AppendUtf8(i == 0 ? ToTitleCp(cps[i]) : ToLowerCp(cps[i]), &out);
  return out;
}
size_t CodePointLength(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string StripPy(std::string_view s, const Value& chars, bool left, bool right) {
  std::u32string cps = DecodeUtf8(s);
  std::u32string set = chars.is_string() ? DecodeUtf8(chars.as_string()) : std::u32string();
  bool use_set = chars.is_string();
  auto strip = [&](char32_t c) {
    return use_set ? set.find(c) != std::u32string::npos : IsPyWhitespace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return EncodeUtf8(std::u32string_view(cps).substr(b, e - b));
}

bool IsStrMethod(const std::string& name) {
  static const std::set<std::string> k = {
      "startswith", "endswith", "split",   "rsplit",  "strip",      "lstrip",  "rstrip",
      "replace",    "upper",    "lower",   "title",   "capitalize", "find",    "rfind",
      "index",      "rindex",   "count",   "join",    "format",     "isdigit", "isalpha",
      "isalnum",    "isspace",  "islower", "isupper", "splitlines"};
  return k.count(name) > 0;
}

StatusOr<Value> CallStrMethod(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "format") {
    ASSIGN_OR_RETURN(std::string formatted, StrFormat(s, args));
    return Value::String(formatted);
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"prefix"}, name));
    List options = a[0].is_list() ? a[0].list() : List{a[0]};
    for (const Value& o : options) {
      if (!o.is_string())
        return Status::InvalidArgument(name + " first arg must be str or a tuple of str");
      const std::string& p = o.as_string();
      bool hit = name == "startswith"
                     ? s.compare(0, p.size(), p) == 0
                     : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"sep", "maxsplit"}, name));
    ASSIGN_OR_RETURN(auto parts,
                     SplitPy(s, a[0], a[1].is_number() ? a[1].as_int() : -1, name == "rsplit"));
    return StringList(parts);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"chars"}, name));
    return Value::String(StripPy(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(auto a, BindArgs(args, {"old", "new", "count"}, name));
    if (!a[0].is_string() || !a[1].is_string())
      return Status::InvalidArgument("replace() arguments must be str");
    return Value::String(
        Replace(s, a[0].as_string(), a[1].as_string(), a[2].is_number() ? a[2].as_int() : -1));
  }
  if (name == "upper") return Value::String(PyUpper(s));
  if (name == "lower") return Value::String(PyLower(s));
  if (name == "title") return Value::String(PyTitle(s));
  if (name == "capitalize") return Value::String(PyCapitalize(s));
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
      if (name == "index" || name == "rindex")
        return Status::InvalidArgument("substring not found");
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
        return Status::InvalidArgument("sequence item " + std::to_string(i) +
                                       ": expected str instance, " + items[i].TypeName() +
                                       " found");
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
  if (name == "isdigit") return Value::Bool(all(IsDigitCp));
  if (name == "isalpha") return Value::Bool(all(IsAlphaCp));
  if (name == "isalnum") {
    return Value::Bool(all([](char32_t c) { return IsAlphaCp(c) || IsDigitCp(c); }));
  }
  if (name == "isspace") return Value::Bool(all(IsPyWhitespace));
  if (name == "islower" || name == "isupper") {
    bool want_lower = name == "islower", any_cased = false;
    for (char32_t c : cps) {
      if (IsCased(c)) {
        any_cased = true;
        if (IsLowerCp(c) != want_lower) return Value::Bool(false);
      }
    }
    return Value::Bool(any_cased);
  }
  return Status::InvalidArgument("unsupported str method '" + name + "'");
}

}  // namespace epserve::text::jinja
