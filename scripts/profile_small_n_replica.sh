#!/usr/bin/env bash
# Nsight Compute on the small-N replica's persistent walk with and without its activation tiles
# (benchmarks/microbench/seed_stream.cu, argv "profile": bf16, N = 32, 12288^2, bs 32, density
# 1/2), one launch each: where the tiles' per-item cost goes (benchmarks/NOTES.md, session 41,
# point 4). Run on the GPU machine from the repository root; reports land in $OUT (or ./gpu_out).
# The demangled names read "seed_stream<__nv_bfloat16, (int)8, (int)5, (bool)1, (int)X, (int)W,
# (bool)1>" with X = 1 (row-major tiles), 0 (none) or 4 (tile-major tiles by swizzled TMA copies)
# and W = 1 (bulk-copied weights) or 2 (swizzled TMA copies; session 42); the regex matches the
# parentheses with '.'. PAIRS="X.W ..." picks the walks (default: 1.1 0.1 4.2).
set -uo pipefail
out=${OUT:-$(pwd)/gpu_out}
mkdir -p "$out"
nvcc -O3 -lineinfo -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -o /tmp/seed_stream_profile benchmarks/microbench/seed_stream.cu || exit 1
for xw in ${PAIRS:-1.1 0.1 4.2}; do
  x=${xw%.*} w=${xw#*.}
  timeout "${STEP_TIMEOUT:-120}" ncu --clock-control none --kernel-name-base demangled \
    -k "regex:seed_stream<.*.bool.1, .int.$x, .int.$w, .bool.1>" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    /tmp/seed_stream_profile profile > "$out/ncu_replica_x${x}_w$w.txt" 2>&1
  echo "x$x w$w: rc $?, $(grep -c 'Section:' "$out/ncu_replica_x${x}_w$w.txt") sections"
done
