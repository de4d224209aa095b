// Unit tests of the parts of src/serve that need no model: request parsing and its errors,
// stop strings over incremental decoding, logprobs' JSON, the API key comparison and the metrics
// text.
#include <gtest/gtest.h>

#include "serve/http_server.h"
#include "serve/openai_request.h"
#include "serve/output_text.h"
#include "serve/serve_metrics.h"

namespace epserve::serve {
namespace {

using Json = nlohmann::ordered_json;

std::unique_ptr<text::Tokenizer> WordTokenizer() {
  nlohmann::json tok = {{"added_tokens", nlohmann::json::array()},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", nullptr},
                        {"post_processor", nullptr},
                        {"decoder", {{"type", "Fuse"}}},
                        {"model",
                         {{"type", "BPE"},
                          {"vocab", {{"he", 0}, {"llo", 1}, {" wor", 2}, {"ld", 3}, {"!", 4}}},
                          {"merges", nlohmann::json::array()}}}};
  auto t = text::Tokenizer::FromJson(tok, nullptr);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(*t);
}

std::string Generate(const text::Tokenizer& tok, std::vector<std::string> stop,
                     const std::vector<int32_t>& ids, bool* stopped) {
  OutputText out(tok, std::move(stop));
  std::string text;
  for (int32_t id : ids) text += out.Add(id);
  text += out.Finish();
  *stopped = out.stopped();
  return text;
}

TEST(OutputText, StopStringsCutTheTextBeforeTheFirstMatch) {
  auto tok = WordTokenizer();
  bool stopped = false;
  EXPECT_EQ(Generate(*tok, {}, {0, 1, 2, 3, 4}, &stopped), "hello world!");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(Generate(*tok, {"lo w"}, {0, 1, 2, 3, 4}, &stopped), "hel");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(Generate(*tok, {"zz", "d!"}, {0, 1, 2, 3, 4}, &stopped), "hello worl");
  EXPECT_TRUE(stopped);
  // A stop string that never completes: the held-back prefix comes out at the end.
  EXPECT_EQ(Generate(*tok, {"ld?"}, {0, 1, 2, 3}, &stopped), "hello world");
  EXPECT_FALSE(stopped);
}

TEST(OutputText, HoldsBackOnlyAPossibleStopPrefix) {
  auto tok = WordTokenizer();
  OutputText out(*tok, {"llo!"});
  EXPECT_EQ(out.Add(0), "he");
  EXPECT_EQ(out.Add(1), "");  // "llo" may begin "llo!"
  EXPECT_EQ(out.Add(2), "llo wor");
}

// A whole answer's logprobs, written as the tokens arrive, are the streamed chunks' JSON to the
// byte: keys in nlohmann::json's order, the same numbers, escapes and offsets; completions'
// top texts that repeat (two ids, or an id given twice) are one key.
TEST(LogprobsText, IsLogprobsJsonDumped) {
  auto tok = WordTokenizer();
  std::vector<TokenEvent> events(4);
  events[0] = {.token = 0, .logprob = -0.125f, .top_logprobs = {{0, -0.125f}, {1, -2.5f}}};
  events[1] = {.token = 2, .logprob = -1e-7f, .top_logprobs = {{3, -3.1f}, {3, -4.2f}}};
  events[2] = {.token = 99, .logprob = -17.333f};  // outside the vocabulary: no text
  events[3] = {.token = 4, .logprob = -0.6931472f, .top_logprobs = {{4, -0.6931472f}}};
  for (Endpoint e : {Endpoint::kChat, Endpoint::kCompletions}) {
    std::vector<const TokenEvent*> all;
    LogprobsText text(*tok, e);
    std::string out = "x";
    text.AppendTo(&out);  // none yet
    EXPECT_EQ(out, "x" + LogprobsJson(*tok, e, all, 0).dump());
    for (const TokenEvent& ev : events) {
      all.push_back(&ev);
      text.Add(ev);
    }
    const std::string want = LogprobsJson(*tok, e, all, 0).dump();
    EXPECT_EQ(text.size(), want.size());
    out.clear();
    text.AppendTo(&out);
    EXPECT_EQ(out, want);
    EXPECT_EQ(text.size(), LogprobsJson(*tok, e, {}, 0).dump().size());  // emptied
  }
  EXPECT_EQ(
      LogprobsJson(*tok, Endpoint::kCompletions, {&events[0], &events[1]}, 5).dump(),
      R"({"text_offset":[5,7],"token_logprobs":[-0.125,-1.0000000116860974e-07],)"
      R"("tokens":["he"," wor"],"top_logprobs":[{"he":-0.125,"llo":-2.5},{"ld":-4.199999809265137}]})");
}

// n x max_tokens x (1 + top logprobs) <= the bound; 0 is none.
TEST(CheckOutputUnits, BoundsTheAnswer) {
  CompletionParams p;
  p.n = 4;
  p.max_tokens = 1000;
  p.logprobs = 20;
  EXPECT_EQ(OutputUnits(p), 84000);
  EXPECT_FALSE(CheckOutputUnits(p, 84000));
  EXPECT_FALSE(CheckOutputUnits(p, 0));
  auto e = CheckOutputUnits(p, 83999);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->http_status, 400);
  EXPECT_EQ(e->param, "max_tokens");
  EXPECT_NE(e->message.find("--max-output-units"), std::string::npos) << e->message;
  p.logprobs = -1;  // none: one unit a token
  EXPECT_EQ(OutputUnits(p), 4000);
  // The default lets today's clients through: 32k tokens with 20 top logprobs, n 16 x 4000 x 20.
  CompletionParams big{.endpoint = Endpoint::kChat, .max_tokens = 32768, .logprobs = 20};
  EXPECT_FALSE(CheckOutputUnits(big, kDefaultMaxOutputUnits));
  big.n = 16;
  big.max_tokens = 4000;
  EXPECT_FALSE(CheckOutputUnits(big, kDefaultMaxOutputUnits));
}

ApiError ErrorOf(const std::string& body, Endpoint e = Endpoint::kCompletions) {
  auto r = ParseCompletionRequest(Json::parse(body), e);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ParseCompletionRequest, Errors) {
  EXPECT_EQ(ErrorOf(R"({"max_tokens": 3})").param, "prompt");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x"})", Endpoint::kChat).param, "messages");
  EXPECT_EQ(ErrorOf(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_tokens": 1.5})").param, "max_tokens");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "temperature": -0.1})").param, "temperature");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "top_p": 0})").param, "top_p");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "n": 17})").param, "n");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "stop": [1]})").param, "stop");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "stream": "yes"})").param, "stream");
  EXPECT_EQ(ErrorOf(R"({"messages": [{"content": "x"}]})", Endpoint::kChat).param, "messages[0]");
  EXPECT_EQ(ErrorOf(R"([1])").http_status, 400);
  const Json body = ErrorOf(R"({"prompt": "x", "n": 0})").Body();
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(body["error"]["code"].is_null());
}

