// GrammarBuilder: expression DAG -> rules (grammar_ir.h), and the checks and tables the
// Matcher relies on (no left recursion, min_rest).
#include "grammar/builder.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <string>
#include <tuple>

#include "grammar/builder_impl.h"
#include "grammar/grammar_ir.h"
#include "grammar/matcher_state.h"

namespace epserve::grammar {

namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
// Alternations up to this many members are merged into an alternation that contains them.
constexpr size_t kFlattenAlt = 8;

Status TooComplex(const std::string& what) {
  return Status::InvalidArgument(std::string(kTooComplexPrefix) + ": " + what);
}

Status TooLarge() {
  return TooComplex("over " + std::to_string(kMaxGrammarElements) +
                    " elements; lower maxLength/maxItems or simplify it");
}

// Lowers expressions to rules. Every walk is iterative (the expression DAG comes from request
// data and may nest arbitrarily deep): Emit flattens a sequence with an explicit stack, and an
// alternation or repetition only names its rule and queues its lowering, so no rule's lowering
// runs inside another's. Each alternative is assembled in a local vector and appended whole.
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
    jobs_.push_back({root_rule, root, false});
    for (size_t r = 0; r < b_.rule_bodies.size(); ++r)
      jobs_.push_back({static_cast<uint32_t>(r), b_.rule_bodies[r], false});
    for (size_t j = 0; j < jobs_.size(); ++j) {
      const Job job = jobs_[j];  // copied: Emit may queue more jobs
      RETURN_IF_ERROR(job.repeat ? LowerRepeat(job.rule, job.expr) : LowerRule(job.rule, job.expr));
    }
    return Status::Ok();
  }

 private:
  struct Job {
    uint32_t rule;
    int32_t expr;
    bool repeat;  // the rule of a kRepeat expression, else the expression's alternatives
  };

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
    if (g_->elements.size() + alt.size() + 1 > kMaxGrammarElements) return TooLarge();
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

  // Appends the elements of expression `id`. Sequences are walked with an explicit stack;
  // `steps_` bounds the whole lowering's work (a DAG of empty sequences used twice at every
  // level would otherwise cost 2^depth steps and emit nothing).
  Status Emit(int32_t id, std::vector<Element>* out) {
    std::vector<int32_t> todo = {id};
    while (!todo.empty()) {
      if (++steps_ > 4 * kMaxGrammarElements) return TooLarge();
      const int32_t x = todo.back();
      todo.pop_back();
      const ExprNode& e = b_.exprs[x];
      switch (e.kind) {
        case ExprKind::kEmpty:
          break;
        case ExprKind::kBytes:
          out->push_back({ElementKind::kBytes, ByteSetIndex(e.bytes)});
          break;
        case ExprKind::kToken:
          out->push_back({ElementKind::kToken, static_cast<uint32_t>(e.arg)});
          break;
        case ExprKind::kSeq:
          todo.insert(todo.end(), e.items.rbegin(), e.items.rend());
          break;
        case ExprKind::kRef:
          out->push_back({ElementKind::kRef, static_cast<uint32_t>(e.arg)});
          break;
        case ExprKind::kAlt:
        case ExprKind::kRepeat:
          out->push_back({ElementKind::kRef, RuleFor(x)});
          break;
      }
      if (out->size() > kMaxGrammarElements) return TooLarge();
    }
    return Status::Ok();
  }

  // The anonymous rule of an alternation or a repetition: named once per expression, lowered
  // later by Run's job loop.
  uint32_t RuleFor(int32_t id) {
    auto it = rule_of_expr_.find(id);
    if (it != rule_of_expr_.end()) return it->second;
    const bool repeat = b_.exprs[id].kind == ExprKind::kRepeat;
    const uint32_t rule = NewRule((repeat ? "rep" : "alt") + std::to_string(id));
    rule_of_expr_[id] = rule;
    jobs_.push_back({rule, id, repeat});
    return rule;
  }

  // Repeat: the min copies, then a tail: star (S ::= x S | ε) or a chain of optionals
  // (O_k ::= x O_{k-1} | ε), all right-recursive so stacks stay flat.
  Status LowerRepeat(uint32_t rule, int32_t id) {
    const ExprNode& e = b_.exprs[id];
    std::vector<Element> x;
    RETURN_IF_ERROR(Emit(e.arg, &x));
    std::vector<Element> head;
    for (int i = 0; i < e.min; ++i) {
      if (head.size() + x.size() > kMaxGrammarElements) return TooLarge();
      head.insert(head.end(), x.begin(), x.end());
    }
    if (e.max == e.min) return AddAlternative(rule, head);
    uint32_t tail;
    if (e.max < 0) {
      tail = NewRule("star" + std::to_string(id));
      std::vector<Element> loop = x;
      loop.push_back({ElementKind::kRef, tail});
      RETURN_IF_ERROR(AddAlternative(tail, loop));
      RETURN_IF_ERROR(AddAlternative(tail, {}));
    } else {
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
    return AddAlternative(rule, head);
  }

  const GrammarBuilder::Impl& b_;
  Grammar* g_;
  std::vector<Job> jobs_;
  size_t steps_ = 0;
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

// rule_min by Knuth's generalization of Dijkstra's algorithm (an alternative's length is its
// bytes plus its references' lengths, all non-negative): rules are settled in order of their
// final length, each alternative fires once its last reference is settled. O(E log E) where a
// fixed point over the rules was quadratic in a chain of references. Then min_rest per position.
Status ComputeMinLengths(Grammar* g) {
  const size_t num_rules = g->rule_alts.size();
  std::vector<uint32_t> alt_rule, alt_pending;
  std::vector<int64_t> alt_sum;
  std::vector<std::vector<uint32_t>> uses(num_rules);  // per rule: alternatives referencing it
  using Item = std::pair<int64_t, uint32_t>;           // (length, rule)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t r = 0; r < num_rules; ++r) {
    for (uint32_t start : g->rule_alts[r]) {
      const uint32_t a = static_cast<uint32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<uint32_t>(r));
      int64_t bytes = 0;
      uint32_t refs = 0;
      for (uint32_t p = start; g->elements[p].kind != ElementKind::kEnd; ++p) {
        if (g->elements[p].kind == ElementKind::kRef) {
          uses[g->elements[p].arg].push_back(a);
          ++refs;
        } else {
          ++bytes;
        }
      }
      alt_sum.push_back(bytes);
      alt_pending.push_back(refs);
      if (refs == 0) ready.push({bytes, static_cast<uint32_t>(r)});
    }
  }
  g->rule_min.assign(num_rules, kInf);
  std::vector<uint8_t> settled(num_rules, 0);
  while (!ready.empty()) {
    const auto [len, r] = ready.top();
    ready.pop();
    if (settled[r]) continue;
    settled[r] = 1;
    g->rule_min[r] = len;
    for (uint32_t a : uses[r]) {
      alt_sum[a] = std::min(kInf, alt_sum[a] + len);
      if (--alt_pending[a] == 0 && !settled[alt_rule[a]]) ready.push({alt_sum[a], alt_rule[a]});
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
    g->min_rest[p] = std::min(kInf, Cost(*g, g->elements[p]) + g->min_rest[p + 1]);
  }
  return Status::Ok();
}

