#include "runtime/grammar_constraint.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/tool_calls.h"

namespace epserve {

namespace {

using Json = nlohmann::ordered_json;  // properties keep the schema's order

// One request's matcher. After each accepted token the next step's mask is computed on
// another thread while the model runs that step (the engine's Execute phase); Restrict waits
// for it. The mask's kind (free or closing) is decided from the budget the step will have; a
// Restrict whose budget calls for the other kind recomputes it.
class GrammarConstraint : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const grammar::Grammar> g,
                    std::shared_ptr<const grammar::TokenVocab> v, int32_t after_token)
      : matcher_(std::move(g), v), vocab_(std::move(v)), after_(after_token) {
    words_.resize((vocab_->size() + 63) / 64);
  }
  ~GrammarConstraint() override {
    if (next_.valid()) next_.wait();
  }

  void Restrict(float* l, int vocab, int remaining) override {
    if (after_ >= 0) return;                                          // still reasoning
    const int computed = next_.valid() ? (next_.get() ? 1 : 0) : -1;  // the matcher is ours now
    // Once closing, always closing: a closing token may shorten the distance by several bytes,
    // and a free token after it could open the structure again.
    closing_ = closing_ || remaining <= matcher_.MinBytesToComplete() + kClosingSlack;
    if (computed != (closing_ ? 1 : 0)) Fill(closing_);
    const int n = std::min(vocab, vocab_->size());
    for (int v = 0; v < n; ++v)
      if (!(words_[v >> 6] >> (v & 63) & 1)) l[v] = -std::numeric_limits<float>::infinity();
    for (int v = n; v < vocab; ++v) l[v] = -std::numeric_limits<float>::infinity();
    remaining_ = remaining;
  }

  Status Accept(int32_t token) override {
    if (next_.valid()) next_.wait();
    if (after_ >= 0) {
      if (token == after_) after_ = -1;
      return Status::Ok();
    }
    if (!matcher_.AcceptToken(token)) {
      if (matcher_.Overflowed())
        return Status::InvalidArgument(std::string(grammar::kTooComplexPrefix) +
                                       ": a parse state of the output passed " +
                                       std::to_string(grammar::kMaxClosure) + " stacks");
      return Status::Internal("the grammar refused token " + std::to_string(token) +
                              " its own mask allowed");
    }
    if (!matcher_.IsTerminated() && remaining_ > 1) {
      const bool closing =
          closing_ || remaining_ - 1 <= matcher_.MinBytesToComplete() + kClosingSlack;
      next_ = std::async(std::launch::async, [this, closing] {
        Fill(closing);
        return closing;
      });
    }
    return Status::Ok();
  }

  bool Complete() const override {
    if (next_.valid()) next_.wait();
    return after_ < 0 && matcher_.IsComplete();
  }

 private:
  void Fill(bool closing) {
    if (closing)
      matcher_.FillClosingMask(words_.data());
    else
      matcher_.FillMask(words_.data());
  }

  grammar::Matcher matcher_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  int32_t after_;
  std::vector<uint64_t> words_;
  int remaining_ = 0;       // the budget the last Restrict saw
  bool closing_ = false;    // closing the structure by its shortest path
  std::future<bool> next_;  // the next mask being computed (its kind: closing?)
};

// The tokens of a script, in order, then only the stop ids (serve --scripted-outputs: tests
// that need the real token stream of a tool call from a random-weight model).
class ScriptConstraint : public TokenConstraint {
 public:
  ScriptConstraint(std::vector<int32_t> tokens, std::vector<int32_t> stops)
      : tokens_(std::move(tokens)), stops_(std::move(stops)) {}
  void Restrict(float* l, int vocab, int) override {
    std::vector<int32_t> allowed =
        next_ < tokens_.size() ? std::vector<int32_t>{tokens_[next_]} : stops_;
    std::vector<float> keep;
    for (int32_t id : allowed) keep.push_back(id >= 0 && id < vocab ? l[id] : 0.0f);
    for (int v = 0; v < vocab; ++v) l[v] = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < allowed.size(); ++i)
      if (allowed[i] >= 0 && allowed[i] < vocab)
        l[allowed[i]] = std::isfinite(keep[i]) ? keep[i] : 0.0f;
  }
  Status Accept(int32_t) override {
    ++next_;
    return Status::Ok();
  }

 private:
  std::vector<int32_t> tokens_, stops_;
  size_t next_ = 0;
};

class Factory {
 public:
  Factory(std::shared_ptr<const text::Tokenizer> tok, std::vector<int32_t> stops)
      : tok_(std::move(tok)), stops_(std::move(stops)) {}
  Factory(std::string dir, std::vector<int32_t> stops)
      : dir_(std::move(dir)), stops_(std::move(stops)) {}