TEST(ParseCompletionRequest, FieldsItDoesNotHonourAreNamed) {
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "best_of": 2})").param, "best_of");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "echo": true})").param, "echo");
  const ApiError f = ErrorOf(R"({"messages": [{"role": "user", "content": "x"}],
                                 "functions": [{"name": "f"}]})",
                             Endpoint::kChat);
  EXPECT_EQ(f.param, "functions");
  EXPECT_NE(f.message.find("use 'tools'"), std::string::npos);
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "tools": []})").param, "tools");  // chat only
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "stream_options": {"foo": 1}})").param, "stream_options");
  // Absent-as-null is absent.
  auto ok = ParseCompletionRequest(Json::parse(R"({"prompt": "x", "suffix": null})"),
                                   Endpoint::kCompletions);
  EXPECT_TRUE(std::holds_alternative<CompletionParams>(ok));
}

TEST(ParseCompletionRequest, SamplingParameters) {
  auto r =
      ParseCompletionRequest(Json::parse(R"({"prompt": "x", "max_tokens": 9, "n": 4, "min_p": 0.1,
                      "presence_penalty": 0.5, "frequency_penalty": -1, "repetition_penalty": 1.2,
                      "logit_bias": {"17": -100, "3": 2.5}, "min_tokens": 2,
                      "stream_options": {"continuous_usage_stats": true}})"),
                             Endpoint::kCompletions);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  const CompletionParams& p = std::get<CompletionParams>(r);
  EXPECT_EQ(p.n, 4);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_FLOAT_EQ(p.adjust.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.adjust.frequency_penalty, -1.0f);
  EXPECT_FLOAT_EQ(p.adjust.repetition_penalty, 1.2f);
  EXPECT_EQ(p.adjust.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{17, -100.0f}, {3, 2.5f}}));
  EXPECT_EQ(p.adjust.min_tokens, 2);
  EXPECT_TRUE(p.continuous_usage);
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "presence_penalty": 3})").param, "presence_penalty");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "repetition_penalty": 0})").param, "repetition_penalty");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "logit_bias": {"a": 1}})").param, "logit_bias");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "logit_bias": {"1": 101}})").param, "logit_bias");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "max_tokens": 3, "min_tokens": 4})").param, "min_tokens");
  EXPECT_EQ(ErrorOf(R"({"prompt": "x", "min_p": 1.5})").param, "min_p");
}

