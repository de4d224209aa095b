// Structured outputs in the engine: the ConstraintFactory that turns a request's constraint
// spec (EngineRequest::constraint) into a grammar Matcher over the model's vocabulary
// (grammar/grammar.h), applied to each logits row before the draw.
//
// Spec: a JSON object, written by serve/chat_prompt.cc:
//   {"type": "json_object"}                         any JSON object
//   {"type": "json_schema", "schema": {...}}        JSON matching the schema
//   {"type": "tool_calls", "format": "deepseek_v3" | "deepseek_v31" | "deepseek_v32",
//    "tools": [{"name": "...", "parameters": {...}}, ...], "parallel": bool}
//                                                   a tool-call block in the model's format:
//                                                   one call (or several when parallel), each
//                                                   naming one of the tools with arguments
//                                                   matching its parameters
//                                                   (grammar/tool_calls.h)
//   {"type": "script", "tokens": [ids]}            exactly these ids, then a stop id (tests:
//                                                   serve --scripted-outputs)
//   optional "after_token": id                      unconstrained until this token was drawn
//                                                   (</think>: reasoning comes first)
// Near the end of the request's max_tokens the matcher closes the structure by the shortest
// path (Matcher::FillClosingMask) so the output is complete JSON rather than cut mid-way.
// Thread safety: the factory may be called from any thread; each constraint is one request's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/logits_processor.h"
#include "text/tokenizer.h"

namespace epserve {

// `stop_ids` end a complete output (the model's EOS).
// The vocabulary's trie is built on the first constrained request (logged with its time). Ids
// of the model's logits rows that the tokenizer lacks are never allowed.
ConstraintFactory GrammarConstraintFactory(std::shared_ptr<const text::Tokenizer> tokenizer,
                                           std::vector<int32_t> stop_ids);
// The same with the tokenizer of a model folder, loaded on the first constrained request.
ConstraintFactory GrammarConstraintFactory(std::string model_dir, std::vector<int32_t> stop_ids);

// Budget (tokens left) below which, with the structure's shortest completion added, the
// constraint closes it: a free token can open nested structure worth this many bytes at most
// before the closing starts.
constexpr int kClosingSlack = 128;

}  // namespace epserve
