// Fuzzes the OpenAI request-body parser of the HTTP server (serve/openai_request.h) the way
// http_server.cc calls it: parse the body as JSON (a bad body is answered 400), then validate it
// as a /v1/completions and as a /v1/chat/completions request. Every error must render as the
// JSON body the server sends.
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "fuzz/fuzz_util.h"
#include "serve/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace serve = epserve::serve;
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(
      epserve::fuzz::AsText(data, size), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  for (serve::Endpoint endpoint : {serve::Endpoint::kCompletions, serve::Endpoint::kChat}) {
    auto parsed = serve::ParseCompletionRequest(body, endpoint);
    if (const auto* error = std::get_if<serve::ApiError>(&parsed)) {
      (void)error->Body().dump();
    } else {
      (void)std::get<serve::CompletionParams>(parsed).messages.dump();
    }
  }
  return 0;
}
