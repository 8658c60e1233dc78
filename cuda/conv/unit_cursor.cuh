// The walk of the persistent halo conv kernels (conv/bsconv_strip_kernel.cuh,
// conv/bsconv_halo_ss_kernel.cuh): one CTA per SM takes a run of work units
// [first, end), a unit u being column group u % num_groups of row tile
// u / num_groups, and its loader runs one item ahead of its MMAs across units.
// This is the loader's cursor: item `item` of unit `unit`, the unit's union items
// (the conv's group tables, tap 0's) at `rows`. The runs have equal weight
// (balanced_unit_range below), and a CTA's units are consecutive groups of a tile,
// so a tile's pixels are read from HBM once and then hit in L2.
//
// (Dealt out round-robin, every 132nd unit, a CTA's units had to cycle through the
// groups, q = (u + tile) % num_groups: with q = u % num_groups every CTA met the same
// group each time and the CTAs of a narrow last group idled, 1.58x slower at density
// 1/8; benchmarks/NOTES.md, session 15. Runs of equal weight need neither.)
#pragma once

#include <cstdint>

#include "conv/tap_blocks.cuh"           // read_union_row
#include "matmul/bsmm_group_kernel.cuh"  // GroupParams

namespace jbs {

template <int P>
struct UnitCursor {
  const GroupParams& p;
  int taps;
  int64_t end;  // one past the CTA's last unit
  int64_t unit;
  int item = 0, items = 0;
  const int32_t* rows = nullptr;

  __device__ __forceinline__ UnitCursor(const GroupParams& params, int num_taps, int64_t first, int64_t last_plus_one)
      : p(params), taps(num_taps), end(last_plus_one), unit(first) {}

  __device__ __forceinline__ int group_of(int64_t u) const { return static_cast<int>(u % p.num_groups); }
  // Unit u's union items (tap 0's: the group's channel blocks); their rows at *rows_of.
  __device__ __forceinline__ int items_of(int64_t u, const int32_t** rows_of) const {
    const int q = group_of(u);
    const int beg = __ldg(p.group_offsets + q), stop = __ldg(p.group_offsets + q + 1);
    *rows_of = p.group_items + static_cast<int64_t>(beg) * (1 + P);
    return (stop - beg) / taps;
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
      ++unit;
      item = 0;
      if (unit >= end) return false;
      items = items_of(unit, &rows);
      on_unit(tile());
    }
    return true;
  }
};

// The CTA's units [*first, *end) of the walk over (tile, group) in that order, cut so
// that every CTA gets the same share of the weight, a unit weighing its group's items
// + 1 (its epilogue). Dealt out round-robin, the units left the busiest CTA with up to
// ~1.7x the mean items at density 1/8 (benchmarks/NOTES.md, session 17), and the
// kernel waits for it. Run by one warp, from the group offsets.
__device__ __forceinline__ void balanced_unit_range(const GroupParams& p, int taps, int64_t tiles, int lane,
                                                    int64_t* first, int64_t* end) {
  const int groups = p.num_groups;
  auto weight = [&](int group) {
    return group < groups ? (__ldg(p.group_offsets + group + 1) - __ldg(p.group_offsets + group)) / taps + 1 : 0;
  };
  int per_tile = 0;  // the weight of one tile's units
  for (int c0 = 0; c0 < groups; c0 += 32) per_tile += __reduce_add_sync(0xffffffffu, weight(c0 + lane));
  const int64_t total = tiles * per_tile;
  for (int e = 0; e < 2; ++e) {
    // The first unit whose weight prefix reaches ceil((blockIdx.x + e) * total / gridDim.x).
    const int64_t target = ((blockIdx.x + e) * total + gridDim.x - 1) / gridDim.x;
    const int64_t tile = target / per_tile;
    const int rest = static_cast<int>(target - tile * per_tile);
    int group = groups, run = 0;
    for (int c0 = 0; c0 < groups && group == groups; c0 += 32) {
      const int w = weight(c0 + lane);
      int incl = w;  // inclusive prefix over the lanes
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, incl, d);
        incl += lane >= d ? up : 0;
      }
      const unsigned reached = __ballot_sync(0xffffffffu, c0 + lane < groups && run + incl - w >= rest);
      if (reached != 0u) group = c0 + __ffs(reached) - 1;
      run += __shfl_sync(0xffffffffu, incl, 31);
    }
    const int64_t unit = tile * groups + group;
    (e == 0 ? *first : *end) = unit < tiles * groups ? unit : tiles * groups;
  }
}

}  // namespace jbs
