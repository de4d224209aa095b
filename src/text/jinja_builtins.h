// Jinja builtins with jinja2's semantics: filters, tests, the methods of str/dict/list that
// templates call, and attribute/item lookup (jinja2's Environment.getattr/getitem under the
// immutable sandbox: mutating methods are refused).
#pragma once

#include <string_view>

#include "text/jinja_value.h"

namespace epserve::text::jinja {

bool IsSupportedFilter(std::string_view name);
bool IsSupportedTest(std::string_view name);

// Errors carry no position; the caller adds it.
StatusOr<Value> ApplyFilter(std::string_view name, const Value& value, const CallArgs& args);
StatusOr<bool> ApplyTest(std::string_view name, const Value& value, const CallArgs& args);

// `obj.name`: a dict key, a bound method (callable), or undefined. Errors when `obj` is undefined.
StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
// `obj[key]`: an item, a slice-free index, or undefined. Errors when `obj` is undefined.
StatusOr<Value> GetItem(const Value& obj, const Value& key);
// Python slicing of a str or list; null start/stop/step are passed as undefined.
StatusOr<Value> Slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Items of a for loop / list(): list items, dict keys, str characters; undefined is empty.
StatusOr<List> Iterate(const Value& v);

// Binds call arguments to parameter names (positional first, then keywords); missing ones are
// undefined. `fn` names the function in errors.
StatusOr<std::vector<Value>> BindArgs(const CallArgs& args,
                                      std::initializer_list<std::string_view> names,
                                      std::string_view fn);

// A method of a str, dict or list value (`s.startswith('x')`); errors for unknown methods.
StatusOr<Value> CallMethod(const Value& obj, const std::string& name, const CallArgs& args);
// Python `fmt % args` (%s %r %d %i %f %x %%, with flags/width/precision); `args` a tuple or one
// value.
StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args);
// jinja2's attribute getter for map/selectattr/sort: dotted path, integer parts index.
StatusOr<Value> GetAttrPath(const Value& obj, const std::string& path);

// Python str semantics (jinja_strings.cc). Case mapping is Unicode (utf8proc's simple mappings,
// plus ß -> SS for upper()); Python's other multi-character mappings are not reproduced.
bool IsStrMethod(const std::string& name);
StatusOr<Value> CallStrMethod(const std::string& s, const std::string& name, const CallArgs& args);
std::string StripPy(std::string_view s, const Value& chars, bool left, bool right);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyCapitalize(std::string_view s);
size_t CodePointLength(std::string_view s);

}  // namespace epserve::text::jinja
