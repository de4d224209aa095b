// GrammarBuilder: expression DAG -> rules (grammar_ir.h), and the checks and tables the
// Matcher relies on (no left recursion, min_rest).
#include "grammar/builder.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>

#include "grammar/builder_impl.h"
#include "grammar/grammar_ir.h"

namespace epserve::grammar {

namespace {

constexpr size_t kMaxElements = size_t{4} << 20;
constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

// Lowers expressions to rules. Each alternative is assembled in a local vector and appended
// whole, so lowering a nested rule never interleaves with its parent's elements.
class Lowering {
 public:
  Lowering(const GrammarBuilder::Impl& b, Grammar* g) : b_(b), g_(g) {}

  Status Run(int32_t root) {
    // Named rules keep their ids; anonymous rules follow.
    g_->rule_alts.resize(b_.rule_names.size());
    g_->rule_names = b_.rule_names;
    for (size_t r = 0; r < b_.rule_bodies.size(); ++r) {
      if (b_.rule_bodies[r] < 0) {
        return Status::InvalidArgument("grammar rule '" + b_.rule_names[r] + "' has no body");
      }
    }
    const uint32_t root_rule = NewRule("root");
    g_->elements.push_back({ElementKind::kRef, root_rule});
    g_->elements.push_back({ElementKind::kEnd, 0});
    RETURN_IF_ERROR(LowerRule(root_rule, root));
    for (size_t r = 0; r < b_.rule_bodies.size(); ++r) {
      RETURN_IF_ERROR(LowerRule(static_cast<uint32_t>(r), b_.rule_bodies[r]));
    }
    return Status::Ok();
  }

 private:
  uint32_t NewRule(std::string name) {
    g_->rule_alts.emplace_back();
    g_->rule_names.push_back(std::move(name));
    return static_cast<uint32_t>(g_->rule_alts.size() - 1);
  }

  uint32_t ByteSetIndex(const ByteSet& s) {
    auto key = std::make_tuple(s.bits[0], s.bits[1], s.bits[2], s.bits[3]);
    auto it = byte_set_index_.find(key);
    if (it != byte_set_index_.end()) return it->second;
    g_->byte_sets.push_back(s);
    const uint32_t idx = static_cast<uint32_t>(g_->byte_sets.size() - 1);
    byte_set_index_.emplace(key, idx);
    return idx;
  }

  Status AddAlternative(uint32_t rule, const std::vector<Element>& alt) {
    if (g_->elements.size() + alt.size() + 1 > kMaxElements) {
      return Status::InvalidArgument("grammar too large (over " + std::to_string(kMaxElements) +
                                     " elements): lower maxLength/maxItems or simplify it");
    }
    g_->rule_alts[rule].push_back(static_cast<uint32_t>(g_->elements.size()));
    g_->elements.insert(g_->elements.end(), alt.begin(), alt.end());
    g_->elements.push_back({ElementKind::kEnd, 0});
    return Status::Ok();
  }

  // The body's alternatives become the rule's alternatives.
  Status LowerRule(uint32_t rule, int32_t body) {
    const ExprNode& e = b_.exprs[body];
    std::vector<int32_t> alts = e.kind == ExprKind::kAlt ? e.items : std::vector<int32_t>{body};
    for (int32_t a : alts) {
      std::vector<Element> out;
      RETURN_IF_ERROR(Emit(a, &out));
      RETURN_IF_ERROR(AddAlternative(rule, out));
    }
    return Status::Ok();
  }

  Status Emit(int32_t id, std::vector<Element>* out) {
    const ExprNode& e = b_.exprs[id];
    switch (e.kind) {
      case ExprKind::kEmpty:
        return Status::Ok();
      case ExprKind::kBytes:
        out->push_back({ElementKind::kBytes, ByteSetIndex(e.bytes)});
        return Status::Ok();
      case ExprKind::kToken:
        out->push_back({ElementKind::kToken, static_cast<uint32_t>(e.arg)});
        return Status::Ok();
      case ExprKind::kSeq:
        for (int32_t c : e.items) RETURN_IF_ERROR(Emit(c, out));
        if (out->size() > kMaxElements) return Status::InvalidArgument("grammar too large");
        return Status::Ok();
      case ExprKind::kRef:
        out->push_back({ElementKind::kRef, static_cast<uint32_t>(e.arg)});
        return Status::Ok();
      case ExprKind::kAlt:
      case ExprKind::kRepeat: {
        uint32_t rule;
        RETURN_IF_ERROR(RuleFor(id, &rule));
        out->push_back({ElementKind::kRef, rule});
        return Status::Ok();
      }
    }
    return Status::Internal("bad expression kind");
  }

