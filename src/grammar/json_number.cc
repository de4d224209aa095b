#include "grammar/json_number.h"

#include <string>
#include <vector>

#include "grammar/json_values.h"

namespace epserve::grammar::json {

namespace {

using Expr = GrammarBuilder::Expr;

// Digit strings of equal length, lo <= hi: every digit string in between.
Expr SameLength(GrammarBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return b.Empty();
  if (lo == hi) return b.Literal(lo);
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) return b.Seq({b.Literal(lo.substr(0, 1)), SameLength(b, lo_rest, hi_rest)});
  const std::string nines(lo_rest.size(), '9'), zeros(lo_rest.size(), '0');
  if (lo_rest == zeros && hi_rest == nines) {
    return b.Seq({b.ByteRange(lo[0], hi[0]),
                  b.Repeat(b.ByteRange('0', '9'), static_cast<int>(lo_rest.size()),
                           static_cast<int>(lo_rest.size()))});
  }
  std::vector<Expr> alts;
  alts.push_back(b.Seq({b.Literal(lo.substr(0, 1)), SameLength(b, lo_rest, nines)}));
  if (hi[0] - lo[0] >= 2) {
    alts.push_back(b.Seq({b.ByteRange(lo[0] + 1, hi[0] - 1),
                          b.Repeat(b.ByteRange('0', '9'), static_cast<int>(lo_rest.size()),
                                   static_cast<int>(lo_rest.size()))}));
  }
  alts.push_back(b.Seq({b.Literal(hi.substr(0, 1)), SameLength(b, zeros, hi_rest)}));
  return b.Alt(std::move(alts));
}

// Bounds as plain values (std::optional here trips gcc 12's -Wmaybe-uninitialized at -O3).
struct Bound {
  uint64_t value = 0;
  bool set = false;
};

Bound Upper(const std::optional<uint64_t>& v) { return v ? Bound{*v, true} : Bound{}; }

// Decimal integers (no leading zeros) in [lo, hi]; hi unset: unbounded.
Expr UnsignedImpl(GrammarBuilder& b, uint64_t lo, Bound hi) {
  const std::string a = std::to_string(lo);
  const std::string h = hi.set ? std::to_string(hi.value) : a;
  const size_t la = a.size(), lh = h.size();
  std::vector<Expr> alts;
  for (size_t len = la; len <= lh; ++len) {
    std::string from = a;
    if (len != la) {
      from.assign(len, '0');
      from[0] = '1';
    }
    const std::string to = hi.set && len == lh ? h : std::string(len, '9');
    alts.push_back(SameLength(b, from, to));
  }
  if (!hi.set) {
    alts.push_back(
        b.Seq({b.ByteRange('1', '9'), b.Repeat(b.ByteRange('0', '9'), static_cast<int>(la), -1)}));
  }
  return b.Alt(std::move(alts));
}

Expr Unsigned(GrammarBuilder& b, uint64_t lo, std::optional<uint64_t> hi) {
  return UnsignedImpl(b, lo, Upper(hi));
}

uint64_t Magnitude(int64_t v) {  // |v| for v <= 0 without overflow
  return static_cast<uint64_t>(-(v + 1)) + 1;
}

Expr Fraction(GrammarBuilder& b) { return b.Optional(b.Seq({b.Literal("."), Digits(b)})); }
Expr ZeroFraction(GrammarBuilder& b) {
  return b.Optional(b.Seq({b.Literal("."), b.Plus(b.Literal("0"))}));
}

// Numbers in [lo, hi] for 0 <= lo, lo <= hi: I.F with I in [lo, hi - 1], or hi(.0+)?.
Expr UnsignedNumberImpl(GrammarBuilder& b, uint64_t lo, Bound hi) {
  if (!hi.set) return b.Seq({UnsignedImpl(b, lo, hi), Fraction(b)});
  std::vector<Expr> alts;
  if (hi.value > lo)
    alts.push_back(b.Seq({UnsignedImpl(b, lo, {hi.value - 1, true}), Fraction(b)}));
  alts.push_back(b.Seq({b.Literal(std::to_string(hi.value)), ZeroFraction(b)}));
  return b.Alt(std::move(alts));
}

Expr UnsignedNumber(GrammarBuilder& b, uint64_t lo, std::optional<uint64_t> hi) {
  return UnsignedNumberImpl(b, lo, Upper(hi));
}

}  // namespace

Expr IntegerRange(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Expr> alts;
  // Negative values: magnitudes in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t mag_lo = hi && *hi < 0 ? Magnitude(*hi) : 1;
    const std::optional<uint64_t> mag_hi =
        lo ? std::optional<uint64_t>(Magnitude(*lo)) : std::nullopt;
    alts.push_back(b.Seq({b.Literal("-"), Unsigned(b, mag_lo, mag_hi)}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back(
        Unsigned(b, from, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  return b.Alt(std::move(alts));
}

Expr NumberRange(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Expr> alts;
  if (!lo || *lo < 0) {
    // -m with m in [max(0, -hi), -lo]; "-0" is 0, in range whenever this branch allows m = 0.
    const uint64_t mag_lo = hi && *hi < 0 ? Magnitude(*hi) : 0;
    const std::optional<uint64_t> mag_hi =
        lo ? std::optional<uint64_t>(Magnitude(*lo)) : std::nullopt;
    alts.push_back(b.Seq({b.Literal("-"), UnsignedNumber(b, mag_lo, mag_hi)}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back(UnsignedNumber(
        b, from, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  return b.Alt(std::move(alts));
}

}  // namespace epserve::grammar::json
