// A main() for a fuzz target outside libFuzzer: runs LLVMFuzzerTestOneInput once on every file
// named on the command line or found (recursively) in a named directory, so the normal build
// replays the seed corpora and the saved crash inputs as a CTest (fuzz.replay.<name>). A
// finding aborts the process, which fails the test; the file being run is printed first.
// Files whose name starts with '.' (.gitkeep) are not inputs. The first argument is the seed
// corpus: it must hold at least one input, or the replay would pass without testing anything
// (a moved or emptied corpus folder fails the test instead); later ones (saved findings) may
// be empty.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    return false;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replaying %s (%zu bytes)\n", path.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int num_run = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0)
          files.push_back(entry.path());
      }
      if (files.empty() && i == 1) {
        std::fprintf(stderr, "no inputs in the corpus %s: nothing would be replayed\n",
                     arg.c_str());
        return 1;
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(arg);
    }
    for (const auto& file : files) {
      if (!RunFile(file)) return 1;
      ++num_run;
    }
  }
  if (num_run == 0) {
    std::fprintf(stderr, "no inputs named: nothing was replayed\n");
    return 1;
  }
  std::printf("replayed %d inputs\n", num_run);
  return 0;
}
