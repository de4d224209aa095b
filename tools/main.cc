// The `epserve` command: one binary, one subcommand per job.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "tools/command.h"

namespace epserve::tools {

void ReportError(CommandContext& ctx, const std::string& message) {
  std::fprintf(stderr, "epserve: error: %s\n", message.c_str());
  ctx.exit_code = 1;
}

}  // namespace epserve::tools

int main(int argc, char** argv) {
  using namespace epserve::tools;
  CLI::App app{
      "epserve: serves DeepSeek-V3-family Mixture-of-Experts models with expert parallelism.\n"
      "Run `epserve <command> --help` for each command's options."};
  app.require_subcommand(1);
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
  CLI11_PARSE(app, argc, argv);
  return ctx.exit_code;
}
