#include "kernels/grouped_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/matmul.h"
#include "kernels/matmul_i8.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/grouped_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// (foreach_target.h re-includes this file once per target; what follows comes after it.)
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/matmul_panel-inl.h"

HWY_BEFORE_NAMESPACE();
namespace epserve::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kTileI = 256;      // intermediate rows (of gate and up) per work item
constexpr int64_t kTileH = 256;      // hidden rows (of down) per work item
constexpr int64_t kChunkRows = 128;  // group rows multiplied per gate/up call (stack buffers)

// Work item `item` of a pass with tiles_per_group items per non-empty group, as (group, tile).
// Scans from the start: O(num_groups) once per thread chunk.
struct ItemCursor {
  int group;
  int64_t tile;
};
inline ItemCursor FindItem(const GroupedMlpArgs& a, int64_t tiles_per_group, int64_t item) {
  for (int g = 0; g < a.num_groups; ++g) {
    if (a.offsets[g + 1] == a.offsets[g]) continue;
    if (item < tiles_per_group) return {g, item};
    item -= tiles_per_group;
  }
  return {a.num_groups, 0};
}
inline void Advance(const GroupedMlpArgs& a, int64_t tiles_per_group, ItemCursor& c) {
  if (++c.tile < tiles_per_group) return;
  c.tile = 0;
  do {
    ++c.group;
  } while (c.group < a.num_groups && a.offsets[c.group + 1] == a.offsets[c.group]);
}

// h[r, i] = silu(g[r, i]) * u[r, i] for one tile (rows of `width` floats); with limit > 0 the
// SwiGLU clamp first: g <- min(g, limit), u <- clamp(u, -limit, limit).
void SiluMulTile(const float* g, const float* u, int64_t rows, int64_t width, int64_t src_stride,
                 float* h, int64_t h_stride, float limit) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  const bool clamp = limit > 0;
  const auto hi = hn::Set(df, limit), lo = hn::Set(df, -limit);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * src_stride;
    const float* ur = u + r * src_stride;
    float* hr = h + r * h_stride;
    int64_t i = 0;
    for (; i + N <= width; i += N) {
      auto gv = hn::LoadU(df, gr + i);
      auto uv = hn::LoadU(df, ur + i);
      if (clamp) {
        gv = hn::Min(gv, hi);
        uv = hn::Min(hn::Max(uv, lo), hi);
      }
      const auto silu = hn::Div(gv, hn::Add(one, hn::Exp(df, hn::Neg(gv))));
      hn::StoreU(hn::Mul(silu, uv), df, hr + i);
    }
    for (; i < width; ++i) {
      float gs = gr[i], us = ur[i];
      if (clamp) {
        gs = std::min(gs, limit);
        us = std::min(std::max(us, -limit), limit);
      }
      hr[i] = gs / (1.0f + std::exp(-gs)) * us;
    }
  }
}

// The rows of a small group copied once to vector-aligned storage, reused by all the group's
// work items a thread runs (the streaming kernel would otherwise copy them for every tile).
struct AlignedRows {
  static constexpr int64_t kFloats = kAlignedXFloats;
  HWY_ALIGN_MAX float v[kFloats];
  int group = -1;
  // Rows [row0, row0 + rows) of src (stride floats apart), or src itself when they don't fit.
  const float* Get(int g, const float* src, int64_t rows, int64_t width, int64_t* stride) {
    const int64_t padded = (width + 15) / 16 * 16;
    if (rows * padded > kFloats) return src;
    if (group != g) {
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(v + r * padded, src + r * *stride, width * sizeof(float));
      group = g;
    }
    *stride = padded;
    return v;
  }
};

void GateUpItems(const GroupedMlpArgs& a, int64_t hidden, int64_t inter, int64_t item_begin,
                 int64_t item_end) {
  const int64_t tiles = (inter + kTileI - 1) / kTileI;
  HWY_ALIGN_MAX float gate[kChunkRows * kTileI];
  HWY_ALIGN_MAX float up[kChunkRows * kTileI];
  AlignedRows xa;
  ItemCursor c = FindItem(a, tiles, item_begin);
  for (int64_t item = item_begin; item < item_end; ++item, Advance(a, tiles, c)) {
    const ExpertMlpWeights& w = a.experts[c.group];
    const int64_t row0 = a.offsets[c.group], rows = a.offsets[c.group + 1] - row0;
    const int64_t i0 = c.tile * kTileI, ti = std::min(kTileI, inter - i0);
    int64_t x_stride = hidden;
    const float* x = xa.Get(c.group, a.x + row0 * hidden, rows, hidden, &x_stride);
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
      const int64_t rc = std::min(kChunkRows, rows - r0);
      MatMulArgs m{.x = x + r0 * x_stride,
                   .x_stride = x_stride,
                   .num_rows = rc,
                   .w = w.gate.RowSlice(i0, ti),
                   .y = gate,
                   .y_stride = kTileI,
                   .compute = a.compute};
      GemmRows(m, 0, ti);
      m.w = w.up.RowSlice(i0, ti);
      m.y = up;
      GemmRows(m, 0, ti);
      SiluMulTile(gate, up, rc, ti, kTileI, a.h + (row0 + r0) * inter + i0, inter, a.swiglu_limit);
    }
  }
}

