// The walk of the persistent halo conv kernels (conv/bsconv_strip_kernel.cuh,
// conv/bsconv_halo_ss_kernel.cuh): one CTA per SM takes the work units
// blockIdx.x, + gridDim.x, ..., a unit being (row tile, column group), and its
// loader runs one item ahead of its MMAs across units. This is the loader's
// cursor: item `item` of unit `unit`, the unit's union items (the conv's group
// tables, tap 0's) at `rows`.
//
// Unit u is column group q of tile u / num_groups, with q = (u + tile) %
// num_groups: the groups of a tile run side by side (one HBM read of its pixels),
// and a CTA's units cycle through the groups. With q = u % num_groups a CTA met
// the same group every time (gridDim.x = 132, a multiple of 3 groups), and the
// CTAs of a narrow last group idled: 1.58x slower at density 1/8, 1.08x at 1/2
// (3x3, 320 channels; benchmarks/NOTES.md, session 15).
#pragma once

#include <cstdint>

#include "conv/tap_blocks.cuh"           // read_union_row
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

// CYCLE: unit u is group (u + tile) % num_groups of tile u / num_groups (above);
// otherwise group u % num_groups. The CTA walks units first, first + step, ... below end.
template <int P, bool CYCLE = true>
struct UnitCursor {
  const GroupParams& p;
  int taps;
  int64_t end, step;
  int64_t unit;
  int item = 0, items = 0;
  const int32_t* rows = nullptr;

  // Units blockIdx.x, + gridDim.x, ... below num_units.
  __device__ __forceinline__ UnitCursor(const GroupParams& params, int num_taps, int64_t num_units)
      : p(params), taps(num_taps), end(num_units), step(gridDim.x), unit(blockIdx.x) {}
  // Units first .. end - 1.
  __device__ __forceinline__ UnitCursor(const GroupParams& params, int num_taps, int64_t first, int64_t last_plus_one)
      : p(params), taps(num_taps), end(last_plus_one), step(1), unit(first) {}

  __device__ __forceinline__ int group_of(int64_t u) const {
    return static_cast<int>((CYCLE ? u + u / p.num_groups : u) % p.num_groups);
  }
  // Unit u's union items (tap 0's: the group's channel blocks); their rows at *rows_of.
  __device__ __forceinline__ int items_of(int64_t u, const int32_t** rows_of) const {
    const int q = group_of(u);
    const int beg = __ldg(p.group_offsets + q), end = __ldg(p.group_offsets + q + 1);
    *rows_of = p.group_items + static_cast<int64_t>(beg) * (1 + P);
    return (end - beg) / taps;
  }
  __device__ __forceinline__ int num_items(int64_t u) const {
    const int32_t* unused;
    return items_of(u, &unused);
  }
  __device__ __forceinline__ int64_t tile() const { return unit / p.num_groups; }
  // The cursor's table row.
  __device__ __forceinline__ void row(int (&r)[1 + P]) const { read_union_row<P>(rows, item, r); }

  // Enters the CTA's first unit, then as settle. on_unit(tile) runs for every unit entered.
  template <class OnUnit>
  __device__ __forceinline__ bool start(OnUnit on_unit) {
    if (unit >= end) return false;
    items = items_of(unit, &rows);
    on_unit(tile());
    return settle(on_unit);
  }
  // Moves past the current unit's last item and past units without items; false once
  // the CTA's units are done.
  template <class OnUnit>
  __device__ __forceinline__ bool settle(OnUnit on_unit) {
    while (item >= items) {
      unit += step;
      item = 0;
      if (unit >= end) return false;
      items = items_of(unit, &rows);
      on_unit(tile());
    }
    return true;
  }
};

}  // namespace jbs
