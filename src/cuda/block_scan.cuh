// A whole-block exclusive prefix sum over an array in shared memory, for the one-block
// bookkeeping kernels (moe_layout.cu's expert offsets, matmul.cu's grouped work items).
#pragma once

namespace epserve::cuda {

// Replaces s[0 .. n) (shared memory) by its exclusive prefix sums and returns the total, in
// every thread. Each thread sums a contiguous run of ceil(n / blockDim.x) values, the runs'
// sums are scanned across the block (warp shuffles, then the <= 32 warp totals), and each
// thread writes its run. Every thread of the block must call it; blockDim.x must be a multiple
// of 32. `warp_sums` is shared scratch of 32 values. Ends with a barrier.
template <typename T>
__device__ T BlockExclusiveScan(T* s, int n, T* warp_sums) {
  const int threads = static_cast<int>(blockDim.x);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32, num_warps = threads / 32;
  const int per = (n + threads - 1) / threads;
  const int begin = min(n, tid * per), end = min(n, begin + per);
  T run = 0;
  for (int i = begin; i < end; ++i) run += s[i];
  T inclusive = run;  // over the warp's runs up to this lane's
  for (int o = 1; o < 32; o <<= 1) {
    const T v = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
    if (lane >= o) inclusive += v;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    T w = lane < num_warps ? warp_sums[lane] : T{0};
    for (int o = 1; o < 32; o <<= 1) {
      const T v = __shfl_up_sync(0xFFFFFFFFu, w, o);
      if (lane >= o) w += v;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  T before = inclusive - run + (warp > 0 ? warp_sums[warp - 1] : T{0});
  for (int i = begin; i < end; ++i) {
    const T c = s[i];
    s[i] = before;
    before += c;
  }
  const T total = warp_sums[num_warps - 1];
  __syncthreads();
  return total;
}

}  // namespace epserve::cuda
