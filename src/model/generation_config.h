// generation_config.json: the sampling defaults a Hugging Face checkpoint's authors ship beside
// config.json (DeepSeek-V3 and R1: temperature 0.6, top_p 0.95). Only temperature, top_p and
// top_k are read, each optional; everything else in the file (do_sample, max_new_tokens, token
// ids) is ignored, as vLLM does. Servers use the values for requests that set none of their own
// (docs/checkpoint-format.md, "generation_config.json").
// Thread safety: a plain value; the functions are pure apart from reading the file.
#pragma once

#include <optional>
#include <string>

#include "base/status.h"

namespace epserve {

struct GenerationConfig {
  std::optional<float> temperature;  // in [0, 2], the range a request may ask for
  std::optional<float> top_p;        // in (0, 1]
  std::optional<int> top_k;          // >= 0; 0 (or -1 in the file): all tokens
  std::string path;                  // the file read; empty when none was
  std::string why_none;              // when none was read: why ("--generation-config none")

  bool empty() const { return !temperature && !top_p && !top_k; }
  // Where the values come from, for the line a server prints at start: "temperature, top_p from
  // /m/generation_config.json", or "built-in: no /m/generation_config.json".
  std::string Source() const;

  // Parses and validates the file's text; errors name `path` and the field.
  static StatusOr<GenerationConfig> Parse(const std::string& json_text, const std::string& path);
};

// The generation config `choice` names (the --generation-config flag): "auto" reads
// <model_dir>/generation_config.json when the folder has one (none otherwise), "none" reads
// nothing, anything else is the path of a file that must exist.
StatusOr<GenerationConfig> ReadGenerationConfig(const std::string& choice,
                                                const std::string& model_dir);

}  // namespace epserve
