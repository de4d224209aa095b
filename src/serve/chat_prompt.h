// What a chat request turns into before it reaches the engines: the prompt (messages and tools
// through the model's chat template, with chat_template_kwargs; continue_final_message leaves
// the last assistant turn open), how its output is read (ChatOutputOptions: tool-call format,
// reasoning mode, stop strings), and the token constraint its response_format or tool_choice
// asks for (the spec runtime/grammar_constraint.h reads; schemas are compiled here first so a
// bad one is a 400 naming the keyword before anything is queued).
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "serve/chat_output.h"
#include "serve/completion_session.h"
#include "serve/openai_request.h"

namespace epserve::serve {

// The prompt's token ids (chat: rendered; completions: encoded or given).
std::variant<std::vector<int32_t>, ApiError> BuildPrompt(const ServeContext& ctx,
                                                         const CompletionParams& p);
ChatOutputOptions OutputOptions(const ServeContext& ctx, const CompletionParams& p);
// The constraint spec ("" when none) and the tokens banned outright (tool_choice "none": the
// tool-call tokens).
struct Constraint {
  std::string spec;
  std::vector<int32_t> banned;
};
std::variant<Constraint, ApiError> MakeConstraint(const ServeContext& ctx,
                                                  const CompletionParams& p);

}  // namespace epserve::serve