// A rule that can reach itself through leftmost references (past only empty-matching
// references) would make reference expansion loop forever. An iterative depth-first search
// (a chain of references may be as long as the grammar).
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
  std::vector<uint8_t> state(n, 0);               // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;  // (rule, next edge)
  for (uint32_t root = 0; root < n; ++root) {
    if (state[root] != 0) continue;
    state[root] = 1;
    path.push_back({root, 0});
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left[r].size()) {
        state[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t s = left[r][next++];
      if (state[s] == 1) {
        return Status::InvalidArgument("grammar rule '" + g.rule_names[s] +
                                       "' is left-recursive (possibly through empty matches)");
      }
      if (state[s] == 0) {
        state[s] = 1;
        path.push_back({s, 0});
      }
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
    // Flattening is bounded: an alternation nested in a chain (an object's optional
    // properties) would otherwise copy the chain's tail at every level, quadratic in its length.
    if (impl_->exprs[a].kind == ExprKind::kAlt && impl_->exprs[a].items.size() <= kFlattenAlt) {
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
  if (impl_->exprs.size() > kMaxGrammarExprs) {
    return TooComplex("over " + std::to_string(kMaxGrammarExprs) + " expressions");
  }
  auto g = std::make_shared<Grammar>();
  Lowering lowering(*impl_, g.get());
  RETURN_IF_ERROR(lowering.Run(root));
  RETURN_IF_ERROR(ComputeMinLengths(g.get()));
  RETURN_IF_ERROR(CheckNoLeftRecursion(*g));
  RETURN_IF_ERROR(CheckStartClosure(*g));
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
