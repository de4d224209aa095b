// Writes a safetensors file: tensors are declared first, then Write() emits the header (sorted
// by name, padded with spaces to a multiple of 8 bytes so every tensor starts 8-byte aligned)
// followed by the data. The header's offsets follow from the shapes and dtypes alone, so a
// tensor may be declared with a producer instead of its bytes: Write() calls it when the
// tensor's turn comes and streams what it appends straight to the file. A file of producers
// therefore needs the memory of the producers' own buffers, not of the file (make-model writes
// a 31 GB shard that way). The output is durable (OutputFile: a temporary, fsynced, renamed).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace epserve {

class OutputFile;

// Where a producer appends its tensor's bytes, in order, in pieces of any size. Append
// returns the file's first write error; a producer should stop and return it.
class TensorSink {
 public:
  Status Append(const void* data, size_t size);
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  friend class SafetensorsWriter;
  explicit TensorSink(OutputFile* file) : file_(file) {}
  OutputFile* file_;
  uint64_t bytes_written_ = 0;
};

class SafetensorsWriter {
 public:
  // Appends exactly product(shape) * DTypeSize(dtype) bytes (a CHECK in Write). Called once
  // per Write, in name order, after the tensors before it are written.
  using Producer = std::function<Status(TensorSink& sink)>;
  // Called after each tensor is written with (data bytes written so far, total_bytes()).
  using Progress = std::function<void(uint64_t done, uint64_t total)>;

  // bytes.size() must equal product(shape) * DTypeSize(dtype).
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes);
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, Producer produce);
  void SetMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Bytes of tensor data (the file is this plus 8 plus the header).
  size_t total_bytes() const { return total_bytes_; }
  std::vector<std::string> Names() const;
  // `progress` may be null.
  Status Write(const std::string& path, const Progress& progress = nullptr) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    size_t num_bytes;
    std::vector<uint8_t> bytes;  // empty when `produce` is set
    Producer produce;
  };
  void AddEntry(const std::string& name, Entry entry);

  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  size_t total_bytes_ = 0;
};

// The Hugging Face shard names: "model.safetensors" for one shard, else
// "model-0000S-of-0000N.safetensors" (S from 1).
std::string ShardFileName(int shard, int num_shards);

// Writes writers[s] as shard s of out_dir (ShardFileName), then, with several shards, the
// index model.safetensors.index.json (total_size and each tensor's file). `progress` (may be
// null) is told (data bytes written over all shards, their total) after each tensor.
Status WriteShardedCheckpoint(const std::vector<SafetensorsWriter>& writers,
                              const std::string& out_dir,
                              const SafetensorsWriter::Progress& progress);

}  // namespace epserve
