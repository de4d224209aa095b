// The grammar of a forced tool-call block (tool_choice "required" or a named function) in each
// DeepSeek chat format, from runtime/grammar_constraint.h's spec:
//   {"type": "tool_calls", "format": "deepseek_v3" | "deepseek_v31" | "deepseek_v32" |
//    "deepseek_v4",
//    "tools": [{"name": "...", "parameters": {...}}, ...], "parallel": bool}
// One call (or, when parallel, one or more), each naming one of the tools with arguments that
// satisfy its parameters schema:
//   deepseek_v3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n
//                 ARGS\n```<｜tool▁call▁end｜> (joined by "\n") <｜tool▁calls▁end｜>
//   deepseek_v31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
//                 <｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
//   deepseek_v32  DSML text, as encoding_dsv32.py writes it (no special tokens):
//                 <｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//                 <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
//                 (parameters joined by "\n")\n</｜DSML｜invoke> (invokes joined by "\n")
//                 \n</｜DSML｜function_calls>
//   deepseek_v4   the same, the block named <｜DSML｜tool_calls> (encoding_dsv4.py)
// DSML writes one parameter per property of the tool's object schema, in the schema's order,
// the required ones always and the others optionally. A property whose schema is just
// {"type": "string"} (annotations aside) is raw text (string="true": any UTF-8 text without
// "</｜DSML｜parameter>"); every other one is JSON matching its schema (string="false"), so an
// enum, pattern or length bound on a string holds too. A tool whose parameters are not such an
// object schema (anyOf at the top, say) is refused, naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace epserve::grammar {

// The special tokens of the V3/V3.1 formats (-1: the tokenizer lacks it; DSML needs none).
struct ToolCallTokens {
  int32_t calls_begin = -1, calls_end = -1, call_begin = -1, call_end = -1, sep = -1;
};

StatusOr<std::shared_ptr<const Grammar>> CompileToolCalls(const nlohmann::ordered_json& spec,
                                                          const ToolCallTokens& tokens);

}  // namespace epserve::grammar
