// Python operator semantics on jinja::Value. Errors carry no position (the caller adds it);
// using an undefined operand (other than with `~`, `==`, `!=`, `in`) is an error, as in jinja2.
#pragma once

#include <string>

#include "text/jinja_value.h"

namespace epserve::text::jinja {

// op: + - * / // % ** ~
StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b);
// op: not - +
StatusOr<Value> UnaryOp(const std::string& op, const Value& a);
// op: == != < <= > >= in, not in
StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b);
StatusOr<bool> Contains(const Value& container, const Value& item);

}  // namespace epserve::text::jinja
