#!/usr/bin/env bash
# Nsight Compute on the small-N replica's persistent walk with and without its activation tiles
# (benchmarks/microbench/seed_stream.cu, argv "profile": bf16, N = 32, 12288^2, bs 32, density
# 1/2), one launch each: where the tiles' per-item cost goes (benchmarks/NOTES.md, session 41,
# point 4). Run on the GPU machine from the repository root; reports land in $OUT (or ./gpu_out).
# The demangled names read "seed_stream<__nv_bfloat16, (int)8, (int)5, (bool)1, (int)X, (int)1,
# (bool)1>" with X = 1 (tiles) or 0 (none); the regex matches the parentheses with '.'.
set -uo pipefail
out=${OUT:-$(pwd)/gpu_out}
mkdir -p "$out"
nvcc -O3 -lineinfo -std=c++17 -I cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -o /tmp/seed_stream_profile benchmarks/microbench/seed_stream.cu || exit 1
for x in 1 0; do
  timeout "${STEP_TIMEOUT:-120}" ncu --clock-control none --kernel-name-base demangled \
    -k "regex:seed_stream<.*.bool.1, .int.$x, .int.1, .bool.1>" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis_Tables --section SourceCounters \
    /tmp/seed_stream_profile profile > "$out/ncu_replica_x$x.txt" 2>&1
  echo "x$x: rc $?, $(grep -c 'Section:' "$out/ncu_replica_x$x.txt") sections"
done
