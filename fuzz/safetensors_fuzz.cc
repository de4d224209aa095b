// Fuzzes the safetensors reader (io/safetensors.h): the u64 header length, the header JSON and
// every tensor entry's dtype, shape and data_offsets. SafetensorsFile only opens paths (it maps
// the file), so each input goes through a scratch file.
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const epserve::fuzz::ScratchFile file("model.safetensors");
  auto opened = epserve::SafetensorsFile::Open(file.Write(epserve::fuzz::AsText(data, size)));
  if (!opened.ok()) return 0;
  // What Open promises: every tensor lies inside the file and has dtype x shape bytes.
  for (const auto& [name, t] : (*opened)->tensors()) {
    const size_t dtype_size = epserve::DTypeSize(t.dtype);
    if (t.num_bytes > size || t.num_bytes % dtype_size != 0 ||
        static_cast<int64_t>(t.num_bytes / dtype_size) != t.NumElements()) {
      std::fprintf(stderr, "tensor %s: %zu bytes for %s\n", name.c_str(), t.num_bytes,
                   t.ShapeString().c_str());
      std::abort();
    }
    if (t.num_bytes > 0) {
      volatile uint8_t first = t.data[0], last = t.data[t.num_bytes - 1];
      (void)first;
      (void)last;
    }
  }
  return 0;
}
