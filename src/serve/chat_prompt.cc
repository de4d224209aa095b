#include "serve/chat_prompt.h"

#include <chrono>
#include <cstdio>
#include <optional>

#include "grammar/grammar.h"
#include "runtime/compile_slots.h"
#include "serve/dsv32_prompt.h"
#include "serve/dsv4_prompt.h"

namespace epserve::serve {

namespace {

using Json = nlohmann::ordered_json;

bool ThinkingAsked(const CompletionParams& p) {
  return ThinkingRequested(p.template_kwargs, p.reasoning_effort);
}

// The id of a token that is one added token, else -1.
int32_t SingleToken(const text::Tokenizer& tok, const char* text) { return tok.TokenToId(text); }

}  // namespace

std::variant<std::vector<int32_t>, ApiError> BuildPrompt(const ServeContext& ctx,
                                                         const CompletionParams& p) {
  const text::Tokenizer& tok = *ctx.tokenizer;
  if (p.endpoint != Endpoint::kChat) {
    if (!p.prompt_text) return p.prompt_ids;
    StatusOr<std::vector<int32_t>> ids =
        tok.Encode(*p.prompt_text, {.add_special_tokens = p.add_special_tokens});
    if (!ids.ok()) return ApiError{.message = ids.status().message(), .param = "prompt"};
    return std::move(*ids);
  }
  // DeepSeek-V3.2 ships no chat template (encoding/encoding_dsv32.py instead): with its tool
  // format and no template, the prompt is rendered by dsv32_prompt.h (thinking as V3.1's
  // template takes it: chat_template_kwargs {"thinking": true}).
  // DeepSeek-V4 likewise (encoding/encoding_dsv4.py: dsv4_prompt.h).
  const bool builtin_v32 =
      ctx.chat_template == nullptr && ctx.tool_format == ToolCallFormat::kDeepSeekV32;
  const bool builtin_v4 =
      ctx.chat_template == nullptr && ctx.tool_format == ToolCallFormat::kDeepSeekV4;
  if (ctx.chat_template == nullptr && !builtin_v32 && !builtin_v4)
    return ApiError{.message = "the model has no chat template", .param = "messages"};
  StatusOr<std::string> rendered = Status::Internal("not rendered");
  if (builtin_v32 || builtin_v4) {
    if (builtin_v32)
      rendered = RenderDeepSeekV32Prompt(
          p.messages, p.tools,
          ThinkingAsked(p) ? DeepSeekV32Mode::kThinking : DeepSeekV32Mode::kChat);
    else
      rendered = RenderDeepSeekV4Prompt(
          p.messages, p.tools,
          p.response_format == ResponseFormat::kJsonSchema ? p.json_schema : Json(),
          DeepSeekV4OptionsFor(p.template_kwargs, p.reasoning_effort));
    if (!rendered.ok())
      return ApiError{.message = rendered.status().message(), .param = "messages"};
  } else {
    Json context = p.template_kwargs;  // the request's own variables first; ours win
    // reasoning_effort asks for thinking where the request does not say (ThinkingRequested),
    // and templates that know the effort read it.
    if (!p.reasoning_effort.empty()) {
      if (!context.contains("thinking")) context["thinking"] = ThinkingAsked(p);
      if (!context.contains("reasoning_effort")) context["reasoning_effort"] = p.reasoning_effort;
    }
    context["messages"] = p.messages;
    context["add_generation_prompt"] = p.add_generation_prompt;
    context["bos_token"] = tok.bos_token();
    context["eos_token"] = tok.eos_token();
    context["tools"] = p.tools;  // as the client sent them (null: none), as transformers passes
    rendered = ctx.chat_template->Render(context);
  }
  if (!rendered.ok()) {
    // The template's errors begin with where it lives on this server
    // ("/srv/m/tokenizer_config.json: chat_template:3:204: ..."): the log gets the whole
    // message, the client the part after the path.
    const std::string& full = rendered.status().message();
    std::fprintf(stderr, "epserve: chat template error: %s\n", full.c_str());
    const size_t at = full.find("chat_template");
    return ApiError{
        .message = at == std::string::npos ? "the chat template failed" : full.substr(at),
        .param = "messages"};
  }
  std::string text = std::move(*rendered);
  if (p.continue_final_message) {
    // As transformers does: cut the rendering right after the final message's content, so
    // whatever the template closes a turn with (<｜end▁of▁sentence｜>) is not there.
    const std::string last = p.messages.back()["content"].get<std::string>();
    const size_t at = last.empty() ? std::string::npos : text.rfind(last);
    if (at == std::string::npos)
      return ApiError{.message =
                          "continue_final_message: the chat template does not render the "
                          "final message's content verbatim",
                      .param = "continue_final_message"};
    text.resize(at + last.size());
  }
  StatusOr<std::vector<int32_t>> ids = tok.Encode(text);  // the template emits BOS
  if (!ids.ok()) return ApiError{.message = ids.status().message(), .param = "messages"};
  return std::move(*ids);
}

ChatOutputOptions OutputOptions(const ServeContext& ctx, const CompletionParams& p) {
  ChatOutputOptions o;
  o.stop = p.stop;
  if (!p.tools.is_null() && p.tool_choice != ToolChoice::kNone) o.tools = ctx.tool_format;
  switch (ctx.reasoning) {
    case ServeContext::Reasoning::kNone:
      break;
    case ServeContext::Reasoning::kDeepSeekR1:  // the template opens <think> in the prompt
      o.reasoning = ReasoningMode::kStartsInReasoning;
      break;
    case ServeContext::Reasoning::kDeepSeekV3:  // V3.1: thinks only when asked
      o.reasoning = ThinkingAsked(p) ? ReasoningMode::kStartsInReasoning : ReasoningMode::kNone;
      break;
  }
  if (p.continue_final_message) o.reasoning = ReasoningMode::kNone;
  return o;
}

namespace {

// How long a request waits for one of the process's compile slots (runtime/compile_slots.h).
constexpr std::chrono::seconds kCompileSlotWait{30};

// Compiles `schema` in one of the process's compile slots (a cache hit costs nothing more);
// an error is the request's 400 (code grammar_too_complex past the grammar's bounds), no slot
// in time its 503.
std::optional<ApiError> CheckSchema(const Json& schema, const std::string& field,
                                    const std::string& param) {
  StatusOr<std::shared_ptr<const grammar::Grammar>> g = Status::Internal("not compiled");
  const Status slot = CompileSlots::Process().Run([&] { g = grammar::CompileJsonSchema(schema); },
                                                  kCompileSlotWait);
  if (!slot.ok())
    return ApiError{.http_status = 503,
                    .message = "structured output: " + slot.message(),
                    .type = "server_error"};
  if (g.ok()) return std::nullopt;
  return ApiError{.message = field + ": " + g.status().message(),
                  .param = param,
                  .code = grammar::IsTooComplex(g.status()) ? "grammar_too_complex" : ""};
}

}  // namespace

std::variant<Constraint, ApiError> MakeConstraint(const ServeContext& ctx,
                                                  const CompletionParams& p) {
  Constraint c;
  if (p.endpoint != Endpoint::kChat) return c;
  const text::Tokenizer& tok = *ctx.tokenizer;
  const Json& last = p.messages.back();
  if (!ctx.scripted_outputs.empty() && last.contains("content") && last["content"].is_string()) {
    const std::string said = last["content"].get<std::string>();
    for (const ServeContext::ScriptedOutput& script : ctx.scripted_outputs) {
      if (said.find(script.when) == std::string::npos) continue;
      StatusOr<std::vector<int32_t>> ids = tok.Encode(script.output);
      if (!ids.ok()) return ApiError{.message = ids.status().message(), .param = "messages"};
      c.spec = Json{{"type", "script"}, {"tokens", *ids}}.dump();
      return c;
    }
  }
  const char* kCallsBegin = "<｜tool▁calls▁begin｜>";
  const char* kCallBegin = "<｜tool▁call▁begin｜>";
  if (p.tool_choice == ToolChoice::kNone || p.tools.is_null()) {
    // V3.2's DSML markers are text: only a tokenizer with ｜DSML｜ as one token can ban them.
    for (const char* t : {kCallsBegin, kCallBegin, "｜DSML｜"})
      if (int32_t id = SingleToken(tok, t); id >= 0) c.banned.push_back(id);
  }
  Json spec;
  if (p.response_format == ResponseFormat::kJsonObject) {
    spec = {{"type", "json_object"}};
  } else if (p.response_format == ResponseFormat::kJsonSchema) {
    if (auto e =
            CheckSchema(p.json_schema, "response_format.json_schema.schema", "response_format"))
      return *e;
    spec = {{"type", "json_schema"}, {"schema", p.json_schema}};
  } else if (p.tool_choice == ToolChoice::kRequired || p.tool_choice == ToolChoice::kNamed) {
    if (ctx.tool_format == ToolCallFormat::kNone)
      return ApiError{.message =
                          "tool_choice: the server does not know how this model writes "
                          "tool calls (start it with --tool-call-format)",
                      .param = "tool_choice"};
    Json tools = Json::array();
    for (size_t i = 0; i < p.tools.size(); ++i) {
      const Json& f = p.tools[i]["function"];
      const std::string name = f["name"].get<std::string>();
      if (p.tool_choice == ToolChoice::kNamed && name != p.tool_name) continue;
      Json params = f.contains("parameters") && f["parameters"].is_object()
                        ? f["parameters"]
                        : Json{{"type", "object"}};
      if (auto e =
              CheckSchema(params, "tools[" + std::to_string(i) + "].function.parameters", "tools"))
        return *e;
      tools.push_back({{"name", name}, {"parameters", params}});
    }
    spec = {{"type", "tool_calls"},
            {"format", std::string(ToolCallFormatName(ctx.tool_format))},
            {"tools", tools},
            {"parallel", p.parallel_tool_calls && p.tool_choice == ToolChoice::kRequired}};
  } else {
    return c;
  }
  // While the model reasons, the constraint waits for the end of the reasoning.
  if (OutputOptions(ctx, p).reasoning == ReasoningMode::kStartsInReasoning) {
    const int32_t end = SingleToken(tok, "</think>");
    if (end < 0)
      return ApiError{.message =
                          "structured output after reasoning needs </think> to be one "
                          "token of the tokenizer",
                      .param = "response_format"};
    spec["after_token"] = end;
  }
  c.spec = spec.dump();
  return c;
}

}  // namespace epserve::serve