TEST(ParseCompletionRequest, ToolsToolChoiceAndResponseFormat) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "get_weather",
          "parameters": {"type": "object"}}}])";
  auto chat = [&](const std::string& more) {
    return R"({"messages": [{"role": "user", "content": "x"}], )" + more + "}";
  };
  auto r = ParseCompletionRequest(Json::parse(chat(tools + R"(, "tool_choice": {"type": "function",
                       "function": {"name": "get_weather"}}, "parallel_tool_calls": false)")),
                                  Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  const CompletionParams& p = std::get<CompletionParams>(r);
  EXPECT_EQ(p.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(p.tool_name, "get_weather");
  EXPECT_FALSE(p.parallel_tool_calls);
  EXPECT_EQ(p.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(p.max_tokens, kDefaultChatMaxTokens);  // chat without max_tokens
  EXPECT_FALSE(p.max_tokens_set);
  // Without tools the default choice is none; a forced choice needs tools.
  auto plain = ParseCompletionRequest(Json::parse(chat(R"("n": 1)")), Endpoint::kChat);
  EXPECT_EQ(std::get<CompletionParams>(plain).tool_choice, ToolChoice::kNone);
  EXPECT_EQ(ErrorOf(chat(R"("tool_choice": "required")"), Endpoint::kChat).param, "tool_choice");
  EXPECT_EQ(ErrorOf(chat(tools + R"(, "tool_choice": {"type": "function",
                                     "function": {"name": "nope"}})"),
                    Endpoint::kChat)
                .param,
            "tool_choice");
  EXPECT_EQ(ErrorOf(chat(R"("tools": [{"type": "function", "function": {"name": "a b"}}])"),
                    Endpoint::kChat)
                .param,
            "tools");
  EXPECT_EQ(ErrorOf(chat(R"("tools": [{"type": "code"}])"), Endpoint::kChat).param, "tools");
  // response_format.
  auto js = ParseCompletionRequest(
      Json::parse(chat(R"("response_format": {"type": "json_schema", "json_schema":
                          {"name": "p", "schema": {"type": "object"}, "strict": true}})")),
      Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(js));
  EXPECT_EQ(std::get<CompletionParams>(js).response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(ErrorOf(chat(R"("response_format": {"type": "yaml"})"), Endpoint::kChat).param,
            "response_format");
  EXPECT_EQ(ErrorOf(chat(R"("response_format": {"type": "json_schema"})"), Endpoint::kChat).param,
            "response_format");
  // chat_template_kwargs and continue_final_message.
  EXPECT_EQ(ErrorOf(chat(R"("chat_template_kwargs": {"messages": []})"), Endpoint::kChat).param,
            "chat_template_kwargs");
  EXPECT_EQ(ErrorOf(chat(R"("continue_final_message": true)"), Endpoint::kChat).param,
            "continue_final_message");  // the last message is the user's
}

// The checkpoint's generation_config.json values (SamplingDefaults) fill what a request leaves
// unset (or null); what a request sets always wins.
TEST(ParseCompletionRequest, SamplingDefaultsFillOnlyWhatIsUnset) {
  const SamplingDefaults v3{.temperature = 0.6f, .top_p = 0.95f, .top_k = 20};
  auto parse = [&](const char* body, Endpoint e = Endpoint::kCompletions) {
    auto r = ParseCompletionRequest(Json::parse(body), e, v3);
    EXPECT_TRUE(std::holds_alternative<CompletionParams>(r)) << body;
    return std::get<CompletionParams>(r);
  };
  CompletionParams p = parse(R"({"prompt": "x"})");
  EXPECT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_p, 0.95f);
  EXPECT_EQ(p.top_k, 20);
  p = parse(R"({"messages": [{"role": "user", "content": "hi"}], "temperature": null})",
            Endpoint::kChat);
  EXPECT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_p, 0.95f);
  p = parse(R"({"prompt": "x", "temperature": 1.0, "top_p": 1, "top_k": -1})");
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  p = parse(R"({"prompt": "x", "temperature": 0})");
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.95f);
  // Without defaults, OpenAI's.
  auto plain = ParseCompletionRequest(Json::parse(R"({"prompt": "x"})"), Endpoint::kCompletions);
  EXPECT_EQ(std::get<CompletionParams>(plain).temperature, 1.0f);
  EXPECT_EQ(std::get<CompletionParams>(plain).top_p, 1.0f);
  EXPECT_EQ(std::get<CompletionParams>(plain).top_k, 0);
}

