#include "comm/dispatch.h"

#include <cstring>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/quant_silu.h"

namespace epserve::comm {

namespace {
int64_t RoundUp8(int64_t x) { return (x + 7) / 8 * 8; }
}  // namespace

Dispatcher::Dispatcher(Communicator& comm, std::vector<int> node_of_rank, const DispatchOptions& options)
    : comm_(comm), node_of_(std::move(node_of_rank)), opt_(options) {
  // Row record: fp8 values | fp32 scales | top_k int32 expert ids | top_k fp32 weights.
  row_bytes_ = RoundUp8(opt_.hidden + 4 * kernels::Fp8ScaleCount(opt_.hidden) + 8 * opt_.top_k);
}

void Dispatcher::CountTraffic(const std::vector<int64_t>& rows, const std::vector<int64_t>& bytes,
                              TrafficStats* s) const {
  *s = TrafficStats{};
  const int me = comm_.rank();
  for (int p = 0; p < comm_.size(); ++p) {
    if (p == me) {
      s->rows_self += rows[p];
      s->bytes_self += bytes[p];
    } else if (node_of_[p] == node_of_[me]) {
      s->rows_node += rows[p];
      s->bytes_node += bytes[p];
    } else {
      s->rows_remote += rows[p];
      s->bytes_remote += bytes[p];
    }
  }
}

Status Dispatcher::StartDispatch(const DispatchInput& in) {
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  num_tokens_ = in.num_tokens;
  input_ = in;
  sent_tokens_.assign(P, {});
  // Layout: each token once per destination rank.
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    for (int k = 0; k < K; ++k) {
      const int d = in.dest_rank[t * K + k];
      if (d < 0 || d >= P) return Status::Internal("dispatch: destination rank " + std::to_string(d) + " out of range");
      if (sent_tokens_[d].empty() || sent_tokens_[d].back() != t) sent_tokens_[d].push_back(t);
    }
  }
  send_rows_.assign(P, 0);
  for (int p = 0; p < P; ++p) send_rows_[p] = static_cast<int64_t>(sent_tokens_[p].size());
  recv_rows_.assign(P, 0);
  if (opt_.mode == A2aMode::kPadded) {
    // The old way: agree on the largest batch, then every block has room for all of it.
    int64_t m = in.num_tokens;
    RETURN_IF_ERROR(comm_.AllReduceMax(&m, 1));
    capacity_ = m;
    recv_rows_.assign(P, capacity_);  // receivers learn the real rows from the padding markers
  } else {
    RETURN_IF_ERROR(comm_.AllToAll(send_rows_.data(), recv_rows_.data()));
  }
  const std::vector<int64_t>& block_rows = opt_.mode == A2aMode::kPadded ? std::vector<int64_t>(P, capacity_) : send_rows_;
  sc_.assign(P, 0), sd_.assign(P, 0), rc_.assign(P, 0), rd_.assign(P, 0);
  int64_t st = 0, rt = 0;
  for (int p = 0; p < P; ++p) {
    sc_[p] = block_rows[p] * row_bytes_;
    sd_[p] = st;
    st += sc_[p];
    rc_[p] = recv_rows_[p] * row_bytes_;
    rd_[p] = rt;
    rt += rc_[p];
  }
  send_buf_.assign(st, 0);
  recv_buf_.assign(rt, 0);
  const int64_t nb = kernels::Fp8ScaleCount(H);
  for (int p = 0; p < P; ++p) {
    uint8_t* rec = send_buf_.data() + sd_[p];
    for (int64_t t : sent_tokens_[p]) {
      kernels::QuantizeBlocksFp8(in.x + t * H, H, rec, reinterpret_cast<float*>(rec + H));
      int32_t* ids = reinterpret_cast<int32_t*>(rec + H + 4 * nb);
      float* ws = reinterpret_cast<float*>(ids + K);
      for (int k = 0; k < K; ++k) {
        const bool here = in.dest_rank[t * K + k] == p;
        ids[k] = here ? in.expert_ids[t * K + k] : -1;
        ws[k] = here ? in.weights[t * K + k] : 0.0f;
      }
      rec += row_bytes_;
    }
    // Padding rows (padded mode) carry no expert: all ids -1.
    for (int64_t r = send_rows_[p]; r < block_rows[p]; ++r, rec += row_bytes_) {
      int32_t* ids = reinterpret_cast<int32_t*>(rec + H + 4 * nb);
      for (int k = 0; k < K; ++k) ids[k] = -1;
    }
  }
  CountTraffic(send_rows_, sc_, &dispatch_stats_);
  ASSIGN_OR_RETURN(pending_, comm_.StartAllToAllV(send_buf_.data(), sc_.data(), sd_.data(), recv_buf_.data(),
                                                  rc_.data(), rd_.data()));
  return Status::Ok();
}

