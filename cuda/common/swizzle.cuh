// Where a TMA copy with a swizzle (CU_TENSOR_MAP_SWIZZLE_64B or _128B) puts a
// 16-byte chunk of a tile in shared memory.
//
// Why: a tile of 32-, 64- or 128-byte rows stored as it is puts the same chunk
// of 8 consecutive rows in the same banks (2, 4 and 8 ways), so every ldmatrix of
// it takes that many shared-memory wavefronts. A swizzle XORs the chunk index
// with address bits 7 and up, which spreads those rows over all banks.
#pragma once

namespace jbs {

// How a tile's elements are placed in shared memory, as the readers of matmul/warp_mma.cuh
// (A_SWIZZLE, B_SWIZZLE) and the writers that filled it agree: element (row, col) of a tile of
// `ld`-element rows sits at
enum TileSwizzle : int {
  kTilePlain = 0,             // row * ld + col
  kTileSwizzle128B = 1,       // byte offset swizzle_128b((row * ld + col) * sizeof(T)): TMA's
                              // SWIZZLE_128B from a 1024-byte-aligned tile, or cp.async placed so
  kTileSwizzleF32KMajor = 2,  // swizzle_f32_kmajor(row, col, ld): fp32 rows of 16 or 32 floats
  kTileSwizzle128BHalves = 3,  // as kTileSwizzle128B, for column halves_column(col) of 32-column rows
};

// The column that an MMA's column `col` of a 32-column operand reads when its 8-column n-tiles
// take 4 columns from each half of the row: n-tile t is columns 4t..4t+3 and 16+4t..16+4t+3.
// Why: a tf32 fragment of a k-major tile (matmul/warp_mma.cuh: 4 k-rows x 8 columns a load) of
// fp32 rows of 128 bytes under the 128-byte swizzle puts an n-tile of consecutive columns in 4
// chunks of 16 bytes, 2 ways each; columns 16 apart are 4 chunks apart and fill all 8. The
// accumulators' columns then come in the same order (an even col and col + 1 stay adjacent),
// and whoever stores them maps them back through this function.
__host__ __device__ __forceinline__ constexpr int halves_column(int col) {
  return (col & 4) ? 16 + ((col >> 3) << 2) + (col & 3) : ((col >> 3) << 2) + (col & 3);
}

// halves_column is a permutation of 0..31 that keeps each even column's odd neighbour next to it
// (an accumulator fragment's two columns are stored as a pair).
constexpr bool halves_column_keeps_pairs() {
  bool seen[32] = {};
  for (int col = 0; col < 32; ++col) {
    const int to = halves_column(col);
    if (to < 0 || to >= 32 || seen[to] || ((col & 1) && to != halves_column(col - 1) + 1)) return false;
    seen[to] = true;
  }
  return true;
}
static_assert(halves_column_keeps_pairs(), "halves_column: a permutation of 32 columns, pairs kept");

// Where byte `offset` of a tile of ROW_BYTES-byte rows (32, 64 or 128) lands when TMA writes
// it with the swizzle of that width (CU_TENSOR_MAP_SWIZZLE_32B / 64B / 128B) to an address
// aligned to the swizzle's span (256, 512 or 1024 bytes): the 16-byte chunk index is XORed with
// offset bits 7 and up, 1, 2 or 3 of them. Any 8 consecutive rows' same chunk then sits in 8
// different bank groups, for every width.
template <int ROW_BYTES>
__host__ __device__ __forceinline__ constexpr int swizzle_rows(int offset) {
  static_assert(ROW_BYTES == 32 || ROW_BYTES == 64 || ROW_BYTES == 128, "TMA swizzles rows of 32, 64 or 128 bytes");
  return offset ^ ((offset >> 3) & ((ROW_BYTES / 16 - 1) << 4));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of kRowBytes-byte rows
// that TMA wrote with the swizzle of its row width from a 1024-byte-aligned address:
// the chunk index is XORed with address bits 7-9 (128-byte rows: row % 8) or 7-8
// (64-byte rows: row / 2 % 4).
template <int kRowBytes>
__device__ __forceinline__ int tma_swizzled_offset(int row, int chunk) {
  static_assert(kRowBytes == 128 || kRowBytes == 64, "TMA swizzle of 128- or 64-byte rows");
  return swizzle_rows<kRowBytes>(row * kRowBytes + (chunk << 4));
}

// Where byte `offset` of a contiguous span lands when TMA copies the span as rows of
// 128 bytes with CU_TENSOR_MAP_SWIZZLE_128B into a 1024-byte-aligned address. A
// block of 32- or 64-byte rows (16-bit bs 16 / 32) copied that way keeps whole L2
// lines per request (a box of its own 32- or 64-byte rows would take one request per
// row), and any 8 consecutive rows' same chunk then sit in 8 different bank groups:
// ldmatrix reads it, either way round, without conflicts.
__device__ __forceinline__ int swizzle_128b(int offset) { return swizzle_rows<128>(offset); }

// Element offset of (row, col) in a tile of 32-float (128-byte) rows whose 16-byte chunks are
// XORed with 2 (row % 4), or of 16-float (64-byte) rows, two a line, whose chunks are XORed with
// row & 2. Why: a tf32 fragment read of a k-major tile (common/../matmul/warp_mma.cuh: 8 m's x
// 4 k's a load, rows k) then hits 32 distinct banks without the 8 floats of padding a row (40-
// or 24-float rows) that the fp32 small-N dw tiles had; a row's 16-byte writes stay whole and
// distinct. (swizzle_128b's XOR with row % 8 would leave the 32-float reads 2-way conflicted:
// rows k and k ^ 1 map a chunk pair onto itself.)
// row_floats: 16 or 32, the tile's width (its callers pass their row stride).
__device__ __forceinline__ int swizzle_f32_kmajor(int row, int col, int row_floats) {
  const int pattern = row_floats == 32 ? (row & 3) << 1 : (row & 2);
  return row * row_floats + (((col >> 2) ^ pattern) << 2) + (col & 3);
}

}  // namespace jbs
