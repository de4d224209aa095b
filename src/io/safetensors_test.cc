#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "io/checkpoint.h"
#include "io/safetensors_writer.h"

namespace epserve {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("epserve_io_" + name)).string();
}

std::vector<uint8_t> F32Bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, RoundTrip) {
  SafetensorsWriter w;
  w.Add("a", DType::kF32, {2, 3}, F32Bytes({1, 2, 3, 4, 5, 6}));
  w.Add("b", DType::kBF16, {4}, std::vector<uint8_t>(8, 0));
  w.Add("c", DType::kF8E4M3, {3}, {0x38, 0x7e, 0x01});
  std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const auto& t = (*f)->tensors();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.at("a").data) % 8, 0u);
  float v[6];
  std::memcpy(v, t.at("a").data, 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_EQ(t.at("c").dtype, DType::kF8E4M3);
  EXPECT_EQ(t.at("c").data[1], 0x7e);
}

// DeepSeek-V4's storage types: UE8M0 scale bytes, I8 packed FP4 bytes, I64 / I32 index tables.
TEST(SafetensorsTest, V4StorageTypes) {
  SafetensorsWriter w;
  w.Add("fp4", DType::kI8, {2, 16}, std::vector<uint8_t>(32, 0x21));
  w.Add("fp4_scale", DType::kF8E8M0, {2, 1}, {127, 128});
  const int64_t ids[3] = {3, 0, 2};
  std::vector<uint8_t> id_bytes(24);
  std::memcpy(id_bytes.data(), ids, 24);
  w.Add("tid2eid", DType::kI64, {3, 1}, id_bytes);
  w.Add("tid2eid32", DType::kI32, {2}, std::vector<uint8_t>(8, 0));
  std::string path = TempPath("v4types.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const auto& t = (*f)->tensors();
  EXPECT_EQ(t.at("fp4").dtype, DType::kI8);
  EXPECT_EQ(t.at("fp4").num_bytes, 32u);
  EXPECT_EQ(t.at("fp4_scale").dtype, DType::kF8E8M0);
  EXPECT_EQ(t.at("fp4_scale").data[1], 128);
  EXPECT_EQ(t.at("tid2eid").dtype, DType::kI64);
  int64_t v;
  std::memcpy(&v, t.at("tid2eid").data + 16, 8);
  EXPECT_EQ(v, 2);
  EXPECT_EQ(t.at("tid2eid32").dtype, DType::kI32);
  EXPECT_EQ(t.at("tid2eid32").num_bytes, 8u);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A tensor declared with a producer is written exactly as one declared with its bytes,
// whatever pieces the producer appends; producers run once each, in name order, with the
// progress after each tensor.
TEST(SafetensorsWriterTest, ProducersWriteTheSameFileAsBytes) {
  const std::vector<uint8_t> a = F32Bytes({1, 2, 3, 4, 5, 6});
  std::vector<uint8_t> b(4000);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
  SafetensorsWriter bytes, streamed;
  for (SafetensorsWriter* w : {&bytes, &streamed}) w->SetMetadata("format", "pt");
  bytes.Add("b", DType::kBF16, {2000}, b);
  bytes.Add("a", DType::kF32, {2, 3}, a);
  bytes.Add("c", DType::kF8E4M3, {0}, std::vector<uint8_t>{});
  std::vector<std::string> order;
  streamed.Add("b", DType::kBF16, {2000}, [&](TensorSink& sink) {
    order.push_back("b");
    RETURN_IF_ERROR(sink.Append(b.data(), 1));  // odd pieces: 1, 999, 3000
    RETURN_IF_ERROR(sink.Append(b.data() + 1, 999));
    return sink.Append(b.data() + 1000, 3000);
  });
  streamed.Add("a", DType::kF32, {2, 3}, [&](TensorSink& sink) {
    order.push_back("a");
    return sink.Append(a.data(), a.size());
  });
  streamed.Add("c", DType::kF8E4M3, {0}, [&](TensorSink&) {
    order.push_back("c");
    return Status::Ok();
  });
  EXPECT_EQ(streamed.total_bytes(), bytes.total_bytes());
  EXPECT_EQ(streamed.total_bytes(), 24u + 4000u);
  const std::string p1 = TempPath("bytes.safetensors"), p2 = TempPath("streamed.safetensors");
  ASSERT_TRUE(bytes.Write(p1).ok());
  std::vector<uint64_t> progress;
  ASSERT_TRUE(streamed
                  .Write(p2,
                         [&](uint64_t done, uint64_t total) {
                           EXPECT_EQ(total, 4024u);
                           progress.push_back(done);
                         })
                  .ok());
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(progress, (std::vector<uint64_t>{24, 4024, 4024}));
  EXPECT_EQ(ReadAll(p1), ReadAll(p2));
  auto f = SafetensorsFile::Open(p2);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(std::memcmp((*f)->tensors().at("b").data, b.data(), b.size()), 0);
}

// A producer's error ends the write with that error and leaves nothing under the path (nor a
// temporary beside it); an old file there stays as it was.
TEST(SafetensorsWriterTest, ProducerErrorLeavesNoFile) {
  namespace fs = std::filesystem;
  const std::string dir = TempPath("producer_error");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  SafetensorsWriter w;
  w.Add("x", DType::kF32, {4}, [](TensorSink& sink) {
    const float v[2] = {1, 2};
    RETURN_IF_ERROR(sink.Append(v, sizeof(v)));
    return Status::IoError("no more values");
  });
  Status st = w.Write(path);
  EXPECT_EQ(st.message(), "no more values");
  EXPECT_TRUE(fs::is_empty(dir));
  { std::ofstream(path) << "old"; }
  EXPECT_FALSE(w.Write(path).ok());
  EXPECT_EQ(ReadAll(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// A producer that writes the wrong number of bytes would shift every later tensor: our bug.
TEST(SafetensorsWriterDeathTest, ProducerOfTheWrongSize) {
  SafetensorsWriter w;
  w.Add("x", DType::kF32, {4}, [](TensorSink& sink) {
    const float v[3] = {1, 2, 3};
    return sink.Append(v, sizeof(v));
  });
  EXPECT_DEATH((void)w.Write(TempPath("short.safetensors")), "x: producer wrote 12 bytes, want 16");
}

struct BadCase {
  const char* label;
  std::string header;
  size_t data_bytes;
  const char* expect;  // substring of the error
};

TEST(SafetensorsTest, CorruptFilesGiveOneLineErrorsNamingFileAndTensor) {
  std::vector<BadCase> cases = {
      {"bad_json", "{\"a\": {\"dtype\": ", 0, "bad header JSON"},
      {"offsets",
       R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       8, "tensor x: data_offsets [8, 16] out of range"},
      {"size_mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor w: 8 bytes for F32 [3]"},
      {"dtype", R"({"w":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})", 2,
       "tensor w: unsupported dtype \"F16\""},
      {"size_mismatch_i64", R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}})", 8,
       "tensor w: 8 bytes for I64 [2] (want 16)"},
      {"no_offsets", R"({"w":{"dtype":"F32","shape":[1]}})", 4, "tensor w: header entry lacks"},
      // Found with fuzz/safetensors_fuzz: an element count or byte size that overflows 64 bits
      // (2^62 F32 elements wrapped to 0 bytes and passed for an empty tensor).
      {"huge_shape",
       R"({"w":{"dtype":"F32","shape":[4294967296,4294967297],"data_offsets":[0,0]}})", 0,
       "tensor w: shape [4294967296, 4294967297] of F32 is too large"},
      {"wrapping_bytes",
       R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0,
       "tensor w: shape [4611686018427387904] of F32 is too large"},
  };
  for (const auto& c : cases) {
    std::string path = TempPath(std::string(c.label) + ".safetensors");
    WriteRaw(path, c.header, c.data_bytes);
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << c.label;
    const std::string& msg = f.status().message();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.label << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(SafetensorsTest, TruncatedFile) {
  SafetensorsWriter w;
  w.Add("big", DType::kF32, {256}, std::vector<uint8_t>(1024, 0));
  std::string path = TempPath("trunc.safetensors");
  ASSERT_TRUE(w.Write(path).ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("tensor big: data_offsets"), std::string::npos)
      << f.status().message();
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos);
  std::filesystem::resize_file(path, 5);
  f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos);
}

TEST(CheckpointTest, ShardedIndex) {
  namespace fs = std::filesystem;
  std::string dir = TempPath("sharded");
  fs::remove_all(dir);
  fs::create_directories(dir);
  { std::ofstream(dir + "/config.json") << "{}"; }
  SafetensorsWriter a, b;
  a.Add("x", DType::kF32, {1}, F32Bytes({1}));
  b.Add("y", DType::kF32, {1}, F32Bytes({2}));
  ASSERT_TRUE(a.Write(dir + "/s1.safetensors").ok());
  ASSERT_TRUE(b.Write(dir + "/s2.safetensors").ok());
  {
    std::ofstream(dir + "/model.safetensors.index.json")
        << R"({"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})";
  }
  auto ck = Checkpoint::Open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  ASSERT_NE((*ck)->Find("y"), nullptr);
  EXPECT_EQ((*ck)->Find("y")->file, dir + "/s2.safetensors");
  EXPECT_EQ((*ck)->Find("z"), nullptr);

  {
    std::ofstream(dir + "/model.safetensors.index.json")
        << R"({"weight_map":{"x":"s1.safetensors","y":"s2.safetensors","z":"s2.safetensors"}})";
  }
  ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("tensor z listed in the index is missing"),
            std::string::npos)
      << ck.status().message();
  {
    std::ofstream(dir + "/model.safetensors.index.json")
        << R"({"weight_map":{"x":"s1.safetensors","y":"s3.safetensors"}})";
  }
  ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("s3.safetensors: cannot open"), std::string::npos)
      << ck.status().message();
  {  // shards are files of the directory itself
    std::ofstream(dir + "/model.safetensors.index.json")
        << R"({"weight_map":{"x":"s1.safetensors","y":"../s2.safetensors"}})";
  }
  ck = Checkpoint::Open(dir);
  ASSERT_FALSE(ck.ok());
  EXPECT_NE(ck.status().message().find("weight_map[y]: \"../s2.safetensors\" is not a file"),
            std::string::npos)
      << ck.status().message();
}

}  // namespace
}  // namespace epserve
