#include "io/safetensors_writer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/output_file.h"

namespace epserve {

Status TensorSink::Append(const void* data, size_t size) {
  bytes_written_ += size;
  return file_->Write(data, size);
}

void SafetensorsWriter::AddEntry(const std::string& name, Entry entry) {
  int64_t n = 1;
  for (int64_t d : entry.shape) n *= d;
  entry.num_bytes = static_cast<size_t>(n) * DTypeSize(entry.dtype);
  auto it = entries_.find(name);
  if (it != entries_.end()) total_bytes_ -= it->second.num_bytes;  // replaced
  total_bytes_ += entry.num_bytes;
  entries_[name] = std::move(entry);
}

void SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  const size_t size = bytes.size();
  AddEntry(name, Entry{dtype, std::move(shape), 0, std::move(bytes), nullptr});
  CHECK(entries_.at(name).num_bytes == size) << name;
}

void SafetensorsWriter::Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            Producer produce) {
  CHECK(produce != nullptr) << name;
  AddEntry(name, Entry{dtype, std::move(shape), 0, {}, std::move(produce)});
}

std::vector<std::string> SafetensorsWriter::Names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : entries_) names.push_back(k);
  return names;
}

Status SafetensorsWriter::Write(const std::string& path, const Progress& progress) const {
  nlohmann::ordered_json header;
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const auto& [name, e] : entries_) {
    header[name] = {{"dtype", DTypeName(e.dtype)},
                    {"shape", e.shape},
                    {"data_offsets", {offset, offset + e.num_bytes}}};
    offset += e.num_bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  ASSIGN_OR_RETURN(OutputFile f, OutputFile::Create(path));
  uint64_t len = text.size();
  RETURN_IF_ERROR(f.Write(&len, 8));
  RETURN_IF_ERROR(f.Write(text));
  uint64_t done = 0;
  for (const auto& [name, e] : entries_) {
    if (e.produce) {
      TensorSink sink(&f);
      RETURN_IF_ERROR(e.produce(sink));
      // A short or long tensor would shift every later offset: our bug, not the user's.
      CHECK(sink.bytes_written() == e.num_bytes)
          << name << ": producer wrote " << sink.bytes_written() << " bytes, want " << e.num_bytes;
    } else {
      RETURN_IF_ERROR(f.Write(e.bytes.data(), e.bytes.size()));
    }
    done += e.num_bytes;
    if (progress) progress(done, total_bytes_);
  }
  return f.Commit();
}

std::string ShardFileName(int shard, int num_shards) {
  if (num_shards == 1) return "model.safetensors";
  auto five = [](int i) {
    const std::string s = std::to_string(i);
    return std::string(5 - std::min<size_t>(5, s.size()), '0') + s;
  };
  return "model-" + five(shard + 1) + "-of-" + five(num_shards) + ".safetensors";
}

Status WriteShardedCheckpoint(const std::vector<SafetensorsWriter>& writers,
                              const std::string& out_dir,
                              const SafetensorsWriter::Progress& progress) {
  const int num_shards = static_cast<int>(writers.size());
  uint64_t total_bytes = 0;
  for (const SafetensorsWriter& w : writers) total_bytes += w.total_bytes();
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t bytes_before = 0;  // in the shards already written
  for (int shard = 0; shard < num_shards; ++shard) {
    const std::string file = ShardFileName(shard, num_shards);
    for (const auto& name : writers[shard].Names()) weight_map[name] = file;
    SafetensorsWriter::Progress shard_progress;
    if (progress)
      shard_progress = [&](uint64_t done, uint64_t) { progress(bytes_before + done, total_bytes); };
    RETURN_IF_ERROR(writers[shard].Write(out_dir + "/" + file, shard_progress));
    bytes_before += writers[shard].total_bytes();
  }
  if (num_shards > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total_bytes}};
    index["weight_map"] = weight_map;
    RETURN_IF_ERROR(
        WriteFileAtomically(out_dir + "/model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return Status::Ok();
}

}  // namespace epserve
