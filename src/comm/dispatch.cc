#include "comm/dispatch.h"

#include <cstring>

#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/quant_silu.h"

namespace epserve::comm {

namespace {
int64_t RoundUp8(int64_t x) { return (x + 7) / 8 * 8; }
}  // namespace

Dispatcher::Dispatcher(Communicator& comm, std::vector<int> node_of_rank,
                       const DispatchOptions& options)
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

Status Dispatcher::StartDispatch(const DispatchInput& in, DispatchHandle* h) {
  if (h->pending_)
    return Status::Internal("dispatch: the handle's previous exchange is still in flight");
  DispatchHandle& hd = *h;
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  hd.num_tokens_ = in.num_tokens;
  hd.input_ = in;
  hd.sent_tokens_.assign(P, {});
  // Layout: each token once per destination rank.
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    for (int k = 0; k < K; ++k) {
      const int d = in.dest_rank[t * K + k];
      if (d < 0 || d >= P)
        return Status::Internal("dispatch: destination rank " + std::to_string(d) +
                                " out of range");
      if (hd.sent_tokens_[d].empty() || hd.sent_tokens_[d].back() != t)
        hd.sent_tokens_[d].push_back(t);
    }
  }
  hd.send_rows_.assign(P, 0);
  for (int p = 0; p < P; ++p) hd.send_rows_[p] = static_cast<int64_t>(hd.sent_tokens_[p].size());
  hd.recv_rows_.assign(P, 0);
  if (opt_.mode == A2aMode::kPadded) {
    // The old way: agree on the largest batch, then every block has room for all of it.
    int64_t m = in.num_tokens;
    RETURN_IF_ERROR(comm_.AllReduceMax(&m, 1));
    hd.capacity_ = m;
    hd.recv_rows_.assign(P,
                         hd.capacity_);  // receivers learn the real rows from the padding markers
  } else {
    RETURN_IF_ERROR(comm_.AllToAll(hd.send_rows_.data(), hd.recv_rows_.data()));
  }
  const std::vector<int64_t>& block_rows =
      opt_.mode == A2aMode::kPadded ? std::vector<int64_t>(P, hd.capacity_) : hd.send_rows_;
  hd.sc_.assign(P, 0), hd.sd_.assign(P, 0), hd.rc_.assign(P, 0), hd.rd_.assign(P, 0);
  int64_t st = 0, rt = 0;
  for (int p = 0; p < P; ++p) {
    hd.sc_[p] = block_rows[p] * row_bytes_;
    hd.sd_[p] = st;
    st += hd.sc_[p];
    hd.rc_[p] = hd.recv_rows_[p] * row_bytes_;
    hd.rd_[p] = rt;
    rt += hd.rc_[p];
  }
  hd.send_buf_.assign(st, 0);
  hd.recv_buf_.assign(rt, 0);
  const int64_t nb = kernels::Fp8ScaleCount(H);
  for (int p = 0; p < P; ++p) {
    uint8_t* rec = hd.send_buf_.data() + hd.sd_[p];
    for (int64_t t : hd.sent_tokens_[p]) {
      kernels::QuantizeBlocksFp8(in.x + t * H, H, rec, reinterpret_cast<float*>(rec + H),
                                 opt_.ue8m0_scales);
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
    for (int64_t r = hd.send_rows_[p]; r < block_rows[p]; ++r, rec += row_bytes_) {
      int32_t* ids = reinterpret_cast<int32_t*>(rec + H + 4 * nb);
      for (int k = 0; k < K; ++k) ids[k] = -1;
    }
  }
  CountTraffic(hd.send_rows_, hd.sc_, &hd.dispatch_stats_);
  ASSIGN_OR_RETURN(hd.pending_,
                   comm_.StartAllToAllV(hd.send_buf_.data(), hd.sc_.data(), hd.sd_.data(),
                                        hd.recv_buf_.data(), hd.rc_.data(), hd.rd_.data()));
  return Status::Ok();
}

Status Dispatcher::FinishDispatch(DispatchHandle* h, ReceivedRows* out) {
  DispatchHandle& hd = *h;
  RETURN_IF_ERROR(comm_.Wait(std::move(hd.pending_), "dispatch"));
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  const int64_t nb = kernels::Fp8ScaleCount(H);
  int64_t total = 0;
  for (int p = 0; p < P; ++p) total += hd.recv_rows_[p];
  out->num_rows = total;
  out->num_real_rows = 0;
  out->x.resize(total * H);
  out->expert_ids.resize(total * K);
  out->weights.resize(total * K);
  out->rows_from = hd.recv_rows_;
  hd.recv_pairs_.assign(P, 0);
  for (int64_t r = 0, p = 0, end = hd.recv_rows_[0]; r < total; ++r) {
    while (r >= end) end += hd.recv_rows_[++p];
    const uint8_t* rec = hd.recv_buf_.data() + r * row_bytes_;
    const int32_t* ids = reinterpret_cast<const int32_t*>(rec + H + 4 * nb);
    const float* ws = reinterpret_cast<const float*>(ids + K);
    std::memcpy(&out->expert_ids[r * K], ids, K * 4);
    std::memcpy(&out->weights[r * K], ws, K * 4);
    bool any = false;
    for (int k = 0; k < K; ++k) {
      any |= ids[k] >= 0;
      hd.recv_pairs_[p] += ids[k] >= 0 ? 1 : 0;
    }
    out->num_real_rows += any ? 1 : 0;
    if (any)
      kernels::DequantizeRowFp8(rec, reinterpret_cast<const float*>(rec + H), H, &out->x[r * H]);
    else
      std::memset(&out->x[r * H], 0, H * sizeof(float));
  }
  return Status::Ok();
}

Status Dispatcher::StartCombine(DispatchHandle* h, const float* y) {
  DispatchHandle& hd = *h;
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  const int64_t rb = static_cast<int64_t>(H) * sizeof(float);
  // Mirror of dispatch: each served (token, expert) pair goes back to the token's origin.
  // Padded mode keeps its fixed blocks: capacity x top_k rows per peer.
  const bool padded = opt_.mode == A2aMode::kPadded;
  std::vector<int64_t> back_pairs(P, 0);  // pairs each origin gets back from p
  for (int p = 0; p < P; ++p)
    for (int64_t t : hd.sent_tokens_[p])
      for (int k = 0; k < K; ++k) back_pairs[p] += hd.input_.dest_rank[t * K + k] == p ? 1 : 0;
  int64_t s = 0, r = 0;
  for (int p = 0; p < P; ++p) {
    hd.sc_[p] = (padded ? hd.capacity_ * K : hd.recv_pairs_[p]) * rb;
    hd.sd_[p] = s;
    s += hd.sc_[p];
    hd.rc_[p] = (padded ? hd.capacity_ * K : back_pairs[p]) * rb;
    hd.rd_[p] = r;
    r += hd.rc_[p];
  }
  hd.send_buf_.assign(s, 0);
  // y is packed source by source; in padded mode each source's block is padded to its capacity.
  int64_t y_off = 0;
  for (int p = 0; p < P; ++p) {
    const int64_t bytes = hd.recv_pairs_[p] * rb;
    if (bytes)
      std::memcpy(hd.send_buf_.data() + hd.sd_[p], reinterpret_cast<const uint8_t*>(y) + y_off,
                  bytes);
    y_off += bytes;
  }
  hd.recv_buf_.assign(r, 0);
  CountTraffic(hd.recv_pairs_, hd.sc_, &hd.combine_stats_);
  ASSIGN_OR_RETURN(hd.pending_,
                   comm_.StartAllToAllV(hd.send_buf_.data(), hd.sc_.data(), hd.sd_.data(),
                                        hd.recv_buf_.data(), hd.rc_.data(), hd.rd_.data()));
  return Status::Ok();
}

Status Dispatcher::FinishCombine(DispatchHandle* h, float* out) {
  DispatchHandle& hd = *h;
  RETURN_IF_ERROR(comm_.Wait(std::move(hd.pending_), "combine"));
  const int P = comm_.size(), K = opt_.top_k, H = opt_.hidden;
  // Where each (token, k) output landed, then the weighted sum in slot order.
  std::vector<const float*> row_of(hd.num_tokens_ * K, nullptr);
  for (int p = 0; p < P; ++p) {
    const float* rows = reinterpret_cast<const float*>(hd.recv_buf_.data() + hd.rd_[p]);
    int64_t i = 0;
    for (int64_t t : hd.sent_tokens_[p])
      for (int k = 0; k < K; ++k)
        if (hd.input_.dest_rank[t * K + k] == p) row_of[t * K + k] = rows + (i++) * H;
  }
  for (int64_t t = 0; t < hd.num_tokens_; ++t)
    for (int k = 0; k < K; ++k)
      kernels::Axpy(hd.input_.weights[t * K + k], row_of[t * K + k], H, out + t * H);
  return Status::Ok();
}

Status Dispatcher::Progress(DispatchHandle* h) {
  if (!h->pending_) return Status::Ok();
  return comm_.Test(*h->pending_, "dispatch/combine progress").status();
}

}  // namespace epserve::comm
