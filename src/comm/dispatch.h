// Dispatch / combine for expert parallelism (SPEC §4), in the three-phase shape of DeepEP:
// the caller decides each (token, k)'s destination rank (placement + routing), then
//   StartDispatch  - counts exchanged (one int64 per peer), then only real rows are sent:
//                    each token ONCE per destination rank (not once per expert), FP8 e4m3 with
//                    one fp32 scale per 128 values, with its (expert, weight) slots for that rank
//   FinishDispatch - waits; rows arrive grouped by source rank, dequantized to float32
//   StartCombine   - sends each expert's output row back to its origin (float32, one row per
//                    (token, expert) pair served here)
//   FinishCombine  - waits; the origin forms out[t] += sum_k w[t,k] * y[t,k] in slot order k,
//                    exactly as a single process does, so results do not depend on placement
//                    (a receiver-side partial sum per (token, rank) would save combine bytes but
//                    make the rounding depend on which ranks hold which experts)
// Ranks with zero tokens take part as usual. A2aMode::kPadded is the old approach kept as a
// baseline: an all-reduce of the batch size, every block padded to the largest batch, a dense
// equal-size all-to-all.
// Thread safety: one thread per Dispatcher; any number of handles in flight, each used in order.
// Every rank must start and finish its handles' exchanges in the same order (they are
// collectives of one communicator).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "comm/communicator.h"

namespace epserve::comm {

enum class A2aMode { kSparse, kPadded };

struct DispatchOptions {
  int hidden = 0;
  int top_k = 0;
  A2aMode mode = A2aMode::kSparse;
  // FP8 rows with power-of-two (UE8M0) scales, as DeepSeek's act_quant makes them for a model
  // whose config says quantization_config.scale_fmt "ue8m0" (V3.1 and later).
  bool ue8m0_scales = false;
};

struct DispatchInput {
  int64_t num_tokens = 0;
  const float* x = nullptr;             // [num_tokens, hidden]
  const int32_t* expert_ids = nullptr;  // [num_tokens, top_k] global expert ids
  const float* weights = nullptr;       // [num_tokens, top_k]; must stay valid until FinishCombine
  const int32_t* dest_rank = nullptr;   // [num_tokens, top_k] rank serving each (token, k)
};

struct ReceivedRows {
  int64_t num_rows = 0;             // padding rows included (padded mode)
  int64_t num_real_rows = 0;        // rows carrying at least one expert
  std::vector<float> x;             // [num_rows, hidden], dequantized
  std::vector<int32_t> expert_ids;  // [num_rows, top_k], -1 in unused slots
  std::vector<float> weights;       // [num_rows, top_k]
  std::vector<int64_t> rows_from;   // [ranks] rows received from each source
};

// Traffic of the last dispatch (combine mirrors it), counted from the sender's side.
struct TrafficStats {
  int64_t rows_self = 0, rows_node = 0, rows_remote = 0;     // real rows by destination
  int64_t bytes_self = 0, bytes_node = 0, bytes_remote = 0;  // bytes on the wire, padding included
};

// The state of one dispatch/combine round trip: the layout of its tokens, its buffers, its
// pending transfer and its traffic (DeepEP's handle: dispatch fills it, combine consumes it).
// Two handles let two micro-batches have their exchanges in flight at once; a handle is reused
// layer after layer. Calls on one handle go StartDispatch -> FinishDispatch -> StartCombine ->
// FinishCombine, with Progress anywhere in between.
class DispatchHandle {
 public:
  // Traffic of the handle's last dispatch and combine, counted from the sender's side.
  const TrafficStats& dispatch_stats() const { return dispatch_stats_; }
  const TrafficStats& combine_stats() const { return combine_stats_; }
  bool in_flight() const { return pending_ != nullptr; }

 private:
  friend class Dispatcher;
  int64_t num_tokens_ = 0;
  int64_t capacity_ = 0;  // padded mode: rows per block
  // Per destination: the tokens sent there, in order.
  std::vector<std::vector<int64_t>> sent_tokens_;
  std::vector<int64_t> send_rows_, recv_rows_;
  std::vector<int64_t> recv_pairs_;  // valid (row, slot) pairs received from each source
  DispatchInput input_;
  std::vector<uint8_t> send_buf_, recv_buf_;
  std::vector<int64_t> sc_, sd_, rc_, rd_;
  std::unique_ptr<Request> pending_;
  TrafficStats dispatch_stats_, combine_stats_;
};

class Dispatcher {
 public:
  // node_of_rank: machine index of every rank of comm.
  Dispatcher(Communicator& comm, std::vector<int> node_of_rank, const DispatchOptions& options);

  Status StartDispatch(const DispatchInput& input, DispatchHandle* handle);
  Status FinishDispatch(DispatchHandle* handle, ReceivedRows* out);
  // y: one row per valid (received row, slot) pair, in row-major (row, slot) order.
  Status StartCombine(DispatchHandle* handle, const float* y);
  Status FinishCombine(DispatchHandle* handle, float* out);
  // Moves the handle's transfer forward, if one is in flight; never blocks.
  Status Progress(DispatchHandle* handle);

  int64_t dispatch_row_bytes() const { return row_bytes_; }
  int rank() const { return comm_.rank(); }
  Communicator& communicator() const { return comm_; }

 private:
  void CountTraffic(const std::vector<int64_t>& rows, const std::vector<int64_t>& bytes,
                    TrafficStats* s) const;

  Communicator& comm_;
  std::vector<int> node_of_;
  DispatchOptions opt_;
  int64_t row_bytes_;
};

}  // namespace epserve::comm
