#include "grammar/json_values.h"

#include "grammar/grammar.h"

namespace epserve::grammar::json {

namespace {

constexpr int kMaxIndent = 32;

std::string WsKey(const std::string& name, const SchemaOptions& o) {
  switch (o.whitespace) {
    case Whitespace::kNone:
      return name + ".compact";
    case Whitespace::kSingleSpace:
      return name + ".space";
    case Whitespace::kPretty:
      return name + ".pretty";
  }
  return name;
}

// kPretty: a newline and up to kMaxIndent spaces.
Expr NewlineIndent(GrammarBuilder& b) {
  return b.Shared("json.newline_indent", [&] {
    return b.Seq({b.Literal("\n"), b.Repeat(b.Literal(" "), 0, kMaxIndent)});
  });
}

Expr Byte(GrammarBuilder& b, uint8_t c) { return b.ByteRange(c, c); }

}  // namespace

Expr Ws(GrammarBuilder& b, const SchemaOptions& o) {
  return b.Shared(WsKey("json.ws", o), [&] {
    return o.whitespace == Whitespace::kNone ? b.Empty() : b.Optional(b.Literal(" "));
  });
}

Expr Comma(GrammarBuilder& b, const SchemaOptions& o) {
  return b.Shared(WsKey("json.comma", o), [&] {
    if (o.whitespace != Whitespace::kPretty) return b.Seq({b.Literal(","), Ws(b, o)});
    return b.Seq({b.Literal(","), b.Optional(b.Alt({b.Literal(" "), NewlineIndent(b)}))});
  });
}

Expr Open(GrammarBuilder& b, const SchemaOptions& o, char bracket) {
  return b.Shared(WsKey(std::string("json.open") + bracket, o), [&] {
    const Expr lit = b.Literal(std::string(1, bracket));
    if (o.whitespace != Whitespace::kPretty) return lit;
    return b.Seq({lit, b.Optional(NewlineIndent(b))});
  });
}

Expr Close(GrammarBuilder& b, const SchemaOptions& o, char bracket) {
  return b.Shared(WsKey(std::string("json.close") + bracket, o), [&] {
    const Expr lit = b.Literal(std::string(1, bracket));
    if (o.whitespace != Whitespace::kPretty) return lit;
    return b.Seq({b.Optional(NewlineIndent(b)), lit});
  });
}

Expr NonAsciiChar(GrammarBuilder& b) {
  return b.Shared("json.non_ascii", [&] {
    const Expr cont = b.ByteRange(0x80, 0xBF);
    return b.Alt({
        b.Seq({b.ByteRange(0xC2, 0xDF), cont}),
        b.Seq({Byte(b, 0xE0), b.ByteRange(0xA0, 0xBF), cont}),
        b.Seq({b.ByteRange(0xE1, 0xEC), cont, cont}),
        b.Seq({Byte(b, 0xED), b.ByteRange(0x80, 0x9F), cont}),
        b.Seq({b.ByteRange(0xEE, 0xEF), cont, cont}),
        b.Seq({Byte(b, 0xF0), b.ByteRange(0x90, 0xBF), cont, cont}),
        b.Seq({b.ByteRange(0xF1, 0xF3), cont, cont, cont}),
        b.Seq({Byte(b, 0xF4), b.ByteRange(0x80, 0x8F), cont, cont}),
    });
  });
}

Expr StringChar(GrammarBuilder& b) {
  return b.Shared("json.string_char", [&] {
    const Expr hex = b.Alt({b.ByteRange('0', '9'), b.ByteRange('a', 'f'), b.ByteRange('A', 'F')});
    // \uXXXX outside D800..DFFF: a lone surrogate is not valid Unicode text.
    const Expr u4 = b.Alt({
        b.Seq({b.Alt({b.ByteRange('0', '9'), b.ByteRange('a', 'c'), b.ByteRange('A', 'C'),
                      b.ByteRange('e', 'f'), b.ByteRange('E', 'F')}),
               hex, hex, hex}),
        b.Seq({b.Alt({Byte(b, 'd'), Byte(b, 'D')}), b.ByteRange('0', '7'), hex, hex}),
    });
    const Expr escape =
        b.Seq({Byte(b, '\\'),
               b.Alt({Byte(b, '"'), Byte(b, '\\'), Byte(b, '/'), Byte(b, 'b'), Byte(b, 'f'),
                      Byte(b, 'n'), Byte(b, 'r'), Byte(b, 't'), b.Seq({Byte(b, 'u'), u4})})});
    return b.Alt({b.ByteRange(0x20, 0x21), b.ByteRange(0x23, 0x5B), b.ByteRange(0x5D, 0x7F),
                  NonAsciiChar(b), escape});
  });
}

Expr String(GrammarBuilder& b, int min, int max) {
  const std::string key = "json.string" + std::to_string(min) + "_" + std::to_string(max);
  return b.Shared(key, [&] {
    return b.Seq({b.Literal("\""), b.Repeat(StringChar(b), min, max), b.Literal("\"")});
  });
}

Expr Digits(GrammarBuilder& b) {
  return b.Shared("json.digits", [&] { return b.Plus(b.ByteRange('0', '9')); });
}

Expr Integer(GrammarBuilder& b) {
  return b.Shared("json.integer", [&] {
    return b.Seq(
        {b.Optional(b.Literal("-")),
         b.Alt({b.Literal("0"), b.Seq({b.ByteRange('1', '9'), b.Star(b.ByteRange('0', '9'))})})});
  });
}

Expr Number(GrammarBuilder& b) {
  return b.Shared("json.number", [&] {
    const Expr frac = b.Optional(b.Seq({b.Literal("."), Digits(b)}));
    const Expr exp =
        b.Optional(b.Seq({b.Alt({b.Literal("e"), b.Literal("E")}),
                          b.Optional(b.Alt({b.Literal("+"), b.Literal("-")})), Digits(b)}));
    return b.Seq({Integer(b), frac, exp});
  });
}

Expr ObjectOf(GrammarBuilder& b, const SchemaOptions& o, Expr value) {
  const Expr member = b.Seq({String(b, 0, -1), b.Literal(":"), Ws(b, o), value});
  return b.Seq({Open(b, o, '{'), b.Optional(b.Seq({member, b.Star(b.Seq({Comma(b, o), member}))})),
                Close(b, o, '}')});
}

Expr ArrayOf(GrammarBuilder& b, const SchemaOptions& o, Expr item, int min, int max) {
  if (max == 0) return b.Seq({Open(b, o, '['), Close(b, o, ']')});
  const Expr more =
      b.Repeat(b.Seq({Comma(b, o), item}), min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
  const Expr items = b.Seq({item, more});
  return b.Seq({Open(b, o, '['), min > 0 ? items : b.Optional(items), Close(b, o, ']')});
}

Expr AnyValue(GrammarBuilder& b, const SchemaOptions& o) {
  return b.Shared(WsKey("json.any_value", o), [&] {
    const GrammarBuilder::RuleId rule = b.NewRule(WsKey("json_value", o));
    const Expr value = b.Ref(rule);
    b.SetRule(rule, b.Alt({ObjectOf(b, o, value), ArrayOf(b, o, value, 0, -1), String(b, 0, -1),
                           Number(b), b.Literal("true"), b.Literal("false"), b.Literal("null")}));
    return value;
  });
}

Expr AnyObject(GrammarBuilder& b, const SchemaOptions& o) {
  return b.Shared(WsKey("json.any_object", o), [&] { return ObjectOf(b, o, AnyValue(b, o)); });
}

}  // namespace epserve::grammar::json

namespace epserve::grammar {

GrammarBuilder::Expr GrammarBuilder::AnyJson(const SchemaOptions& options) {
  return json::AnyValue(*this, options);
}

GrammarBuilder::Expr GrammarBuilder::AnyJsonObjectExpr(const SchemaOptions& options) {
  return json::AnyObject(*this, options);
}

}  // namespace epserve::grammar
