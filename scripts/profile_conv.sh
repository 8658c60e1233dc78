#!/usr/bin/env bash
# Nsight Compute on one launch of a conv kernel at a benchmark shape (issue 4's rows: batch 64,
# 32x32 images, 320 channels, bf16): what bounds the rows that miss their bars (the 1/8 rows of
# the 2x3 and 3x3 convs; benchmarks/NOTES.md, session 45). Run on the GPU machine from the
# repository root with jbs built or carried (PYTHONPATH). CASES="op:kernel:bs:density_inverse
# ..." picks the rows (kernel 2x3, 3x3 or 1x1); KERNEL the CUDA kernel (a regex; by default the
# first bsconv_ kernel the row launches). Per row it writes the sections' text and the
# per-instruction (SASS) stall samples as CSV to $OUT (or ./gpu_out).
set -uo pipefail
repo=$(pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
for row in ${CASES:-forward:2x3:32:8}; do
  IFS=: read -r op kernel bs inv <<< "$row"
  kh=${kernel%x*} kw=${kernel#*x}
  name="ncu_conv_${op}_${kernel}_bs${bs}_1over${inv}"
  only="op == '$op' and kernel == ($kh, $kw) and block_size == $bs and abs(density - 1 / $inv) < 1e-9"
  # (from /tmp, so that python imports the carried or installed jbs, not a stale path entry)
  (cd /tmp && timeout "${STEP_TIMEOUT:-180}" ncu --clock-control none -k "regex:${KERNEL:-^bsconv_}" \
    --launch-count 1 --import-source yes --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
    --section SourceCounters --section InstructionStats --section Occupancy --section LaunchStats \
    -o "$out/$name" -f python3 -P -m jbs.bench --suite conv --no-peers --ops "$op" --only "$only" \
    > "$out/$name.log" 2>&1)
  echo "$row: rc $?"
  ncu -i "$out/$name.ncu-rep" --page details > "$out/$name.txt" 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass > "$out/${name}_sass.csv" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issued Ipc|Registers Per|Stall|Tensor" \
    "$out/$name.txt" | head -24
done