  // An anonymous rule for an alternation or a repetition, made once per expression.
  Status RuleFor(int32_t id, uint32_t* rule) {
    auto it = rule_of_expr_.find(id);
    if (it != rule_of_expr_.end()) {
      *rule = it->second;
      return Status::Ok();
    }
    const ExprNode& e = b_.exprs[id];
    if (e.kind == ExprKind::kAlt) {
      *rule = NewRule("alt" + std::to_string(id));
      rule_of_expr_[id] = *rule;
      return LowerRule(*rule, id);
    }
    // Repeat: the min copies, then a tail: star (S ::= x S | ε) or a chain of optionals
    // (O_k ::= x O_{k-1} | ε), all right-recursive so stacks stay flat.
    *rule = NewRule("rep" + std::to_string(id));
    rule_of_expr_[id] = *rule;
    std::vector<Element> head;
    for (int i = 0; i < e.min; ++i) {
      RETURN_IF_ERROR(Emit(e.arg, &head));
      if (head.size() > kMaxElements) return Status::InvalidArgument("grammar too large");
    }
    if (e.max == e.min) return AddAlternative(*rule, head);
    uint32_t tail;
    if (e.max < 0) {
      tail = NewRule("star" + std::to_string(id));
      std::vector<Element> loop;
      RETURN_IF_ERROR(Emit(e.arg, &loop));
      loop.push_back({ElementKind::kRef, tail});
      RETURN_IF_ERROR(AddAlternative(tail, loop));
      RETURN_IF_ERROR(AddAlternative(tail, {}));
    } else {
      std::vector<Element> x;
      RETURN_IF_ERROR(Emit(e.arg, &x));
      tail = NewRule("opt" + std::to_string(id) + "_1");
      RETURN_IF_ERROR(AddAlternative(tail, x));
      RETURN_IF_ERROR(AddAlternative(tail, {}));
      for (int k = 2; k <= e.max - e.min; ++k) {
        const uint32_t next = NewRule("opt" + std::to_string(id) + "_" + std::to_string(k));
        std::vector<Element> alt = x;
        alt.push_back({ElementKind::kRef, tail});
        RETURN_IF_ERROR(AddAlternative(next, alt));
        RETURN_IF_ERROR(AddAlternative(next, {}));
        tail = next;
      }
    }
    head.push_back({ElementKind::kRef, tail});
    return AddAlternative(*rule, head);
  }

  const GrammarBuilder::Impl& b_;
  Grammar* g_;
  std::map<int32_t, uint32_t> rule_of_expr_;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>, uint32_t> byte_set_index_;
};

int64_t Cost(const Grammar& g, const Element& e) {
  switch (e.kind) {
    case ElementKind::kEnd:
      return 0;
    case ElementKind::kBytes:
    case ElementKind::kToken:
      return 1;
    case ElementKind::kRef:
      return g.rule_min[e.arg];
  }
  return 0;
}

// rule_min by fixed point, then min_rest per position.
Status ComputeMinLengths(Grammar* g) {
  const size_t num_rules = g->rule_alts.size();
  g->rule_min.assign(num_rules, kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < num_rules; ++r) {
      for (uint32_t start : g->rule_alts[r]) {
        int64_t sum = 0;
        for (uint32_t p = start; g->elements[p].kind != ElementKind::kEnd; ++p) {
          sum = std::min(kInf, sum + Cost(*g, g->elements[p]));
        }
        if (sum < g->rule_min[r]) {
          g->rule_min[r] = sum;
          changed = true;
        }
      }
    }
  }
  for (size_t r = 0; r < num_rules; ++r) {
    if (g->rule_min[r] >= kInf) {
      return Status::InvalidArgument("grammar rule '" + g->rule_names[r] + "' can never complete");
    }
  }
  g->min_rest.assign(g->elements.size(), 0);
  for (size_t p = g->elements.size(); p-- > 0;) {
    if (g->elements[p].kind == ElementKind::kEnd) continue;
    g->min_rest[p] = Cost(*g, g->elements[p]) + g->min_rest[p + 1];
  }
  return Status::Ok();
}

// A rule that can reach itself through leftmost references (past only empty-matching
// references) would make reference expansion loop forever.
Status CheckNoLeftRecursion(const Grammar& g) {
  const size_t n = g.rule_alts.size();
  std::vector<std::vector<uint32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    for (uint32_t start : g.rule_alts[r]) {
      for (uint32_t p = start; g.elements[p].kind == ElementKind::kRef; ++p) {
        left[r].push_back(g.elements[p].arg);
        if (g.rule_min[g.elements[p].arg] != 0) break;
      }
    }
  }
  std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  std::function<bool(uint32_t)> cyclic = [&](uint32_t r) {
    state[r] = 1;
    for (uint32_t s : left[r]) {
      if (state[s] == 1 || (state[s] == 0 && cyclic(s))) return true;
    }
    state[r] = 2;
    return false;
  };
  for (uint32_t r = 0; r < n; ++r) {
    if (state[r] == 0 && cyclic(r)) {
      return Status::InvalidArgument("grammar rule '" + g.rule_names[r] +
                                     "' is left-recursive (possibly through empty matches)");
    }
  }
  return Status::Ok();
}

}  // namespace

