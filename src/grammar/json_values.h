// The JSON pieces the schema compiler assembles, each made once per builder (Shared):
// whitespace, string characters (valid UTF-8 only, JSON escapes, no raw control characters),
// strings, numbers, and any JSON value/object.
#pragma once

#include <string>

#include "grammar/builder.h"

namespace epserve::grammar::json {

using Expr = GrammarBuilder::Expr;

// Whitespace allowed after ':' and ',' (SchemaOptions::whitespace).
Expr Ws(GrammarBuilder& b, const SchemaOptions& o);
// ',' then the whitespace allowed after it.
Expr Comma(GrammarBuilder& b, const SchemaOptions& o);
// '{' or '[' then the whitespace allowed after it; the whitespace allowed before '}' or ']'
// then it. Open(b, o, '{') / Close(b, o, '}').
Expr Open(GrammarBuilder& b, const SchemaOptions& o, char bracket);
Expr Close(GrammarBuilder& b, const SchemaOptions& o, char bracket);
// One character of a JSON string: an unescaped UTF-8 character other than '"', '\' and the
// controls below U+0020, or an escape (\" \\ \/ \b \f \n \r \t, \uXXXX other than surrogates).
Expr StringChar(GrammarBuilder& b);
// Any non-ASCII UTF-8 character (the byte sequences of U+0080..U+10FFFF, no surrogates).
Expr NonAsciiChar(GrammarBuilder& b);
// A JSON string of min..max characters (max = -1: unbounded).
Expr String(GrammarBuilder& b, int min, int max);
Expr Integer(GrammarBuilder& b);  // -?(0|[1-9][0-9]*)
Expr Number(GrammarBuilder& b);   // integer, optional fraction, optional exponent
Expr Digits(GrammarBuilder& b);   // [0-9]+
Expr AnyValue(GrammarBuilder& b, const SchemaOptions& o);
Expr AnyObject(GrammarBuilder& b, const SchemaOptions& o);
// "{" ( "key": value ( , "key": value )* )? "}" with arbitrary string keys.
Expr ObjectOf(GrammarBuilder& b, const SchemaOptions& o, Expr value);
// "[" ( item ( , item ){min-1, max-1} )? "]" (max = -1: unbounded).
Expr ArrayOf(GrammarBuilder& b, const SchemaOptions& o, Expr item, int min, int max);

}  // namespace epserve::grammar::json
