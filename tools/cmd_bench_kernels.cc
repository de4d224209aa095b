// `epserve bench kernels`: achieved GB/s of each kernel and shape against the streaming-read
// bandwidth measured in the same run, and GFLOP/s of prefill matmuls against OpenBLAS sgemm on
// the same dequantized matrices. Fields are documented in docs/benchmarks.md.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "kernels/kernel_bench.h"
#include "tools/command.h"
#include "tools/flag_checks.h"

namespace epserve::tools {

namespace {

struct KernelFlags {
  int threads = 0;
  int repeats = 10;
  double decode_mib = 64;
  double bw_gib = 0.5;
  bool quick = false;
  bool json = false;
};

void PrintTable(const kernels::KernelBenchResult& r) {
  std::printf("threads: %d, SIMD target: %s\n", r.threads, r.simd_target.c_str());
  std::printf("measured bandwidth: streaming read %.2f GB/s, STREAM triad %.2f GB/s\n",
              r.bandwidth.read_gbps, r.bandwidth.triad_gbps);
  std::printf("%-19s %-5s %-58s %9s %8s %8s %9s %9s %8s\n", "kernel", "dtype", "shape", "ms",
              "GB/s", "of read", "GFLOP/s", "BLAS", "of BLAS");
  for (const auto& row : r.rows) {
    const bool compute = row.regime == "compute";
    std::printf("%-19s %-5s %-58s %9.3f %8.2f %7.1f%% %9.1f", row.kernel.c_str(), row.dtype.c_str(),
                row.shape.c_str(), row.seconds * 1e3, row.gbps,
                100 * row.fraction_of_read_bandwidth, row.gflops);
    if (compute) {
      std::printf(" %9.1f %7.1f%%\n", row.blas_gflops, 100 * row.fraction_of_blas);
    } else {
      std::printf(" %9s %8s\n", "-", "-");
    }
  }
}

void PrintJson(const kernels::KernelBenchResult& r) {
  nlohmann::ordered_json j;
  j["threads"] = r.threads;
  j["simd_target"] = r.simd_target;
  j["read_bandwidth_gbps"] = r.bandwidth.read_gbps;
  j["triad_bandwidth_gbps"] = r.bandwidth.triad_gbps;
  j["rows"] = nlohmann::ordered_json::array();
  for (const auto& row : r.rows) {
    j["rows"].push_back({{"kernel", row.kernel},
                         {"dtype", row.dtype},
                         {"shape", row.shape},
                         {"regime", row.regime},
                         {"bytes", row.bytes},
                         {"flops", row.flops},
                         {"seconds", row.seconds},
                         {"gbps", row.gbps},
                         {"fraction_of_read_bandwidth", row.fraction_of_read_bandwidth},
                         {"gflops", row.gflops},
                         {"blas_gflops", row.blas_gflops},
                         {"fraction_of_blas", row.fraction_of_blas}});
  }
  std::printf("%s\n", j.dump(2).c_str());
}

}  // namespace

void AddBenchKernelsCommand(CLI::App* bench, CommandContext& ctx) {
  auto f = std::make_shared<KernelFlags>();
  CLI::App* cmd = bench->add_subcommand(
      "kernels",
      "Per kernel and shape: achieved GB/s against this machine's streaming-read bandwidth "
      "measured\n"
      "in the same run, and for prefill matmuls GFLOP/s against OpenBLAS sgemm on the same\n"
      "dequantized matrices. Allocates about 1 GB.");
  cmd->add_option("--threads", f->threads, "worker threads (0: all cores)")->check(ThreadCount());
  cmd->add_option("--repeats", f->repeats, "runs per measurement; the best is reported")
      ->check(IntRange(1, 100000))
      ->capture_default_str();
  cmd->add_option("--decode-mib", f->decode_mib, "size of the decode matmul weights, MiB")
      ->check(RealRange(1, 65536))
      ->capture_default_str();
  cmd->add_option("--bandwidth-gib", f->bw_gib, "buffer size of the bandwidth probe, GiB")
      ->check(RealRange(0.001, 1024))
      ->capture_default_str();
  cmd->add_flag("--quick", f->quick,
                "small shapes and 2 repeats (a smoke run; numbers are not meaningful)");
  cmd->add_flag("--json", f->json, "print one JSON object instead of the table");
  cmd->callback([f, &ctx] {
    if (f->repeats < 1 || f->decode_mib <= 0 || f->bw_gib <= 0) {
      ReportError(ctx, "--repeats, --decode-mib and --bandwidth-gib must be positive");
      return;
    }
    ThreadPool pool(f->threads > 0 ? f->threads : ThreadPool::DefaultThreads());
    const kernels::KernelBenchResult r = kernels::RunKernelBench(
        {.decode_weight_bytes = static_cast<int64_t>(f->decode_mib * (1 << 20)),
         .repeats = f->repeats,
         .bandwidth_gib = f->quick ? 0.125 : f->bw_gib,
         .quick = f->quick},
        pool);
    if (f->json) {
      PrintJson(r);
    } else {
      PrintTable(r);
    }
  });
}

}  // namespace epserve::tools
