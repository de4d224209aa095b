// ChatTemplate: a Hugging Face chat template (Jinja text from tokenizer_config.json) parsed once
// and rendered for each conversation. The engine (text/jinja_*.h) implements the subset of
// Jinja that chat templates use, in the environment transformers renders them in:
// trim_blocks, lstrip_blocks, loop controls, tojson with ensure_ascii=False, raise_exception and
// strftime_now. Output is byte-identical to jinja2's for the supported subset; anything outside
// it is an error naming origin:line:column, never a silently different rendering.
// Thread safety: a parsed ChatTemplate is immutable; Render may be called from many threads.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace epserve::text {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // source: the Jinja text; origin: a name for errors ("tokenizer_config.json: chat_template").
  static StatusOr<ChatTemplate> Parse(std::string_view source, std::string origin);

  // context: {"messages": [...], "add_generation_prompt": bool, "bos_token": "...",
  // "eos_token": "...", "tools": ...}; every top-level key becomes a template variable.
  // `strftime_now(fmt)` formats the current local time, or, when the context holds
  // "strftime_now_epoch" (seconds since 1970, UTC), that fixed instant (for reproducible tests).
  // Errors (raise_exception, a type error, an unsupported filter) name origin:line:column.
  // Dict order is visible to templates (`tojson`, `items()`): nlohmann::json keeps object keys
  // sorted, ordered_json keeps them as parsed (as Python's json does), so prefer ordered_json.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;
  StatusOr<std::string> Render(const nlohmann::json& context) const;

  const std::string& origin() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const jinja::Template> impl_;  // immutable, shared between copies
};

// Reads tokenizer_config.json's chat_template (a string, or a list of {name, template} from
// which "default" is taken) and parses it. Errors name the file.
StatusOr<ChatTemplate> LoadChatTemplate(const std::string& tokenizer_config_path);

// The same from an already-parsed tokenizer_config.json; `origin` names it in errors.
StatusOr<ChatTemplate> ChatTemplateFromConfig(const nlohmann::ordered_json& config,
                                              const std::string& origin);

}  // namespace epserve::text
