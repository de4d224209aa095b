// Reading and writing traces: the project's own format (docs/trace-format.md) and the two import
// forms, the per-prompt CSV files of ../shared/traces and JSONL rows
// {"layer":L,"token":T,"experts":[...],"weights":[...]}.
// Every error names the file and, for text input, the line (for binary input, the byte offset).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/output_file.h"
#include "base/status.h"
#include "placement/trace.h"

namespace epserve::placement {

// The first line of a trace file in the project's own format.
inline constexpr char kTraceMagic[] = "EPSERVE-TRACE 1";

Status WriteTrace(const Trace& trace, const std::string& path);
StatusOr<Trace> ReadTrace(const std::string& path);

// Appends tokens to a trace file as they are produced (the engine's --trace-out). The header is
// written on Open; each Append writes one fixed-size record. The records go to a temporary
// beside `path` (base/output_file.h), which Close fsyncs and renames over `path`: a writer
// destroyed without a successful Close leaves any old file at `path` as it was.
// Thread safety: one thread at a time.
class TraceWriter {
 public:
  static StatusOr<TraceWriter> Open(const std::string& path, const ModelShape& shape,
                                    const std::vector<int>& layer_ids, GateWeights weights);
  TraceWriter(TraceWriter&& other) noexcept = default;
  TraceWriter& operator=(TraceWriter&& other) noexcept = default;

  // `experts`/`weights`: num_layers * top_k values, layer-major, as Trace::AddToken takes them.
  Status Append(uint32_t sequence_id, uint32_t position, const uint16_t* experts,
                const float* weights);
  Status Close();

 private:
  TraceWriter() = default;
  std::string path_;
  std::optional<OutputFile> file_;  // empty once closed
  size_t values_per_token_ = 0;
  bool has_weights_ = false;
};

struct TraceImportOptions {
  // Shape of the model; fields left 0 are filled from the data (num_experts = largest id + 1,
  // top_k = list length). Defaults to DeepSeek-V2-Lite, the model of the shared traces.
  ModelShape shape = DeepSeekV2LiteShape();
};

// Reads the CSV form: one file per prompt with the header
// `Layer ID,Batch Number,Token,Activated Expert IDs`; `paths` are files or directories (every
// *.csv inside, ordered by the number in the name, then by name). Each file becomes one
// sequence, numbered in that order.
StatusOr<Trace> ImportCsvTrace(const std::vector<std::string>& paths,
                               const TraceImportOptions& options);

// Reads JSONL rows {"layer":L,"token":T,"experts":[...],"weights":[...],"sequence":S}; "weights"
// and "sequence" are optional (without "sequence", each token is its own sequence). Every token
// needs one row per layer.
StatusOr<Trace> ImportJsonlTrace(const std::string& path, const TraceImportOptions& options);

// Reads any of the three: a directory or *.csv -> CSV, *.jsonl -> JSONL, otherwise the
// project's format.
StatusOr<Trace> LoadAnyTrace(const std::vector<std::string>& paths,
                             const TraceImportOptions& options);

}  // namespace epserve::placement
