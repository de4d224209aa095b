// `epserve trace import` and `epserve trace info`: routing traces in the project's own format
// (docs/trace-format.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "placement/trace_io.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {
namespace {

struct TraceFlags {
  std::vector<std::string> inputs;
  std::string out;
  std::string format = "auto";
  placement::ModelShape shape = placement::DeepSeekV2LiteShape();
  std::vector<std::string> info_files;
};

void AddShapeOptions(CLI::App* cmd, placement::ModelShape* shape) {
  cmd->add_option("--num-experts", shape->num_experts,
                  "routed experts per layer (0: largest id seen + 1)")
      ->check(IntRange(0, 65536))
      ->capture_default_str();
  cmd->add_option("--top-k", shape->top_k, "experts per token (0: from the data)")
      ->check(IntRange(0, 1024))
      ->capture_default_str();
  cmd->add_option("--hidden-size", shape->hidden_size, "model hidden size")
      ->check(IntRange(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--moe-intermediate-size", shape->moe_intermediate_size, "expert FFN width")
      ->check(IntRange(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--num-hidden-layers", shape->num_hidden_layers,
                  "decoder layers, dense ones included")
      ->check(IntRange(1, 4096))
      ->capture_default_str();
  cmd->add_option("--expert-groups", shape->num_expert_groups, "the gate's expert groups")
      ->check(IntRange(1, 1024))
      ->capture_default_str();
  cmd->add_option("--model-name", shape->name, "name recorded in the trace")->capture_default_str();
}

void RunImport(const TraceFlags& flags, CommandContext& ctx) {
  Status same = CheckNotSameFile("--out", flags.out, "an input trace", flags.inputs);
  if (same.ok()) same = CheckWritable("--out", flags.out);
  if (!same.ok()) return ReportError(ctx, same.message());
  placement::TraceImportOptions options{.shape = flags.shape};
  StatusOr<placement::Trace> trace =
      flags.format == "csv" ? placement::ImportCsvTrace(flags.inputs, options)
      : flags.format == "jsonl"
          ? (flags.inputs.size() == 1
                 ? placement::ImportJsonlTrace(flags.inputs[0], options)
                 : StatusOr<placement::Trace>(Status::InvalidArgument("a JSONL trace is one file")))
          : placement::LoadAnyTrace(flags.inputs, options);
  if (!trace.ok()) return ReportError(ctx, trace.status().message());
  Status st = placement::WriteTrace(*trace, flags.out);
  if (!st.ok()) return ReportError(ctx, st.message());
  std::printf("wrote %s: %lld tokens in %zu sequences, %d MoE layers, %d experts, top-%d\n",
              flags.out.c_str(), static_cast<long long>(trace->num_tokens()),
              trace->SequenceOrder().size(), trace->num_layers(), trace->shape().num_experts,
              trace->top_k());
}

void RunInfo(const TraceFlags& flags, CommandContext& ctx) {
  for (const std::string& file : flags.info_files) {
    StatusOr<placement::Trace> trace = placement::ReadTrace(file);
    if (!trace.ok()) return ReportError(ctx, trace.status().message());
    const placement::ModelShape& m = trace->shape();
    std::printf(
        "%s: model %s, %d experts, top-%d, hidden %d, expert FFN %d, %d decoder layers, "
        "%d expert groups\n  %lld tokens in %zu sequences, MoE layers %d..%d (%d), %s\n",
        file.c_str(), m.name.empty() ? "?" : m.name.c_str(), m.num_experts, m.top_k, m.hidden_size,
        m.moe_intermediate_size, m.num_hidden_layers, m.num_expert_groups,
        static_cast<long long>(trace->num_tokens()), trace->SequenceOrder().size(),
        trace->layer_ids().front(), trace->layer_ids().back(), trace->num_layers(),
        trace->has_weights() ? "with gate weights" : "without gate weights");
  }
}

}  // namespace

void RegisterTraceCommand(CLI::App& app, CommandContext& ctx) {
  auto flags = std::make_shared<TraceFlags>();
  CLI::App* trace = app.add_subcommand("trace", "Routing traces (docs/trace-format.md).");
  trace->require_subcommand(1);

  CLI::App* import = trace->add_subcommand(
      "import",
      "Convert routing decisions to the project's trace format: the per-prompt CSV files of\n"
      "../shared/traces (files or folders; one sequence per file) or JSONL rows\n"
      "{\"layer\":L,\"token\":T,\"experts\":[...],\"weights\":[...],\"sequence\":S}.\n"
      "The model shape defaults to DeepSeek-V2-Lite.");
  import->add_option("inputs", flags->inputs, "CSV files or folders, or one JSONL file")
      ->required();
  import->add_option("--out", flags->out, "trace file to write")->required();
  import->add_option("--format", flags->format, "auto | csv | jsonl")
      ->check(CLI::IsMember({"auto", "csv", "jsonl"}))
      ->capture_default_str();
  AddShapeOptions(import, &flags->shape);
  import->callback([flags, &ctx] { RunImport(*flags, ctx);
});

CLI::App* info = trace->add_subcommand("info", "Print the shape and size of trace files.");
info->add_option("files", flags->info_files, "trace files")->required();
info->callback([flags, &ctx] { RunInfo(*flags, ctx); });
}  // namespace epserve::tools

}  // namespace epserve::tools