  StatusOr<std::unique_ptr<TokenConstraint>> Make(const std::string& spec_text) {
    const Json spec = Json::parse(spec_text, nullptr, /*allow_exceptions=*/false);
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
      return Status::InvalidArgument("constraint: not a JSON object with a string \"type\"");
    // Every walk below (dump, the schema compiler) recurses per level of the spec's JSON.
    RETURN_IF_ERROR(grammar::CheckSchemaNesting(spec).WithContext("constraint"));
    const std::string type = spec["type"].get<std::string>();
    if (type == "script") {
      std::vector<int32_t> tokens;
      for (const Json& t : spec.value("tokens", Json::array()))
        if (t.is_number_integer()) tokens.push_back(t.get<int32_t>());
      return std::unique_ptr<TokenConstraint>(new ScriptConstraint(tokens, stops_));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<const grammar::TokenVocab> vocab, Vocab());
    std::shared_ptr<const grammar::Grammar> g;
    if (type == "json_object") {
      g = grammar::AnyJsonObject();
    } else if (type == "json_schema") {
      ASSIGN_OR_RETURN(g, grammar::CompileJsonSchema(spec.value("schema", Json::object())));
    } else if (type == "tool_calls") {
      ASSIGN_OR_RETURN(g, ToolCalls(spec));
    } else {
      return Status::InvalidArgument("constraint: unknown type \"" + type + "\"");
    }
    const int32_t after = spec.contains("after_token") && spec["after_token"].is_number_integer()
                              ? spec["after_token"].get<int32_t>()
                              : -1;
    return std::unique_ptr<TokenConstraint>(new GrammarConstraint(g, vocab, after));
  }

 private:
  StatusOr<std::shared_ptr<const grammar::TokenVocab>> Vocab() {
    std::lock_guard<std::mutex> lock(mu_);
    if (vocab_ != nullptr) return vocab_;
    const auto t0 = std::chrono::steady_clock::now();
    if (tok_ == nullptr) {
      StatusOr<std::unique_ptr<text::Tokenizer>> loaded = text::Tokenizer::Load(dir_);
      if (!loaded.ok())
        return Status::NotFound("structured outputs need the model's tokenizer: " +
                                loaded.status().message());
      tok_ = std::move(*loaded);
    }
    ASSIGN_OR_RETURN(vocab_, grammar::TokenVocab::FromTokenizer(*tok_, stops_));
    std::fprintf(
        stderr, "epserve: structured outputs: vocabulary of %d tokens indexed in %.0f ms\n",
        vocab_->size(),
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return vocab_;
  }

  int32_t Id(const char* token) const { return tok_->TokenToId(token); }

  // The tool-call grammar of `spec`, kept in the process's grammar cache (grammar/grammar.h,
  // bounded in bytes) under a key of its own.
  StatusOr<std::shared_ptr<const grammar::Grammar>> ToolCalls(const Json& spec) {
    const std::string key = "tool_calls|" + spec.dump();
    if (auto g = grammar::FindCachedGrammar(key)) return g;
    const grammar::ToolCallTokens ids{.calls_begin = Id("<｜tool▁calls▁begin｜>"),
                                      .calls_end = Id("<｜tool▁calls▁end｜>"),
                                      .call_begin = Id("<｜tool▁call▁begin｜>"),
                                      .call_end = Id("<｜tool▁call▁end｜>"),
                                      .sep = Id("<｜tool▁sep｜>")};
    ASSIGN_OR_RETURN(std::shared_ptr<const grammar::Grammar> g,
                     grammar::CompileToolCalls(spec, ids));
    grammar::CacheGrammar(key, g);
    return g;
  }

  std::string dir_;
  std::shared_ptr<const text::Tokenizer> tok_;  // loaded from dir_ on first use
  std::vector<int32_t> stops_;
  std::mutex mu_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
};

}  // namespace

ConstraintFactory GrammarConstraintFactory(std::shared_ptr<const text::Tokenizer> tokenizer,
                                           std::vector<int32_t> stop_ids) {
  auto f = std::make_shared<Factory>(std::move(tokenizer), std::move(stop_ids));
  return [f](const std::string& spec, const std::vector<int32_t>&) { return f->Make(spec); };
}

ConstraintFactory GrammarConstraintFactory(std::string model_dir, std::vector<int32_t> stop_ids) {
  auto f = std::make_shared<Factory>(std::move(model_dir), std::move(stop_ids));
  return [f](const std::string& spec, const std::vector<int32_t>&) { return f->Make(spec); };
}

}  // namespace epserve