void DownItems(const GroupedMlpArgs& a, int64_t hidden, int64_t inter, int64_t item_begin,
               int64_t item_end) {
  const int64_t tiles = (hidden + kTileH - 1) / kTileH;
  AlignedRows ha;
  ItemCursor c = FindItem(a, tiles, item_begin);
  for (int64_t item = item_begin; item < item_end; ++item, Advance(a, tiles, c)) {
    const int64_t row0 = a.offsets[c.group], rows = a.offsets[c.group + 1] - row0;
    const int64_t h0 = c.tile * kTileH;
    int64_t h_stride = inter;
    const float* h = ha.Get(c.group, a.h + row0 * inter, rows, inter, &h_stride);
    const MatMulArgs m{.x = h,
                       .x_stride = h_stride,
                       .num_rows = rows,
                       .w = a.experts[c.group].down,
                       .y = a.out + row0 * hidden,
                       .y_stride = hidden,
                       .compute = a.compute};
    GemmRows(m, h0, std::min(hidden, h0 + kTileH));
  }
}

// The int8 passes (weights of kI8Packed): the same items, on the rows quantized once per pass.
void GateUpItemsI8(const GroupedMlpArgs& a, const QuantizedRowsView& qx, int64_t inter,
                   int64_t item_begin, int64_t item_end) {
  const int64_t tiles = (inter + kTileI - 1) / kTileI;
  HWY_ALIGN_MAX float gate[kChunkRows * kTileI];
  HWY_ALIGN_MAX float up[kChunkRows * kTileI];
  ItemCursor c = FindItem(a, tiles, item_begin);
  for (int64_t item = item_begin; item < item_end; ++item, Advance(a, tiles, c)) {
    const ExpertMlpWeights& w = a.experts[c.group];
    const int64_t row0 = a.offsets[c.group], rows = a.offsets[c.group + 1] - row0;
    const int64_t i0 = c.tile * kTileI, ti = std::min(kTileI, inter - i0);
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
      const int64_t rc = std::min(kChunkRows, rows - r0);
      // Each call prefetches the weights of the next: up after gate, then the next item's gate.
      const WeightView up_w = w.up.RowSlice(i0, ti);
      I8MatMulArgs m{.x = qx.Rows(row0 + r0, rc),
                     .w = w.gate.RowSlice(i0, ti),
                     .y = gate,
                     .y_stride = kTileI,
                     .next_weights = up_w.data};
      I8MatMulRows(m, 0, ti);
      m.w = up_w;
      m.y = up;
      m.next_weights = nullptr;
      if (item + 1 < item_end && r0 + kChunkRows >= rows) {
        ItemCursor n = c;
        Advance(a, tiles, n);
        if (n.group < a.num_groups)
          m.next_weights = a.experts[n.group].gate.RowSlice(n.tile * kTileI, 0).data;
      }
      I8MatMulRows(m, 0, ti);
      SiluMulTile(gate, up, rc, ti, kTileI, a.h + (row0 + r0) * inter + i0, inter, a.swiglu_limit);
    }
  }
}

void DownItemsI8(const GroupedMlpArgs& a, const QuantizedRowsView& qh, int64_t hidden,
                 int64_t item_begin, int64_t item_end) {
  const int64_t tiles = (hidden + kTileH - 1) / kTileH;
  ItemCursor c = FindItem(a, tiles, item_begin);
  for (int64_t item = item_begin; item < item_end; ++item, Advance(a, tiles, c)) {
    const int64_t row0 = a.offsets[c.group], rows = a.offsets[c.group + 1] - row0;
    const int64_t h0 = c.tile * kTileH;
    const void* next = nullptr;  // the next item's first down rows, prefetched at the end
    if (item + 1 < item_end) {
      ItemCursor n = c;
      Advance(a, tiles, n);
      if (n.group < a.num_groups) next = a.experts[n.group].down.RowSlice(n.tile * kTileH, 0).data;
    }
    I8MatMulRows({.x = qh.Rows(row0, rows),
                  .w = a.experts[c.group].down,
                  .y = a.out + row0 * hidden,
                  .y_stride = hidden,
                  .next_weights = next},
                 h0, std::min(hidden, h0 + kTileH));
  }
}

int64_t TileI() { return kTileI; }
int64_t TileH() { return kTileH; }

}  // namespace epserve::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace epserve::kernels {

HWY_EXPORT(GateUpItems);
HWY_EXPORT(DownItems);
HWY_EXPORT(GateUpItemsI8);
HWY_EXPORT(DownItemsI8);
HWY_EXPORT(TileI);
HWY_EXPORT(TileH);