GrammarBuilder::GrammarBuilder() : impl_(std::make_unique<Impl>()) {}
GrammarBuilder::~GrammarBuilder() = default;

GrammarBuilder::Expr GrammarBuilder::Empty() {
  impl_->exprs.push_back({.kind = ExprKind::kEmpty});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::ByteRange(uint8_t lo, uint8_t hi) {
  ExprNode n{.kind = ExprKind::kBytes};
  n.bytes.AddRange(lo, hi);
  impl_->exprs.push_back(n);
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::Literal(std::string_view bytes) {
  std::vector<Expr> items;
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    items.push_back(ByteRange(b, b));
  }
  return Seq(std::move(items));
}

GrammarBuilder::Expr GrammarBuilder::Token(int32_t id) {
  impl_->exprs.push_back({.kind = ExprKind::kToken, .arg = id});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::Seq(std::vector<Expr> items) {
  if (items.size() == 1) return items[0];
  impl_->exprs.push_back({.kind = ExprKind::kSeq, .items = std::move(items)});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::Alt(std::vector<Expr> alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  // Nested alternations flatten into one rule, and single-byte alternatives merge into one
  // byte set (fewer parse stacks to carry).
  std::vector<Expr> flat;
  for (Expr a : alternatives) {
    if (impl_->exprs[a].kind == ExprKind::kAlt) {
      const std::vector<int32_t> inner = impl_->exprs[a].items;
      flat.insert(flat.end(), inner.begin(), inner.end());
    } else {
      flat.push_back(a);
    }
  }
  ByteSet merged;
  int num_byte_sets = 0;
  std::vector<Expr> rest;
  for (Expr a : flat) {
    const ExprNode& n = impl_->exprs[a];
    if (n.kind == ExprKind::kBytes) {
      for (int w = 0; w < 4; ++w) merged.bits[w] |= n.bytes.bits[w];
      ++num_byte_sets;
    } else {
      rest.push_back(a);
    }
  }
  if (num_byte_sets > 1) {
    impl_->exprs.push_back({.kind = ExprKind::kBytes, .bytes = merged});
    rest.insert(rest.begin(), static_cast<Expr>(impl_->exprs.size() - 1));
    flat = std::move(rest);
  }
  if (flat.size() == 1) return flat[0];
  impl_->exprs.push_back({.kind = ExprKind::kAlt, .items = std::move(flat)});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::Repeat(Expr e, int min, int max) {
  CHECK(min >= 0 && (max < 0 || min <= max)) << "bad repeat bounds " << min << ".." << max;
  if (min == 1 && max == 1) return e;
  impl_->exprs.push_back({.kind = ExprKind::kRepeat, .arg = e, .min = min, .max = max});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

GrammarBuilder::RuleId GrammarBuilder::NewRule(std::string name) {
  impl_->rule_names.push_back(std::move(name));
  impl_->rule_bodies.push_back(-1);
  return static_cast<RuleId>(impl_->rule_names.size() - 1);
}

void GrammarBuilder::SetRule(RuleId rule, Expr body) {
  CHECK(rule >= 0 && rule < static_cast<RuleId>(impl_->rule_bodies.size()));
  CHECK(impl_->rule_bodies[rule] < 0) << "rule " << impl_->rule_names[rule] << " set twice";
  impl_->rule_bodies[rule] = body;
}

GrammarBuilder::Expr GrammarBuilder::Ref(RuleId rule) {
  impl_->exprs.push_back({.kind = ExprKind::kRef, .arg = rule});
  return static_cast<Expr>(impl_->exprs.size() - 1);
}

StatusOr<std::shared_ptr<const Grammar>> GrammarBuilder::Build(Expr root) {
  CHECK(!impl_->built) << "GrammarBuilder::Build called twice";
  impl_->built = true;
  auto g = std::make_shared<Grammar>();
  Lowering lowering(*impl_, g.get());
  RETURN_IF_ERROR(lowering.Run(root));
  RETURN_IF_ERROR(ComputeMinLengths(g.get()));
  RETURN_IF_ERROR(CheckNoLeftRecursion(*g));
  return std::shared_ptr<const Grammar>(std::move(g));
}

}  // namespace epserve::grammar

namespace epserve::grammar {

GrammarBuilder::Expr GrammarBuilder::Shared(const std::string& key,
                                            const std::function<Expr()>& make) {
  auto it = impl_->memo.find(key);
  if (it != impl_->memo.end()) return it->second;
  const Expr e = make();
  impl_->memo[key] = e;
  return e;
}

}  // namespace epserve::grammar
