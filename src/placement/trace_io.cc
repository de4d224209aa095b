// The project's trace format: a magic line, a one-line JSON header, then fixed-size
// little-endian records, one per token (docs/trace-format.md).
#include "placement/trace_io.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json.h"
#include "placement/json_int.h"

namespace epserve::placement {
namespace {

static_assert(std::endian::native == std::endian::little, "trace records are little-endian");

using Json = nlohmann::json;

Json HeaderJson(const ModelShape& shape, const std::vector<int>& layer_ids, bool has_weights) {
  Json model = {{"name", shape.name},
                {"num_experts", shape.num_experts},
                {"top_k", shape.top_k},
                {"hidden_size", shape.hidden_size},
                {"moe_intermediate_size", shape.moe_intermediate_size},
                {"num_hidden_layers", shape.num_hidden_layers},
                {"num_expert_groups", shape.num_expert_groups}};
  return Json{{"model", model}, {"layer_ids", layer_ids}, {"has_weights", has_weights}};
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// Reads one '\n'-terminated line; false at end of file.
bool ReadLine(std::FILE* f, std::string* line) {
  line->clear();
  int c;
  while ((c = std::fgetc(f)) != EOF) {
    if (c == '\n') return true;
    line->push_back(static_cast<char>(c));
  }
  return !line->empty();
}

StatusOr<ModelShape> ParseModel(const Json& model) {
  ModelShape shape;
  try {
    const std::string at = "bad \"model\" object: ";
    shape.name = model.value("name", std::string());
    ASSIGN_OR_RETURN(const Json* num_experts, JsonField(model, "num_experts", "model"));
    ASSIGN_OR_RETURN(shape.num_experts, JsonInt(*num_experts, at + "num_experts"));
    ASSIGN_OR_RETURN(const Json* top_k, JsonField(model, "top_k", "model"));
    ASSIGN_OR_RETURN(shape.top_k, JsonInt(*top_k, at + "top_k"));
    ASSIGN_OR_RETURN(shape.hidden_size, JsonIntOr(model, "hidden_size", 0, at));
    ASSIGN_OR_RETURN(shape.moe_intermediate_size, JsonIntOr(model, "moe_intermediate_size", 0, at));
    ASSIGN_OR_RETURN(shape.num_hidden_layers, JsonIntOr(model, "num_hidden_layers", 0, at));
    ASSIGN_OR_RETURN(shape.num_expert_groups, JsonIntOr(model, "num_expert_groups", 1, at));
  } catch (const Json::exception& e) {
    return Status::DataLoss(std::string("bad \"model\" object: ") + JsonExceptionText(e));
  }
  RETURN_IF_ERROR(shape.Validate());
  return shape;
}

}  // namespace

StatusOr<TraceWriter> TraceWriter::Open(const std::string& path, const ModelShape& shape,
                                        const std::vector<int>& layer_ids, GateWeights weights) {
  const bool has_weights = weights == GateWeights::kRecorded;
  RETURN_IF_ERROR(shape.Validate().WithContext(path));
  if (layer_ids.empty()) return Status::InvalidArgument(path + ": a trace needs a layer");
  TraceWriter writer;
  writer.path_ = path;
  ASSIGN_OR_RETURN(OutputFile file, OutputFile::Create(path));
  writer.file_.emplace(std::move(file));
  writer.values_per_token_ = layer_ids.size() * static_cast<size_t>(shape.top_k);
  writer.has_weights_ = has_weights;
  const std::string header =
      std::string(kTraceMagic) + "\n" + HeaderJson(shape, layer_ids, has_weights).dump() + "\n";
  RETURN_IF_ERROR(writer.file_->Write(header));
  return writer;
}

Status TraceWriter::Append(uint32_t sequence_id, uint32_t position, const uint16_t* experts,
                           const float* weights) {
  if (!file_) return Status::Internal(path_ + ": trace writer is closed");
  const uint32_t ids[2] = {sequence_id, position};
  RETURN_IF_ERROR(file_->Write(ids, sizeof(ids)));
  RETURN_IF_ERROR(file_->Write(experts, sizeof(uint16_t) * values_per_token_));
  if (has_weights_) RETURN_IF_ERROR(file_->Write(weights, sizeof(float) * values_per_token_));
  return Status::Ok();
}

Status TraceWriter::Close() {
  if (!file_) return Status::Ok();
  Status st = file_->Commit();
  file_.reset();
  return st;
}

Status WriteTrace(const Trace& trace, const std::string& path) {
  ASSIGN_OR_RETURN(TraceWriter writer,
                   TraceWriter::Open(path, trace.shape(), trace.layer_ids(), trace.gate_weights()));
  const int k = trace.top_k();
  const size_t n = static_cast<size_t>(trace.num_layers()) * k;
  std::vector<uint16_t> experts(n);
  std::vector<float> weights(trace.has_weights() ? n : 0);
  for (int64_t t = 0; t < trace.num_tokens(); ++t) {
    for (int l = 0; l < trace.num_layers(); ++l) {
      std::memcpy(&experts[static_cast<size_t>(l) * k], trace.Experts(l, t), k * sizeof(uint16_t));
      if (trace.has_weights()) {
        std::memcpy(&weights[static_cast<size_t>(l) * k], trace.Weights(l, t), k * sizeof(float));
      }
    }
    RETURN_IF_ERROR(writer.Append(trace.sequence_id(t), trace.position(t), experts.data(),
                                  weights.empty() ? nullptr : weights.data()));
  }
  return writer.Close();
}

StatusOr<Trace> ReadTrace(const std::string& path) {
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) return Status::IoError(path + ": cannot open: " + std::strerror(errno));
  std::string line;
  if (!ReadLine(file.get(), &line) || line != kTraceMagic) {
    return Status::DataLoss(path + ":1: not an epserve trace (expected \"" +
                            std::string(kTraceMagic) + "\")");
  }
  if (!ReadLine(file.get(), &line)) return Status::DataLoss(path + ":2: missing header");
  ASSIGN_OR_RETURN(Json header, ParseJson(line, path + ":2: header"));
  if (!header.is_object() || !header.contains("model") || !header.contains("layer_ids")) {
    return Status::DataLoss(path + ":2: header is not a JSON object with model and layer_ids");
  }
  StatusOr<ModelShape> shape = ParseModel(header["model"]);
  if (!shape.ok()) return shape.status().WithContext(path + ":2");
  std::vector<int> layer_ids;
  bool has_weights = false;
  try {
    ASSIGN_OR_RETURN(layer_ids, JsonIntArray(header["layer_ids"], path + ":2: layer_ids"));
    has_weights = header.value("has_weights", false);
  } catch (const Json::exception& e) {
    return Status::DataLoss(path + ":2: " + JsonExceptionText(e));
  }
  if (layer_ids.empty()) return Status::DataLoss(path + ":2: layer_ids is empty");
  if (layer_ids.front() < 0 || layer_ids.back() > 1000000) {
    return Status::DataLoss(path + ":2: layer ids must be in [0, 1000000]");
  }
  for (size_t i = 1; i < layer_ids.size(); ++i) {
    if (layer_ids[i] <= layer_ids[i - 1]) {
      return Status::DataLoss(path + ":2: layer_ids must increase");
    }
  }
  Trace trace(*shape, layer_ids, has_weights ? GateWeights::kRecorded : GateWeights::kAbsent);
  const size_t n = layer_ids.size() * static_cast<size_t>(shape->top_k);
  const size_t record_bytes = 8 + n * sizeof(uint16_t) + (has_weights ? n * sizeof(float) : 0);
  std::vector<unsigned char> record(record_bytes);
  std::vector<uint16_t> experts(n);
  std::vector<float> weights(has_weights ? n : 0);
  long offset = std::ftell(file.get());
  for (int64_t t = 0;; ++t, offset += static_cast<long>(record_bytes)) {
    const size_t got = std::fread(record.data(), 1, record_bytes, file.get());
    if (got == 0) break;
    if (got != record_bytes) {
      return Status::DataLoss(path + ": byte " + std::to_string(offset) + ": record " +
                              std::to_string(t) + " is cut short (" + std::to_string(got) + " of " +
                              std::to_string(record_bytes) + " bytes)");
    }
    uint32_t ids[2];
    std::memcpy(ids, record.data(), 8);
    std::memcpy(experts.data(), record.data() + 8, n * sizeof(uint16_t));
    if (has_weights) {
      std::memcpy(weights.data(), record.data() + 8 + n * sizeof(uint16_t), n * sizeof(float));
    }
    Status st =
        trace.AddToken(ids[0], ids[1], experts.data(), has_weights ? weights.data() : nullptr);
    if (!st.ok()) {
      return st.WithContext(path + ": byte " + std::to_string(offset) + ": record " +
                            std::to_string(t));
    }
  }
  return trace;
}

}  // namespace epserve::placement