namespace {
struct Dims {
  int64_t hidden = 0, inter = 0, active_groups = 0;
  bool int8 = false;  // every projection kI8Packed (else none is)
};
Dims GroupDims(const GroupedMlpArgs& a) {
  Dims d;
  for (int g = 0; g < a.num_groups; ++g) {
    if (a.offsets[g + 1] == a.offsets[g]) continue;
    CHECK(a.offsets[g + 1] > a.offsets[g]) << "offsets must be non-decreasing";
    const ExpertMlpWeights& w = a.experts[g];
    if (d.active_groups++ == 0) {
      d.hidden = w.gate.cols;
      d.inter = w.gate.rows;
      d.int8 = w.gate.dtype == DType::kI8Packed;
    }
    for (const WeightView* v : {&w.gate, &w.up, &w.down})
      CHECK((v->dtype == DType::kI8Packed) == d.int8)
          << "group " << g << " mixes int8 and other weights";
    CHECK(w.gate.cols == d.hidden && w.up.cols == d.hidden && w.down.rows == d.hidden)
        << "group " << g;
    CHECK(w.gate.rows == d.inter && w.up.rows == d.inter && w.down.cols == d.inter)
        << "group " << g;
  }
  return d;
}

void GroupedMlpI8(const GroupedMlpArgs& a, const Dims& d, ThreadPool& pool) {
  const int64_t tile_i = HWY_DYNAMIC_DISPATCH(TileI)(), tile_h = HWY_DYNAMIC_DISPATCH(TileH)();
  const int64_t rows = a.offsets[a.num_groups];
  // The caller's buffers, by reference: the workers read them.
  thread_local QuantizedRows per_thread_x, per_thread_h;
  QuantizedRows &qx = per_thread_x, &qh = per_thread_h;
  QuantizeRows(a.x, rows, d.hidden, d.hidden, qx, pool);
  const auto gate_up = HWY_DYNAMIC_DISPATCH(GateUpItemsI8);
  const QuantizedRowsView x = qx.View();
  pool.ParallelFor(d.active_groups * ((d.inter + tile_i - 1) / tile_i), 1,
                   [&](size_t b, size_t e, int) {
                     gate_up(a, x, d.inter, static_cast<int64_t>(b), static_cast<int64_t>(e));
                   });
  QuantizeRows(a.h, rows, d.inter, d.inter, qh, pool);
  const auto down = HWY_DYNAMIC_DISPATCH(DownItemsI8);
  const QuantizedRowsView h = qh.View();
  pool.ParallelFor(d.active_groups * ((d.hidden + tile_h - 1) / tile_h), 1,
                   [&](size_t b, size_t e, int) {
                     down(a, h, d.hidden, static_cast<int64_t>(b), static_cast<int64_t>(e));
                   });
}
}  // namespace

void GroupedMlp(const GroupedMlpArgs& a, ThreadPool& pool) {
  const Dims d = GroupDims(a);
  if (d.active_groups == 0) return;
  if (d.int8) return GroupedMlpI8(a, d, pool);
  const auto gate_up = HWY_DYNAMIC_DISPATCH(GateUpItems);
  const auto down = HWY_DYNAMIC_DISPATCH(DownItems);
  const int64_t tile_i = HWY_DYNAMIC_DISPATCH(TileI)(), tile_h = HWY_DYNAMIC_DISPATCH(TileH)();
  const int64_t gate_up_items = d.active_groups * ((d.inter + tile_i - 1) / tile_i);
  pool.ParallelFor(gate_up_items, 1, [&](size_t b, size_t e, int) {
    gate_up(a, d.hidden, d.inter, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
  const int64_t down_items = d.active_groups * ((d.hidden + tile_h - 1) / tile_h);
  pool.ParallelFor(down_items, 1, [&](size_t b, size_t e, int) {
    down(a, d.hidden, d.inter, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void GroupedMlpReference(const GroupedMlpArgs& a) {
  const Dims d = GroupDims(a);
  std::vector<float> g, u;
  for (int grp = 0; grp < a.num_groups; ++grp) {
    const int64_t row0 = a.offsets[grp], rows = a.offsets[grp + 1] - row0;
    if (rows == 0) continue;
    const ExpertMlpWeights& w = a.experts[grp];
    g.resize(rows * d.inter);
    u.resize(rows * d.inter);
    MatMulReference({.x = a.x + row0 * d.hidden,
                     .num_rows = rows,
                     .w = w.gate,
                     .y = g.data(),
                     .compute = a.compute});
    MatMulReference({.x = a.x + row0 * d.hidden,
                     .num_rows = rows,
                     .w = w.up,
                     .y = u.data(),
                     .compute = a.compute});
    float* h = a.h + row0 * d.inter;
    for (int64_t i = 0; i < rows * d.inter; ++i) {
      double gv = g[i], uv = u[i];
      if (a.swiglu_limit > 0) {
        gv = std::min(gv, double{a.swiglu_limit});
        uv = std::clamp(uv, -double{a.swiglu_limit}, double{a.swiglu_limit});
      }
      h[i] = static_cast<float>(gv / (1.0 + std::exp(-gv)) * uv);
    }
    MatMulReference({.x = h,
                     .num_rows = rows,
                     .w = w.down,
                     .y = a.out + row0 * d.hidden,
                     .compute = a.compute});
  }
}

}  // namespace epserve::kernels
#endif  // HWY_ONCE
