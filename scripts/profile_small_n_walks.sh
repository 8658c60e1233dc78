#!/usr/bin/env bash
# Nsight Compute on jbs's own small-N walks at the seed shape (bf16, N = 32, 12288^2, density
# 1/2 unless DENSITY is set), one launch each, through scripts/profile_kernels.py --plain: the
# column-group walk at bs 16 and bs 8 (bsmm_stream_even_group_kernel.cuh) and, for contrast,
# the one-column swizzled walk at bs 32 (bsmm_stream_even_kernel.cuh), whose bytes per item are
# close to its floor. What bounds the group walks was open after sessions 40-42
# (benchmarks/NOTES.md). Run on the GPU machine from the repository root with jbs built or
# carried (PYTHONPATH); per walk it writes the sections' text and the per-instruction (SASS)
# stall samples as CSV to $OUT (or ./gpu_out). WALKS="bs:kernel ..." picks the walks, OPS the
# op (forward by default, or dx), DTYPE the type (bfloat16 by default; e.g. float32 with
# WALKS=32:bsmm_stream_kernel for fp32's one-column walk).
set -uo pipefail
repo=$(pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for walk in ${WALKS:-16:bsmm_stream_even_group_kernel 8:bsmm_stream_even_group_kernel 32:bsmm_stream_even_kernel}; do
  bs=${walk%%:*} kernel=${walk#*:}
  name="ncu_${OPS:-forward}_${DTYPE:-bfloat16}_bs${bs}_${kernel}"
  # (from /tmp, so that python imports the carried or installed jbs, not a stale path entry)
  (cd /tmp && timeout "${STEP_TIMEOUT:-180}" ncu --clock-control none -k "regex:^${kernel}$" --launch-count 1 \
    --import-source yes --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis_Tables --section SourceCounters --section InstructionStats \
    --section Occupancy --section LaunchStats -o "$out/$name" -f \
    python3 -P "$repo/scripts/profile_kernels.py" --plain --no-l2 --block-size "$bs" \
    --densities "${DENSITY:-2}" --ops "${OPS:-forward}" --dtype "${DTYPE:-bfloat16}" > "$out/$name.log" 2>&1)
  echo "bs $bs $kernel: rc $?"
  ncu -i "$out/$name.ncu-rep" --page details > "$out/$name.txt" 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/${name}_sass.csv" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Achieved Occupancy|Stall|Issued Ipc" \
    "$out/$name.txt" | head -24
done
