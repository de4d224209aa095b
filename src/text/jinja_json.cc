// Python's json.dumps over jinja::Value (what transformers' tojson filter calls).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "text/jinja_value.h"

namespace epserve::text::jinja {

namespace {

void DumpJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  *out += '"';
  std::u32string cps;
  if (ensure_ascii) cps = DecodeUtf8(s);
  auto escape_char = [&](char32_t c) {
    char buf[16];
    switch (c) {
      case '"':
        *out += "\\\"";
        return;
      case '\\':
        *out += "\\\\";
        return;
      case '\n':
        *out += "\\n";
        return;
      case '\r':
        *out += "\\r";
        return;
      case '\t':
        *out += "\\t";
        return;
      case '\b':
        *out += "\\b";
        return;
      case '\f':
        *out += "\\f";
        return;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      *out += buf;
    } else if (ensure_ascii) {
      *out += static_cast<char>(c);
    }
  };
  if (ensure_ascii) {
    for (char32_t c : cps) escape_char(c);
  } else {
    for (unsigned char c : s) {
      if (c < 0x20 || c == '"' || c == '\\') {
        escape_char(c);
      } else {
        *out += static_cast<char>(c);
      }
    }
  }
  *out += '"';
}

Status DumpJson(const Value& v, const JsonDumpOptions& o, int depth, std::string* out) {
  if (depth > 512) return Status::InvalidArgument("tojson: nesting too deep");
  std::string newline;
  if (o.has_indent) {
    newline = "\n";
    for (int i = 0; i <= depth; ++i) newline += o.indent;
  }
  std::string closing_newline;
  if (o.has_indent) {
    closing_newline = "\n";
    for (int i = 0; i < depth; ++i) closing_newline += o.indent;
  }
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return Status::Ok();
    case Value::Kind::kFloat: {
      double f = v.as_float();
      if (std::isnan(f)) {
        *out += "NaN";
      } else if (std::isinf(f)) {
        *out += f < 0 ? "-Infinity" : "Infinity";
      } else {
        *out += FormatPyFloat(f);
      }
      return Status::Ok();
    }
    case Value::Kind::kString:
      DumpJsonString(v.as_string(), o.ensure_ascii, out);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += "[" + newline;
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += o.item_separator + newline;
        RETURN_IF_ERROR(DumpJson(v.list()[i], o, depth + 1, out));
      }
      *out += closing_newline + "]";
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      if (v.dict().items.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict().items) items.push_back(&item);
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += "{" + newline;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += o.item_separator + newline;
        DumpJsonString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_separator;
        RETURN_IF_ERROR(DumpJson(items[i]->second, o, depth + 1, out));
      }
      *out += closing_newline + "}";
      return Status::Ok();
    }
    default:
      return Status::InvalidArgument("Object of type " + v.TypeName() +
                                     " is not JSON serializable");
  }
}

}  // namespace

StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(DumpJson(v, options, 0, &out));
  return out;
}

}  // namespace epserve::text::jinja
