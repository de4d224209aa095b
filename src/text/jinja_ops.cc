// Python's binary and unary operators on jinja::Value (+ - * / // % ** ~, `in`, comparisons).
#include "text/jinja_ops.h"

#include <algorithm>
#include <cmath>

#include "text/jinja_builtins.h"

namespace epserve::text::jinja {
namespace {

Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return Status::InvalidArgument("unsupported operand type(s) for " + std::string(op) + ": '" +
                                 a.TypeName() + "' and '" + b.TypeName() + "'");
}

Status Overflow() { return Status::InvalidArgument("integer overflow (outside 64 bits)"); }

// Python ints are unbounded; ours are 64-bit, and leaving that range is an error.
StatusOr<Value> CheckedInt(char op, const Value& a, const Value& b) {
  int64_t r = 0;
  bool overflow = op == '+'   ? __builtin_add_overflow(a.as_int(), b.as_int(), &r)
                  : op == '-' ? __builtin_sub_overflow(a.as_int(), b.as_int(), &r)
                              : __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
  if (overflow) return Overflow();
  return Value::Int(r);
}

StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.as_string().size())
                                 : static_cast<int64_t>(seq.list().size());
  if (n > 0 && unit > 0 && n > kMaxBuiltSize / unit) {
    return Status::InvalidArgument("repetition result too large");
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::String(std::move(out));
  }
  List out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return Value::MakeList(std::move(out), seq.is_tuple());
}

double PyFloorMod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m == 0 ? std::copysign(0.0, b) : m;  // Python: 3 % -1.5 == -0.0
}

}  // namespace

StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::String(a.Str() + b.Str());
  if (a.is_undefined()) return Status::InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return Status::InvalidArgument(b.undefined_hint());
  bool numbers = a.is_number() && b.is_number();
  bool floats = numbers && (a.is_float() || b.is_float());
  if (op == "+") {
    if (numbers) return floats ? Value::Float(a.as_float() + b.as_float()) : CheckedInt('+', a, b);
    if (a.is_string() && b.is_string()) return Value::String(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      List out = a.list();
      out.insert(out.end(), b.list().begin(), b.list().end());
      return Value::MakeList(std::move(out), a.is_tuple());
    }
    if (a.is_string() || a.is_list()) {
      return Status::InvalidArgument("can only concatenate " + a.TypeName() + " (not \"" +
                                     b.TypeName() + "\") to " + a.TypeName());
    }
    return Unsupported(op, a, b);
  }
  if (op == "*") {
    if (numbers) return floats ? Value::Float(a.as_float() * b.as_float()) : CheckedInt('*', a, b);
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return Repeat(b, a.as_int());
    return Unsupported(op, a, b);
  }
  if (op == "%" && a.is_string()) {
    ASSIGN_OR_RETURN(std::string s, PercentFormat(a.as_string(), b));
    return Value::String(std::move(s));
  }
  if (!numbers) return Unsupported(op, a, b);
  if (op == "-") return floats ? Value::Float(a.as_float() - b.as_float()) : CheckedInt('-', a, b);
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      int64_t r = 1, base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {  // square-and-multiply, overflow-checked
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return Overflow();
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Overflow();
      }
      return Value::Int(r);
    }
    if (a.as_float() == 0 && b.as_float() < 0) {
      return Status::InvalidArgument("0.0 cannot be raised to a negative power");
    }
    return Value::Float(std::pow(a.as_float(), b.as_float()));
  }
  bool zero = floats ? b.as_float() == 0 : b.as_int() == 0;
  if (zero)
    return Status::InvalidArgument(op == "/" ? "division by zero"
                                             : "integer division or modulo by zero");
  if (op == "/") return Value::Float(a.as_float() / b.as_float());
  if (op == "//") {
    if (floats) return Value::Float(std::floor(a.as_float() / b.as_float()));
    if (a.as_int() == INT64_MIN && b.as_int() == -1) return Overflow();
    int64_t q = a.as_int() / b.as_int();
    if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
    return Value::Int(q);
  }
  if (op == "%") {
    if (floats) return Value::Float(PyFloorMod(a.as_float(), b.as_float()));
    if (b.as_int() == -1) return Value::Int(0);
    int64_t m = a.as_int() % b.as_int();
    if (m != 0 && ((m < 0) != (b.as_int() < 0))) m += b.as_int();
    return Value::Int(m);
  }
  return Status::InvalidArgument("unknown operator '" + op + "'");
}

StatusOr<Value> UnaryOp(const std::string& op, const Value& a) {
  if (op == "not") return Value::Bool(!a.Truthy());
  if (a.is_undefined()) return Status::InvalidArgument(a.undefined_hint());
  if (!a.is_number())
    return Status::InvalidArgument("bad operand type for unary " + op + ": '" + a.TypeName() + "'");
  if (op == "+") return a.is_float() ? a : Value::Int(a.as_int());
  if (a.is_float()) return Value::Float(-a.as_float());
  if (a.as_int() == INT64_MIN) return Overflow();
  return Value::Int(-a.as_int());
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return Status::InvalidArgument("'in <string>' requires string as left operand, not " +
                                       item.TypeName());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list().begin(), container.list().end(),
                         [&](const Value& x) { return Equals(x, item); });
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict() || item.is_namespace()) {
        return Status::InvalidArgument("unhashable type: " + Quoted(item.TypeName()));
      }
      return item.is_string() && container.dict().Find(item.as_string()) != nullptr;
    default:
      return Status::InvalidArgument("argument of type '" + container.TypeName() +
                                     "' is not iterable");
  }
}

StatusOr<bool> CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in") return Contains(b, a);
  if (op == "not in") {
    ASSIGN_OR_RETURN(bool in, Contains(b, a));
    return !in;
  }
  if (a.is_undefined()) return Status::InvalidArgument(a.undefined_hint());
  if (b.is_undefined()) return Status::InvalidArgument(b.undefined_hint());
  ASSIGN_OR_RETURN(int c, Compare(a, b, op));
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

}  // namespace epserve::text::jinja