Status Dispatcher::FinishDispatch(ReceivedRows* out) {
  RETURN_IF_ERROR(comm_.Wait(std::move(pending_), "dispatch"));
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  const int64_t nb = kernels::Fp8ScaleCount(H);
  int64_t total = 0;
  for (int p = 0; p < P; ++p) total += recv_rows_[p];
  out->num_rows = total;
  out->num_real_rows = 0;
  out->x.resize(total * H);
  out->expert_ids.resize(total * K);
  out->weights.resize(total * K);
  out->rows_from = recv_rows_;
  real_recv_rows_.assign(P, 0);
  recv_pairs_.assign(P, 0);
  for (int64_t r = 0, p = 0, end = recv_rows_[0]; r < total; ++r) {
    while (r >= end) end += recv_rows_[++p];
    const uint8_t* rec = recv_buf_.data() + r * row_bytes_;
    const int32_t* ids = reinterpret_cast<const int32_t*>(rec + H + 4 * nb);
    const float* ws = reinterpret_cast<const float*>(ids + K);
    std::memcpy(&out->expert_ids[r * K], ids, K * 4);
    std::memcpy(&out->weights[r * K], ws, K * 4);
    bool any = false;
    for (int k = 0; k < K; ++k) {
      any |= ids[k] >= 0;
      recv_pairs_[p] += ids[k] >= 0 ? 1 : 0;
    }
    real_recv_rows_[p] += any ? 1 : 0;
    out->num_real_rows += any ? 1 : 0;
    if (any) kernels::DequantizeRowFp8(rec, reinterpret_cast<const float*>(rec + H), H, &out->x[r * H]);
    else std::memset(&out->x[r * H], 0, H * sizeof(float));
  }
  return Status::Ok();
}

Status Dispatcher::StartCombine(const float* y) {
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  const int64_t rb = static_cast<int64_t>(H) * sizeof(float);
  // Mirror of dispatch: each served (token, expert) pair goes back to the token's origin.
  // Padded mode keeps its fixed blocks: capacity x top_k rows per peer.
  const bool padded = opt_.mode == A2aMode::kPadded;
  std::vector<int64_t> back_pairs(P, 0);  // pairs each origin gets back from p
  for (int p = 0; p < P; ++p)
    for (int64_t t : sent_tokens_[p])
      for (int k = 0; k < K; ++k) back_pairs[p] += input_.dest_rank[t * K + k] == p ? 1 : 0;
  int64_t s = 0, r = 0;
  for (int p = 0; p < P; ++p) {
    sc_[p] = (padded ? capacity_ * K : recv_pairs_[p]) * rb;
    sd_[p] = s;
    s += sc_[p];
    rc_[p] = (padded ? capacity_ * K : back_pairs[p]) * rb;
    rd_[p] = r;
    r += rc_[p];
  }
  send_buf_.assign(s, 0);
  // y is packed source by source; in padded mode each source's block is padded to its capacity.
  int64_t y_off = 0;
  for (int p = 0; p < P; ++p) {
    const int64_t bytes = recv_pairs_[p] * rb;
    if (bytes) std::memcpy(send_buf_.data() + sd_[p], reinterpret_cast<const uint8_t*>(y) + y_off, bytes);
    y_off += bytes;
  }
  recv_buf_.assign(r, 0);
  CountTraffic(recv_pairs_, sc_, &combine_stats_);
  ASSIGN_OR_RETURN(pending_, comm_.StartAllToAllV(send_buf_.data(), sc_.data(), sd_.data(), recv_buf_.data(),
                                                  rc_.data(), rd_.data()));
  return Status::Ok();
}

Status Dispatcher::FinishCombine(float* out) {
  RETURN_IF_ERROR(comm_.Wait(std::move(pending_), "combine"));
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  // Where each (token, k) output landed, then the weighted sum in slot order.
  std::vector<const float*> row_of(num_tokens_ * K, nullptr);
  for (int p = 0; p < P; ++p) {
    const float* rows = reinterpret_cast<const float*>(recv_buf_.data() + rd_[p]);
    int64_t i = 0;
    for (int64_t t : sent_tokens_[p])
      for (int k = 0; k < K; ++k)
        if (input_.dest_rank[t * K + k] == p) row_of[t * K + k] = rows + (i++) * H;
  }
  for (int64_t t = 0; t < num_tokens_; ++t)
    for (int k = 0; k < K; ++k) kernels::Axpy(input_.weights[t * K + k], row_of[t * K + k], H, out + t * H);
  return Status::Ok();
}

}  // namespace epserve::comm
