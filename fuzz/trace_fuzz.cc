// Fuzzes the trace readers (placement/trace_io.h): the CSV and JSONL imports and the project's
// own format. Each input is read as all three, with the DeepSeek-V2-Lite shape and with a shape
// left to the data; a trace any of them accepts must survive WriteTrace and ReadTrace.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz/fuzz_util.h"
#include "placement/trace_io.h"

namespace {

using epserve::StatusOr;
using epserve::placement::Trace;

void CheckRoundTrip(const StatusOr<Trace>& trace) {
  if (!trace.ok()) return;
  static const epserve::fuzz::ScratchFile out("written.trace");
  epserve::Status written = epserve::placement::WriteTrace(*trace, out.path());
  auto read = written.ok() ? epserve::placement::ReadTrace(out.path()) : written;
  if (!read.ok() || read->num_tokens() != trace->num_tokens() ||
      read->num_layers() != trace->num_layers()) {
    std::fprintf(stderr, "an accepted trace does not round-trip: %s\n",
                 read.ok() ? "token or layer count differs" : read.status().message().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const epserve::fuzz::ScratchFile csv("trace.csv"), jsonl("trace.jsonl"),
      native("trace.trace");
  const std::string_view bytes = epserve::fuzz::AsText(data, size);
  epserve::placement::TraceImportOptions v2_lite;
  epserve::placement::TraceImportOptions from_data;
  from_data.shape.num_experts = 0;
  from_data.shape.top_k = 0;
  from_data.shape.num_hidden_layers = 0;
  for (const auto& options : {v2_lite, from_data}) {
    CheckRoundTrip(epserve::placement::ImportCsvTrace({csv.Write(bytes)}, options));
    CheckRoundTrip(epserve::placement::ImportJsonlTrace(jsonl.Write(bytes), options));
  }
  CheckRoundTrip(epserve::placement::ReadTrace(native.Write(bytes)));
  return 0;
}
