// The `epserve` command: one binary, one subcommand per job.
//
// Exit codes: 0 success; 1 an error the command reported ("epserve: error: ..."): bad input,
// a missing or malformed file, a failed peer; 100-127 a command line CLI11 refused (an unknown
// flag, a value out of its range: see CLI::ExitCodes), also printed as one "epserve: error:"
// line; 2 an internal error: an exception no command caught ("epserve: internal error in
// <command>: ..."), which is a bug to report unless it says memory ran out.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "tools/command.h"

namespace epserve::tools {

void ReportError(CommandContext& ctx, const std::string& message) {
  std::fprintf(stderr, "epserve: error: %s\n", message.c_str());
  ctx.exit_code = 1;
}

namespace {

constexpr int kInternalErrorExitCode = 2;

// "bench decode": the chain of subcommands given on the command line.
std::string CommandName(const CLI::App& app) {
  std::string name;
  const CLI::App* at = &app;
  while (true) {
    const auto subs = at->get_subcommands();
    if (subs.empty()) break;
    at = subs.front();
    name += (name.empty() ? "" : " ") + at->get_name();
  }
  return name.empty() ? "epserve" : name;
}

// CLI11 errors as one line in the same form as the commands' own.
std::string FailureMessage(const CLI::App*, const CLI::Error& e) {
  return "epserve: error: " + std::string(e.what()) + " (see --help)\n";
}

}  // namespace
}  // namespace epserve::tools

int main(int argc, char** argv) {
  using namespace epserve::tools;
  CLI::App app{
      "epserve: serves DeepSeek-V3-family Mixture-of-Experts models with expert parallelism.\n"
      "Run `epserve <command> --help` for each command's options."};
  app.require_subcommand(1);
  app.failure_message(FailureMessage);
  CommandContext ctx;
  RegisterMakeModelCommand(app, ctx);
  RegisterGenerateCommand(app, ctx);
  RegisterBenchCommand(app, ctx);
  RegisterTraceCommand(app, ctx);
  RegisterPlaceCommand(app, ctx);
  RegisterPlanCommand(app, ctx);
  RegisterTokenizeCommand(app, ctx);
#ifdef EPSERVE_HAVE_SERVE
  RegisterServeCommand(app, ctx);
  RegisterEngineCommand(app, ctx);
#endif
  // (helpers add their Register*Command calls here)
  // Commands run inside parse() (as callbacks): anything they throw lands here, never in
  // std::terminate.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "epserve: internal error in %s: out of memory (an allocation sized from the "
                 "input or flags was too large for this machine)\n",
                 CommandName(app).c_str());
    return kInternalErrorExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "epserve: internal error in %s: %s\n", CommandName(app).c_str(),
                 e.what());
    return kInternalErrorExitCode;
  } catch (...) {
    std::fprintf(stderr, "epserve: internal error in %s: unknown exception\n",
                 CommandName(app).c_str());
    return kInternalErrorExitCode;
  }
  return ctx.exit_code;
}
