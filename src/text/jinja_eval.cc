#include "text/jinja_eval.h"

#include <ctime>
#include <deque>

#include "text/jinja_builtins.h"
#include "text/jinja_ops.h"

namespace epserve::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox limit

// A scope. Frames live in the Renderer's arena for the whole render, so macros may keep a raw
// pointer to the frame they were defined in.
struct Frame {
  Frame* parent = nullptr;
  Dict vars;
  const Value* Lookup(std::string_view name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent) {
      if (const Value* v = f->vars.Find(name)) return v;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const Template& tpl, const RenderOptions& options) : tpl_(tpl), options_(options) {}

  StatusOr<std::string> Run(const Dict& variables) {
    Frame* globals = NewFrame(nullptr);
    AddGlobals(globals);
    Frame* top = NewFrame(globals);
    top->vars = variables;
    std::string out;
    ASSIGN_OR_RETURN(Flow unused, Exec(tpl_.body, top, &out));
    (void)unused;
    return out;
  }

 private:
  Frame* NewFrame(Frame* parent) {
    frames_.emplace_back();
    frames_.back().parent = parent;
    return &frames_.back();
  }

  Status At(SourcePos pos, const Status& s) const { return ErrorAt(tpl_.origin, pos, s.message()); }
  template <typename T>
  StatusOr<T> At(SourcePos pos, StatusOr<T> r) const {
    if (r.ok()) return r;
    return At(pos, r.status());
  }

  static Value Builtin(std::string name, std::function<StatusOr<Value>(CallArgs&)> fn) {
    return Value::MakeCallable(
        Callable{.name = std::move(name), .is_macro = false, .fn = std::move(fn)});
  }

