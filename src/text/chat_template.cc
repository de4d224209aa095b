#include "text/chat_template.h"

#include <fstream>
#include <sstream>

#include "base/json.h"
#include "text/jinja_eval.h"
#include "text/jinja_parser.h"

namespace epserve::text {

namespace {
// transformers' _compile_jinja_template: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]).
constexpr jinja::LexOptions kHfLexOptions{.trim_blocks = true, .lstrip_blocks = true};
constexpr char kFixedTimeKey[] = "strftime_now_epoch";
}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, std::string origin) {
  ASSIGN_OR_RETURN(std::unique_ptr<jinja::Template> tpl,
                   jinja::ParseTemplate(source, std::move(origin), kHfLexOptions));
  return ChatTemplate(std::shared_ptr<const jinja::Template>(std::move(tpl)));
}

const std::string& ChatTemplate::origin() const { return impl_->origin; }

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    return Status::InvalidArgument(impl_->origin + ": the render context must be a JSON object");
  jinja::RenderOptions options;
  auto fixed = context.find(kFixedTimeKey);
  if (fixed != context.end()) {
    if (!fixed->is_number_integer()) {
      return Status::InvalidArgument(impl_->origin + ": " + kFixedTimeKey +
                                     " must be an integer (seconds since 1970)");
    }
    options.fixed_time_epoch = fixed->get<int64_t>();
  }
  jinja::Value vars = jinja::Value::FromJson(context);
  return jinja::Render(*impl_, vars.dict(), options);
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  return Render(nlohmann::ordered_json(context));
}

StatusOr<ChatTemplate> ChatTemplateFromConfig(const nlohmann::ordered_json& config,
                                              const std::string& origin) {
  if (!config.is_object()) return Status::InvalidArgument(origin + ": not a JSON object");
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    return Status::NotFound(origin + ": has no chat_template");
  if (it->is_string())
    return ChatTemplate::Parse(it->get<std::string>(), origin + ": chat_template");
  if (!it->is_array()) {
    return Status::InvalidArgument(
        origin + ": chat_template must be a string or a list of {name, template}, got " +
        std::string(it->type_name()));
  }
  for (const auto& entry : *it) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return Status::InvalidArgument(
          origin + ": chat_template entries must be {\"name\": str, \"template\": str}");
    }
    if (entry["name"].get<std::string>() == "default") {
      return ChatTemplate::Parse(entry["template"].get<std::string>(),
                                 origin + ": chat_template[default]");
    }
  }
  return Status::NotFound(origin + ": chat_template has no entry named \"default\"");
}

StatusOr<ChatTemplate> LoadChatTemplate(const std::string& tokenizer_config_path) {
  std::ifstream in(tokenizer_config_path, std::ios::binary);
  if (!in) return Status::IoError(tokenizer_config_path + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  ASSIGN_OR_RETURN(nlohmann::ordered_json config,
                   ParseOrderedJson(buf.str(), tokenizer_config_path));
  return ChatTemplateFromConfig(config, tokenizer_config_path);
}

}  // namespace epserve::text
