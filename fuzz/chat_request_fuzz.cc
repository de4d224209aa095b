// Fuzzes what /v1/chat/completions does with a request body before the engine sees it, on the
// server's own path: the nesting bound (base/json.h, 64 levels as HttpServerOptions), the JSON
// parse, the request parser (messages, content parts), and rendering the request-controlled
// messages through DeepSeek-V3's chat template. A body nested 20,000 deep used to overflow the
// stack in the template's value conversion; any crash, hang or sanitizer report here is a
// finding. Template errors are fine (they are 400s).
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "base/json.h"
#include "fuzz/fuzz_util.h"
#include "serve/openai_request.h"
#include "text/chat_template.h"
#include "text/deepseek_v3_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace serve = epserve::serve;
  static const epserve::text::ChatTemplate* const kTemplate = [] {
    auto t = epserve::text::ChatTemplate::Parse(epserve::text::DeepSeekV3ChatTemplate(),
                                                "deepseek-v3 chat_template");
    return t.ok() ? new epserve::text::ChatTemplate(*t) : nullptr;
  }();
  const std::string_view text = epserve::fuzz::AsText(data, size);
  if (epserve::JsonNestingDepth(text, 64) > 64) return 0;  // the server's 400 json_too_deep
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, false);
  if (body.is_discarded()) return 0;
  auto parsed = serve::ParseCompletionRequest(body, serve::Endpoint::kChat);
  if (std::get_if<serve::ApiError>(&parsed) != nullptr || kTemplate == nullptr) return 0;
  const auto& params = std::get<serve::CompletionParams>(parsed);
  nlohmann::ordered_json context = {{"messages", params.messages},
                                    {"add_generation_prompt", true},
                                    {"bos_token", "<｜begin▁of▁sentence｜>"},
                                    {"eos_token", "<｜end▁of▁sentence｜>"},
                                    {"tools", nullptr},
                                    {"strftime_now_epoch", 0}};
  (void)kTemplate->Render(context);
  return 0;
}