  void AddGlobals(Frame* f) {
    f->vars.Set(
        "range", Builtin("range", [](CallArgs& args) -> StatusOr<Value> {
          ASSIGN_OR_RETURN(auto a, BindArgs(args, {"start", "stop", "step"}, "range"));
          for (const Value& v : a) {
            if (!v.is_undefined() && !v.is_int() && !v.is_bool()) {
              return Status::InvalidArgument("range: '" + v.TypeName() +
                                             "' object cannot be an integer");
            }
          }
          if (a[0].is_undefined())
            return Status::InvalidArgument("range expected at least 1 argument");
          int64_t start = a[1].is_undefined() ? 0 : a[0].as_int();
          int64_t stop = a[1].is_undefined() ? a[0].as_int() : a[1].as_int();
          int64_t step = a[2].is_undefined() ? 1 : a[2].as_int();
          if (step == 0) return Status::InvalidArgument("range() arg 3 must not be zero");
          List out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (static_cast<int64_t>(out.size()) >= kMaxRange) {
              return Status::InvalidArgument("range too big, maximum size for range is 100000");
            }
            out.push_back(Value::Int(i));
          }
          return Value::MakeList(std::move(out));
        }));
    auto make_dict = [](CallArgs& args, const std::string& fn) -> StatusOr<Dict> {
      if (args.positional.size() > 1)
        return Status::InvalidArgument(fn + "() takes at most 1 positional argument");
      Dict d;
      if (!args.positional.empty()) {
        if (!args.positional[0].is_dict())
          return Status::InvalidArgument(fn + "() argument must be a mapping");
        d = args.positional[0].dict();
      }
      for (auto& [k, v] : args.keyword) d.Set(k, v);
      return d;
    };
    f->vars.Set("namespace", Builtin("namespace", [make_dict](CallArgs& args) -> StatusOr<Value> {
                  ASSIGN_OR_RETURN(Dict d, make_dict(args, "namespace"));
                  return Value::MakeNamespace(std::move(d));
                }));
    f->vars.Set("dict", Builtin("dict", [make_dict](CallArgs& args) -> StatusOr<Value> {
                  ASSIGN_OR_RETURN(Dict d, make_dict(args, "dict"));
                  return Value::MakeDict(std::move(d));
                }));
    f->vars.Set("raise_exception",
                Builtin("raise_exception", [](CallArgs& args) -> StatusOr<Value> {
                  ASSIGN_OR_RETURN(auto a, BindArgs(args, {"message"}, "raise_exception"));
                  return Status::InvalidArgument("template raised an error: " + a[0].Str());
                }));
    std::optional<int64_t> fixed = options_.fixed_time_epoch;
    f->vars.Set("strftime_now", Builtin("strftime_now", [fixed](CallArgs& args) -> StatusOr<Value> {
                  ASSIGN_OR_RETURN(auto a, BindArgs(args, {"format"}, "strftime_now"));
                  if (!a[0].is_string())
                    return Status::InvalidArgument("strftime_now: the format must be a string");
                  std::time_t t = fixed ? static_cast<std::time_t>(*fixed) : std::time(nullptr);
                  std::tm tm_value{};
                  if (fixed) {
                    gmtime_r(&t, &tm_value);
                  } else {
                    localtime_r(&t, &tm_value);
                  }
                  char buf[512];
                  size_t n = std::strftime(buf, sizeof(buf), a[0].as_string().c_str(), &tm_value);
                  return Value::String(std::string(buf, n));
                }));
  }

  StatusOr<Flow> Exec(const Body& body, Frame* f, std::string* out) {
    for (const StmtPtr& s : body) {
      ASSIGN_OR_RETURN(Flow flow, ExecStmt(*s, f, out));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // Binds `targets` to `value` (one name, or unpacking `a, b`).
  Status Assign(const Stmt& s, const std::vector<std::string>& targets, const Value& value,
                Frame* f) {
    if (targets.size() == 1) {
      f->vars.Set(targets[0], value);
      return Status::Ok();
    }
    StatusOr<List> items = Iterate(value);
    if (!items.ok())
      return At(s.pos, Status::InvalidArgument("cannot unpack non-iterable " + value.TypeName()));
    if (items->size() != targets.size()) {
      return At(s.pos, Status::InvalidArgument(
                           std::string(items->size() > targets.size() ? "too many" : "not enough") +
                           " values to unpack (expected " + std::to_string(targets.size()) + ")"));
    }
    for (size_t i = 0; i < targets.size(); ++i) f->vars.Set(targets[i], (*items)[i]);
    return Status::Ok();
  }

  StatusOr<Flow> ExecFor(const Stmt& s, Frame* f, std::string* out) {
    ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, f));
    ASSIGN_OR_RETURN(List all, At(s.expr->pos, Iterate(iterable)));
    List items;
    for (const Value& item : all) {
      if (s.cond) {
        Frame* probe = NewFrame(f);
        RETURN_IF_ERROR(Assign(s, s.targets, item, probe));
        ASSIGN_OR_RETURN(Value keep, Eval(*s.cond, probe));
        if (!keep.Truthy()) continue;
      }
      items.push_back(item);
    }
    if (items.empty()) {
      ASSIGN_OR_RETURN(Flow flow, Exec(s.else_body, NewFrame(f), out));
      return flow;
    }
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      Frame* iter = NewFrame(f);
      RETURN_IF_ERROR(Assign(s, s.targets, items[i], iter));
      Dict loop;
      loop.items = {
          {"index", Value::Int(i + 1)},
          {"index0", Value::Int(i)},
          {"revindex", Value::Int(n - i)},
          {"revindex0", Value::Int(n - i - 1)},
          {"first", Value::Bool(i == 0)},
          {"last", Value::Bool(i == n - 1)},
          {"length", Value::Int(n)},
          {"depth", Value::Int(1)},
          {"depth0", Value::Int(0)},
          {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item")}};
      loop.Set("cycle", Builtin("cycle", [i](CallArgs& args) -> StatusOr<Value> {
                 if (args.positional.empty())
                   return Status::InvalidArgument("no items for cycling given");
                 return args.positional[i % static_cast<int64_t>(args.positional.size())];
               }));
      iter->vars.Set("loop", Value::MakeDict(std::move(loop)));
      ASSIGN_OR_RETURN(Flow flow, Exec(s.body, iter, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // Applies a block's filter chain to its rendered text.
  StatusOr<std::string> FilterBlock(const Stmt& s, Frame* f, std::string text) {
    if (!s.filter) return text;
    Frame* scope = NewFrame(f);
    scope->vars.Set(kBlockName, Value::String(std::move(text)));
    ASSIGN_OR_RETURN(Value v, Eval(*s.filter, scope));
    return v.Str();
  }

  StatusOr<Flow> ExecStmt(const Stmt& s, Frame* f, std::string* out) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        *out += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kPrint: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr, f));
        *out += v.Str();
        return Flow::kNormal;
      }
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          ASSIGN_OR_RETURN(Value c, Eval(*s.conds[i], f));
          if (c.Truthy()) return Exec(s.bodies[i], f, out);
        }
        return Exec(s.else_body, f, out);
      case Stmt::Kind::kFor:
        return ExecFor(s, f, out);
      case Stmt::Kind::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*s.expr, f));
        if (s.attr.empty()) {
          RETURN_IF_ERROR(Assign(s, s.targets, v, f));
          return Flow::kNormal;
        }
        const Value* ns = f->Lookup(s.targets[0]);
        if (ns == nullptr || !ns->is_namespace()) {
          return At(s.pos,
                    Status::InvalidArgument("cannot assign attribute on non-namespace object"));
        }
        ns->mutable_namespace().Set(s.attr, std::move(v));
        return Flow::kNormal;
      }
      case Stmt::Kind::kSetBlock:
      case Stmt::Kind::kFilterBlock: {
        std::string text;
        ASSIGN_OR_RETURN(Flow flow, Exec(s.body, f, &text));
        ASSIGN_OR_RETURN(text, FilterBlock(s, f, std::move(text)));
        if (s.kind == Stmt::Kind::kSetBlock) {
          f->vars.Set(s.targets[0], Value::String(std::move(text)));
        } else {
          *out += text;
        }
        return flow;
      }
      case Stmt::Kind::kMacro:
        f->vars.Set(s.name, MakeMacro(s, f));
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kGeneration:
        return Exec(s.body, f, out);
    }
    return Flow::kNormal;
  }

  Value MakeMacro(const Stmt& s, Frame* def_frame) {
    const Stmt* stmt = &s;
    return Value::MakeCallable(Callable{
        .name = s.name,
        .is_macro = true,
        .fn = [this, stmt, def_frame](CallArgs& args) -> StatusOr<Value> {
          const Stmt& m = *stmt;
          if (args.positional.size() > m.params.size()) {
            return At(m.pos,
                      Status::InvalidArgument("macro '" + m.name + "' takes not more than " +
                                              std::to_string(m.params.size()) + " argument(s)"));
          }
          if (depth_ >= options_.max_call_depth) {
            return At(m.pos, Status::InvalidArgument("macro calls nested too deeply (recursion?)"));
          }
          Frame* scope = NewFrame(def_frame);
          for (const auto& [key, value] : args.keyword) {
            bool known = false;
            for (const MacroParam& p : m.params) known = known || p.name == key;
            if (!known) {
              return At(m.pos,
                        Status::InvalidArgument("macro '" + m.name +
                                                "' takes no keyword argument '" + key + "'"));
            }
          }
          for (size_t i = 0; i < m.params.size(); ++i) {
            const MacroParam& p = m.params[i];
            Value v = Value::Undefined(Quoted(p.name) + " is undefined");
            bool given = i < args.positional.size();
            if (given) v = args.positional[i];
            for (const auto& [key, value] : args.keyword) {
              if (key == p.name) {
                v = value;
                given = true;
              }
            }
            if (!given && p.default_value) {
              ASSIGN_OR_RETURN(v, Eval(*p.default_value, scope));
            }
            scope->vars.Set(p.name, std::move(v));
          }
          std::string text;
          ++depth_;
          StatusOr<Flow> flow = Exec(m.body, scope, &text);
          --depth_;
          if (!flow.ok()) return flow.status();
          return Value::String(std::move(text));
        }});
  }

  StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, Frame* f) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], f));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*expr, f));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  StatusOr<Value> Eval(const Expr& e, Frame* f) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        const Value* v = f->Lookup(e.name);
        return v != nullptr ? *v : Value::Undefined(Quoted(e.name) + " is undefined");
      }
      case Expr::Kind::kList: {
        List items;
        for (const ExprPtr& a : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*a, f));
          items.push_back(std::move(v));
        }
        return Value::MakeList(std::move(items), e.is_tuple);
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], f));
          if (!k.is_string())
            return At(e.args[i]->pos,
                      Status::InvalidArgument("unsupported: dict keys must be strings"));
          ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], f));
          d.Set(k.as_string(), std::move(v));
        }
        return Value::MakeDict(std::move(d));
      }
      case Expr::Kind::kGetAttr: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], f));
        return At(e.pos, GetAttr(obj, e.name));
      }
      case Expr::Kind::kGetItem: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], f));
        return At(e.pos, GetItem(obj, key));
      }
      case Expr::Kind::kSlice: {
        ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], f));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1], f));
          }
        }
        return At(e.pos, Slice(obj, parts[0], parts[1], parts[2]));
      }
      case Expr::Kind::kCall: {
        ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], f));
        if (callee.is_undefined())
          return At(e.pos, Status::InvalidArgument(callee.undefined_hint()));
        if (!callee.is_callable()) {
          return At(e.pos,
                    Status::InvalidArgument(Quoted(callee.TypeName()) + " object is not callable"));
        }
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, f));
        StatusOr<Value> r = callee.callable().fn(args);
        if (callee.callable().is_macro) return r;
        return At(e.pos, std::move(r));
      }
      case Expr::Kind::kFilter: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, f));
        return At(e.pos, ApplyFilter(e.name, v, args));
      }
      case Expr::Kind::kTest: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], f));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, f));
        ASSIGN_OR_RETURN(bool r, At(e.pos, ApplyTest(e.name, v, args)));
        return Value::Bool(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], f));
        return At(e.pos, UnaryOp(e.name, v));
      }
      case Expr::Kind::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], f));
        if (e.name == "and" && !a.Truthy()) return a;
        if (e.name == "or" && a.Truthy()) return a;
        ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], f));
        if (e.name == "and" || e.name == "or") return b;
        return At(e.pos, BinaryOp(e.name, a, b));
      }
      case Expr::Kind::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], f));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], f));
          ASSIGN_OR_RETURN(bool r, At(e.args[i + 1]->pos, CompareOp(e.ops[i], left, right)));
          if (!r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCond: {
        ASSIGN_OR_RETURN(Value c, Eval(*e.args[0], f));
        if (c.Truthy()) return Eval(*e.args[1], f);
        if (e.args[2]) return Eval(*e.args[2], f);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined");
      }
    }
    return Value();
  }

  const Template& tpl_;
  const RenderOptions& options_;
  std::deque<Frame> frames_;  // stable addresses
  int depth_ = 0;
};

}  // namespace

StatusOr<std::string> Render(const Template& tpl, const Dict& variables,
                             const RenderOptions& options) {
  Renderer renderer(tpl, options);
  return renderer.Run(variables);
}

}  // namespace epserve::text::jinja