TEST(ParseCompletionRequest, Values) {
  auto r = ParseCompletionRequest(
      Json::parse(R"({"model": "m", "prompt": [3, 4], "max_tokens": 7, "temperature": 0,
                      "top_k": -1, "seed": 9, "stop": "x", "logprobs": 2, "stream": true,
                      "stream_options": {"include_usage": true}, "ignore_eos": true})"),
      Endpoint::kCompletions);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(r));
  const CompletionParams& p = std::get<CompletionParams>(r);
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(p.prompt_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(*p.seed, 9u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"x"}));
  EXPECT_EQ(p.logprobs, 2);
  EXPECT_TRUE(p.stream && p.include_usage && p.ignore_eos);
  auto chat = ParseCompletionRequest(
      Json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
                      "top_logprobs": 3, "max_completion_tokens": 5})"),
      Endpoint::kChat);
  ASSERT_TRUE(std::holds_alternative<CompletionParams>(chat));
  EXPECT_EQ(std::get<CompletionParams>(chat).logprobs, 3);
  EXPECT_EQ(std::get<CompletionParams>(chat).max_tokens, 5);
}

// return_token_strs is a boolean whichever shape the request has (with messages it was not
// checked, and serving it threw: a 500).
TEST(ParseTokenizeRequest, ReturnTokenStrs) {
  for (const char* shape :
       {R"("prompt": "hi")", R"("messages": [{"role": "user", "content": "hi"}])"}) {
    for (const char* bad : {R"("yes")", "1", "[]"}) {
      auto r = ParseTokenizeRequest(
          Json::parse(std::string("{") + shape + R"(, "return_token_strs": )" + bad + "}"));
      ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << shape << " " << bad;
      EXPECT_EQ(std::get<ApiError>(r).param, "return_token_strs");
    }
    auto r = ParseTokenizeRequest(
        Json::parse(std::string("{") + shape + R"(, "return_token_strs": true})"));
    ASSERT_TRUE(std::holds_alternative<CompletionParams>(r)) << shape;
    EXPECT_TRUE(std::get<CompletionParams>(r).return_token_strs);
    r = ParseTokenizeRequest(
        Json::parse(std::string("{") + shape + R"(, "return_token_strs": null})"));
    ASSERT_TRUE(std::holds_alternative<CompletionParams>(r)) << shape;
    EXPECT_FALSE(std::get<CompletionParams>(r).return_token_strs);
  }
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("key", "key"));
  EXPECT_FALSE(ConstantTimeEquals("key", "kez"));
  EXPECT_FALSE(ConstantTimeEquals("key", "key2"));
  EXPECT_FALSE(ConstantTimeEquals("", "k"));
}

TEST(ServeMetrics, NamesEveryMetricPerGroup) {
  ServeMetrics sm("tiny");
  sm.ObserveTimeToFirstToken(0.003);
  sm.CountRequest("ok");
  RouterMetrics r;
  r.groups.resize(2);
  r.groups[0].up = true;
  r.groups[0].load.num_running = 2;
  r.groups[1].load.generation_tokens = 17;
  r.groups[1].finished["length"] = 3;
  r.groups[1].load.prefix_cache_queries = 8;
  r.groups[1].load.prefix_cache_hits = 2;
  r.decisions["cache_hit"] = 5;
  r.retries = 1;
  sm.SetHttpConnections(3, 272);
  const std::string t = sm.Render(r);
  EXPECT_NE(t.find("epserve:http_connections{model_name=\"tiny\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("epserve:http_connections_bound{model_name=\"tiny\"} 272\n"), std::string::npos);
  EXPECT_NE(t.find("epserve:num_requests_running{model_name=\"tiny\",group=\"0\"} 2\n"),
            std::string::npos);
  EXPECT_NE(t.find("epserve:generation_tokens_total{model_name=\"tiny\",group=\"1\"} 17\n"),
            std::string::npos);
  EXPECT_NE(t.find("group=\"1\",finished_reason=\"length\"} 3\n"), std::string::npos);
  EXPECT_NE(t.find("epserve:prefix_cache_hit_rate{model_name=\"tiny\",group=\"1\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(t.find("epserve:router_decisions_total{model_name=\"tiny\",reason=\"cache_hit\"} 5"),
            std::string::npos);
  EXPECT_NE(t.find("epserve:groups_up{model_name=\"tiny\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("epserve:router_retries_total{model_name=\"tiny\"} 1\n"), std::string::npos);
  EXPECT_NE(
      t.find("epserve:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.005\"} 1"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("epserve:http_requests_total{model_name=\"tiny\",status=\"ok\"} 1"),
            std::string::npos);
  for (const char* name : {"num_requests_waiting", "kv_cache_usage_perc", "prompt_tokens_total",
                           "prefix_cache_hits_total", "prefix_cache_queries_total", "group_up",
                           "inter_token_latency_seconds", "e2e_request_latency_seconds"})
    EXPECT_NE(t.find(std::string("epserve:") + name), std::string::npos) << name;
}

}  // namespace
}  // namespace epserve::serve
