#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "placement/trace_io.h"

namespace epserve::placement {
namespace {

namespace fs = std::filesystem;

ModelShape SmallShape() {
  return ModelShape{.name = "small",
                    .num_experts = 8,
                    .top_k = 2,
                    .hidden_size = 16,
                    .moe_intermediate_size = 8,
                    .num_hidden_layers = 3,
                    .num_expert_groups = 1};
}

// A fresh, empty folder under the test temp dir.
std::string TempDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("placement_trace_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(TraceTest, AddTokenRejectsBadExperts) {
  Trace trace(SmallShape(), {1, 2}, GateWeights::kAbsent);
  const uint16_t good[] = {0, 1, 2, 3};
  const uint16_t out_of_range[] = {0, 8, 2, 3};
  const uint16_t repeated[] = {0, 1, 2, 2};
  EXPECT_TRUE(trace.AddToken(0, 0, good, nullptr).ok());
  EXPECT_FALSE(trace.AddToken(0, 1, out_of_range, nullptr).ok());
  EXPECT_FALSE(trace.AddToken(0, 1, repeated, nullptr).ok());
  ASSERT_EQ(trace.num_tokens(), 1);
  EXPECT_EQ(trace.Experts(1, 0)[0], 2);
  EXPECT_EQ(trace.LayerIndex(2), 1);
  EXPECT_EQ(trace.LayerIndex(5), -1);
}

TEST(TraceTest, NativeFormatRoundTripsWithWeights) {
  Trace trace(SmallShape(), {1, 3}, GateWeights::kRecorded);
  const uint16_t e0[] = {0, 1, 7, 6};
  const float w0[] = {0.5f, 0.25f, 0.75f, 0.125f};
  const uint16_t e1[] = {2, 3, 4, 5};
  const float w1[] = {1, 2, 3, 4};
  ASSERT_TRUE(trace.AddToken(5, 0, e0, w0).ok());
  ASSERT_TRUE(trace.AddToken(9, 3, e1, w1).ok());
  const std::string path = TempDir("native") + "/t.trace";
  ASSERT_TRUE(WriteTrace(trace, path).ok());
  StatusOr<Trace> back = ReadTrace(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->layer_ids(), (std::vector<int>{1, 3}));
  EXPECT_EQ(back->shape().hidden_size, 16);
  EXPECT_EQ(back->shape().name, "small");
  ASSERT_EQ(back->num_tokens(), 2);
  EXPECT_EQ(back->sequence_id(1), 9u);
  EXPECT_EQ(back->position(1), 3u);
  EXPECT_EQ(back->Experts(1, 0)[1], 6);
  EXPECT_FLOAT_EQ(back->Weights(1, 1)[0], 3.0f);

  // Cutting the file inside the last record is reported with its byte offset.
  fs::resize_file(path, fs::file_size(path) - 3);
  StatusOr<Trace> cut = ReadTrace(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find(path + ": byte "), std::string::npos)
      << cut.status().message();
}

TEST(TraceTest, NativeFormatRejectsForeignFile) {
  const std::string path = TempDir("foreign") + "/x.trace";
  WriteText(path, "hello\n");
  StatusOr<Trace> t = ReadTrace(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(path + ":1:"), std::string::npos);
}

constexpr char kHeader[] = "Layer ID,Batch Number,Token,Activated Expert IDs\n";

TEST(TraceTest, ImportsCsvInPromptOrderWithQuotedTokens) {
  const std::string dir = TempDir("csv");
  // prompt_10 must come after prompt_2 although it sorts first as text.
  WriteText(dir + "/prompt_10_data.csv", std::string(kHeader) +
                                             "1,0,\",\",\"[4, 5]\"\n"
                                             "2,0,\",\",\"[6, 7]\"\n");
  WriteText(dir + "/prompt_2_data.csv", std::string(kHeader) +
                                            "1,0,\"\"\"\",\"[1, 0]\"\n"
                                            "1,0,Ġgood,\"[2, 3]\"\n"
                                            "2,0,\"\"\"\",\"[3, 2]\"\n"
                                            "2,0,Ġgood,\"[0, 7]\"\n");
  TraceImportOptions options{.shape = SmallShape()};
  StatusOr<Trace> trace = ImportCsvTrace({dir}, options);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  ASSERT_EQ(trace->num_tokens(), 3);
  EXPECT_EQ(trace->layer_ids(), (std::vector<int>{1, 2}));
  EXPECT_EQ(trace->sequence_id(0), 0u);  // prompt_2
  EXPECT_EQ(trace->sequence_id(2), 1u);  // prompt_10
  EXPECT_EQ(trace->position(1), 1u);
  EXPECT_EQ(trace->Experts(0, 0)[0], 1);  // gate order kept
  EXPECT_EQ(trace->Experts(1, 1)[1], 7);
  EXPECT_EQ(trace->Experts(1, 2)[0], 6);
}

TEST(TraceTest, CsvInfersExpertCountWhenAskedTo) {
  const std::string dir = TempDir("csv_infer");
  WriteText(dir + "/p.csv", std::string(kHeader) + "1,0,a,\"[4, 11, 2]\"\n");
  ModelShape shape = SmallShape();
  shape.num_experts = 0;
  shape.top_k = 0;
  StatusOr<Trace> trace = ImportCsvTrace({dir + "/p.csv"}, TraceImportOptions{.shape = shape});
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  EXPECT_EQ(trace->shape().num_experts, 12);
  EXPECT_EQ(trace->top_k(), 3);
}

TEST(TraceTest, CsvErrorsNameFileAndLine) {
  const std::string dir = TempDir("csv_bad");
  TraceImportOptions options{.shape = SmallShape()};
  struct Case {
    std::string text;
    std::string where;
  } cases[] = {
      {"Layer,Batch\n", ":1:"},
      {std::string(kHeader) + "1,0,a,\"[1, 2]\"\n1,0,b,\"[1, x]\"\n", ":3:"},
      {std::string(kHeader) + "1,0,a,\"[1, 2]\"\n1,0,b,\"[1, 9]\"\n", ":3:"},
      {std::string(kHeader) + "1,0,a,\"[1, 2, 3]\"\n", ":2:"},
      {std::string(kHeader) + "1,0,a,\"[1, 1]\"\n", ":2:"},
      {std::string(kHeader) + "1,0,a,\"[1, 2]\"\n1,0,b,\"[1, 2]\"\n2,0,a,\"[1, 2]\"\n", ":4:"},
      {std::string(kHeader) + "1,0,a\n", ":2:"},
      {std::string(kHeader) + "1,0,\"a,\"[1, 2]\"\n", ":2:"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/bad.csv";
    WriteText(path, c.text);
    StatusOr<Trace> t = ImportCsvTrace({path}, options);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(path + c.where), std::string::npos)
        << c.text << " -> " << t.status().message();
  }
}

TEST(TraceTest, ImportsJsonlAndNamesBadLines) {
  const std::string dir = TempDir("jsonl");
  const std::string path = dir + "/t.jsonl";
  WriteText(path,
            "{\"layer\":2,\"token\":0,\"experts\":[1,2],\"weights\":[0.6,0.4],\"sequence\":3}\n"
            "{\"layer\":1,\"token\":0,\"experts\":[3,4],\"weights\":[0.5,0.5],\"sequence\":3}\n"
            "\n"
            "{\"layer\":1,\"token\":1,\"experts\":[5,6],\"weights\":[0.9,0.1],\"sequence\":3}\n"
            "{\"layer\":2,\"token\":1,\"experts\":[7,0],\"weights\":[0.8,0.2],\"sequence\":3}\n");
  TraceImportOptions options{.shape = SmallShape()};
  StatusOr<Trace> trace = ImportJsonlTrace(path, options);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  ASSERT_EQ(trace->num_tokens(), 2);
  EXPECT_TRUE(trace->has_weights());
  EXPECT_EQ(trace->Experts(0, 0)[0], 3);  // layer 1 of token 0
  EXPECT_EQ(trace->Experts(1, 1)[0], 7);
  EXPECT_FLOAT_EQ(trace->Weights(1, 0)[0], 0.6f);
  EXPECT_EQ(trace->position(1), 1u);

  WriteText(path,
            "{\"layer\":1,\"token\":0,\"experts\":[1,2]}\n"
            "{\"layer\":2,\"token\":0,\"experts\":[1,2]}\n"
            "{\"layer\":1,\"token\":1,\"experts\":[1,2]}\n");
  StatusOr<Trace> missing = ImportJsonlTrace(path, options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path + ":3:"), std::string::npos)
      << missing.status().message();

  WriteText(path, "{\"layer\":1,\"token\":0,\"experts\":[1,2]}\n{\"layer\":1,\n");
  StatusOr<Trace> broken = ImportJsonlTrace(path, options);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find(path + ":2:"), std::string::npos);
}

TEST(TraceTest, SplitKeepsWholeSequences) {
  Trace trace(SmallShape(), {1}, GateWeights::kAbsent);
  const uint16_t e[] = {0, 1};
  for (uint32_t s : {7u, 7u, 3u, 9u, 9u, 9u, 1u})
    ASSERT_TRUE(trace.AddToken(s, 0, e, nullptr).ok());
  StatusOr<TraceSplit> split = SplitTrace(trace, 0.5);
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->profile.SequenceOrder(), (std::vector<uint32_t>{7, 3}));
  EXPECT_EQ(split->holdout.SequenceOrder(), (std::vector<uint32_t>{9, 1}));
  EXPECT_EQ(split->holdout.num_tokens(), 4);
  EXPECT_FALSE(SplitTrace(trace, 1.0).ok());
  EXPECT_FALSE(SplitTrace(trace, 0.01).ok());
}

}  // namespace
}  // namespace epserve::placement
