#include "base/output_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace epserve {
namespace {

namespace fs = std::filesystem;

class OutputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("output_file_test." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  size_t NumFiles() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++n;
    return n;
  }
  fs::path dir_;
};

TEST_F(OutputFileTest, ReplacesWholeFileAndLeavesNoTemporary) {
  const std::string p = Path("out.json");
  std::ofstream(p) << "old contents, longer than the new ones";
  ASSERT_TRUE(WriteFileAtomically(p, "new").ok());
  EXPECT_EQ(Read(p), "new");
  EXPECT_EQ(NumFiles(), 1u);
}

TEST_F(OutputFileTest, MissingDirectoryNamesThePath) {
  const std::string p = Path("no/such/dir/out.json");
  Status st = WriteFileAtomically(p, "x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file or directory"), std::string::npos) << st.message();
}

TEST_F(OutputFileTest, FullDeviceIsAnError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  Status st = WriteFileAtomically("/dev/full", "tokens");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/dev/full: write failed: No space left on device"), std::string::npos)
      << st.message();
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
}

TEST_F(OutputFileTest, DevNullIsWrittenInPlace) {
  EXPECT_TRUE(WriteFileAtomically("/dev/null", "x").ok());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(OutputFileTest, UncommittedStreamLeavesTargetUntouched) {
  const std::string p = Path("trace.bin");
  std::ofstream(p) << "previous";
  {
    StatusOr<OutputFile> f = OutputFile::Create(p);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write("partial").ok());
  }
  EXPECT_EQ(Read(p), "previous");
  EXPECT_EQ(NumFiles(), 1u);
}

TEST_F(OutputFileTest, SameFileIsRefused) {
  const std::string p = Path("t.jsonl");
  std::ofstream(p) << "x";
  Status st = CheckNotSameFile("--out", p, "--trace", {Path("other"), p});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--out " + p + " is also an input (--trace); write elsewhere");
  // Another spelling of the same file.
  EXPECT_FALSE(CheckNotSameFile("--out", (dir_ / "." / "t.jsonl").string(), "--trace", {p}).ok());
  fs::create_symlink(p, Path("link"));
  EXPECT_FALSE(CheckNotSameFile("--out", Path("link"), "--trace", {p}).ok());
  // An output that does not exist yet is compared by name.
  EXPECT_FALSE(CheckNotSameFile("--out", Path("new"), "--trace", {(dir_ / "a/../new").string()}).ok());
  EXPECT_TRUE(CheckNotSameFile("--out", Path("new"), "--trace", {p}).ok());
  EXPECT_TRUE(CheckNotSameFile("--out", "", "--trace", {p}).ok());
}

}  // namespace
}  // namespace epserve
