#!/usr/bin/env bash
# The small-N forward's time split two ways, in one device call (benchmarks/NOTES.md,
# sessions 63-66), for the bf16 bs 32 announcement shape:
#   1. per warp of one launch of the even walk: ramp (split at the items in hand and griddep_wait),
#      tail, span, and the op's time beyond the span; and the same launch's sum kernel per output
#      column, then the packed walk (whole columns per CTA, no sum kernel) against it, A / B / A / B,
#      and the packed walk with its prologue staggered over the warps
#      (benchmarks/microbench/walk_timeline.cu, jbs's own launcher, built here);
#   2. per op: each kernel's median start and end within its op, and the ops' period
#      (scripts/profile_kernels.py through CUPTI; needs jbs built: scripts/gpu_check.sh builds it).
# Logs under $OUT (default ./gpu_out). DENSITIES (default "2 4 8") are denominators; 1/16 and 1/32
# run with the walk forced (JBS_STREAM_EVEN=1), the default rule leaving them to the one-column kernel.
# OP_TIMELINE=0 skips 2.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
export PYTHONPATH=$repo:$repo/scripts XLA_PYTHON_CLIENT_PREALLOCATE=false
nvcc -O3 -std=c++17 -I "$repo/cuda" -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
  -DJBS_WALK_TIMES -o /tmp/walk_timeline "$repo/benchmarks/microbench/walk_timeline.cu"
# shellcheck disable=SC2086
/tmp/walk_timeline ${DENSITIES:-2 4 8} | tee "$out/walk_timeline.md"
# (1/16 and 1/32 as their own run, their tables whole)
echo "1/16 and 1/32, the walk forced (JBS_STREAM_EVEN=1):" | tee -a "$out/walk_timeline.md"
JBS_STREAM_EVEN=1 /tmp/walk_timeline 16 32 | tee -a "$out/walk_timeline.md"
[ "${OP_TIMELINE:-1}" = 1 ] || exit 0
cd /tmp
python3 -P "$repo/scripts/profile_kernels.py" --no-l2 --densities 2,4,8,16 --ops forward,dx 2>&1 \
  | grep -v Warning | tee "$out/op_timeline_bf16.txt"
