#!/usr/bin/env bash
# On the GPU machine, with the jbs extension importable (installed, or carried into jbs/ and
# PYTHONPATH set): the even-split kernel at the seed shape (bf16, bs 32, N 32, density 1/2) as
# jbs launches it (seed_shape_probe.py, timed as jbs-bench times it) and as the stand-alone
# seed_stream.cu launches it. Session 12 used it to find why the first ran 93 us and the second
# 63 us: are the binaries' code the same (registers, shared memory, SASS diff), where does the
# extra L2 work come from (Nsight Compute sections and explicit metrics in both processes), and
# is the stand-alone code still fast inside a jbs process after jbs has run? Reports to $OUT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp/compare_even_kernel}
mkdir -p "$out"
ncu=/usr/local/cuda/bin/ncu
flags="-O3 -std=c++17 -I $repo/cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr"
nvcc $flags -o /tmp/seed_stream "$here/seed_stream.cu" &
nvcc $flags -DSEED_STREAM_LIBRARY -Xcompiler -fPIC -shared -o /tmp/libseed_stream.so "$here/seed_stream.cu" &
wait
extension=$(python3 -c "import jbs._jbs_cuda as m; print(m.__file__)") || exit 1
name=$(/usr/local/cuda/bin/cuobjdump -res-usage /tmp/seed_stream | grep -o '_ZN3jbs23bsmm_stream_even_kernelI13__nv_bfloat16Li32ELb0ELi32ELb0E[A-Za-z0-9_]*' | head -1)
echo "kernel $name"
for b in "$extension" /tmp/seed_stream; do
  /usr/local/cuda/bin/cuobjdump -sass -fun "$name" "$b" 2>/dev/null | grep -E '^\s+/\*[0-9a-f]{4}\*/' |
    sed -E 's@/\*[0-9a-f]{4}\*/@@; s@;.*@@; s/ +/ /g' > "$out/sass_$([ "$b" = /tmp/seed_stream ] && echo standalone || echo jbs).txt"
done
wc -l "$out"/sass_*.txt
diff "$out"/sass_jbs.txt "$out"/sass_standalone.txt > "$out/sass_diff.txt"; echo "sass diff lines: $(wc -l < "$out/sass_diff.txt")"
head -30 "$out/sass_diff.txt"
for b in "$extension" /tmp/seed_stream; do
  echo "$(basename "$b"): $(/usr/local/cuda/bin/cuobjdump -res-usage "$b" 2>/dev/null | grep -A1 "$name" | grep -o 'REG:[0-9]*.*')"
done | tee "$out/resources.txt"
echo "== timing, jbs process (no profiler)"
JBS_STREAM_EVEN=1 timeout 180 python3 "$here/seed_shape_probe.py" | tee "$out/probe.txt"
sections="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors.sum,lts__t_requests.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_sectors_srcunit_tex_lookup_miss.sum,smsp__inst_executed.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,sm__sass_inst_executed_op_ldgsts.sum,breakdown:lts__throughput.avg.pct_of_peak_sustained_elapsed
export XLA_FLAGS=--xla_gpu_enable_command_buffer=
JBS_STREAM_EVEN=1 timeout 200 $ncu --clock-control none --cache-control none -k regex:bsmm_stream_even_kernel \
  --launch-skip 6 --launch-count 1 $sections --metrics $metrics python3 "$here/seed_shape_probe.py" > "$out/metrics_jbs.txt" 2>&1
timeout 200 $ncu --clock-control none --cache-control none -k regex:bsmm_stream_even_kernel --launch-skip 6 \
  --launch-count 1 $sections --metrics $metrics /tmp/seed_stream even > "$out/metrics_standalone.txt" 2>&1
paste <(grep -E '^\s+(gpu__|dram__|lts__|smsp__|l1tex__|sm__)' "$out/metrics_jbs.txt" | awk '{print $1, $NF}') \
      <(grep -E '^\s+(gpu__|dram__|lts__|smsp__|l1tex__|sm__)' "$out/metrics_standalone.txt" | awk '{print $NF}')
for f in metrics_jbs metrics_standalone; do
  echo "== $f"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Registers Per|Grid Size|Block Size|Dynamic Shared|Static Shared|Warp Cycles Per Issued" "$out/$f.txt"
done
echo "== the stand-alone code inside the jbs process, after jbs ran"
unset XLA_FLAGS
JBS_STREAM_EVEN=1 timeout 200 python3 - "$here" <<'PY' 2>&1 | tee "$out/inside_jbs.txt" | grep -E "JBS|bf16 \| 1/2|fp32 \| 1/2"
import runpy, sys
here = sys.argv[1]
sys.argv = ["seed_shape_probe.py"]
runpy.run_path(f"{here}/seed_shape_probe.py", run_name="__main__")
sys.argv = ["seed_stream_in_jax.py", "/tmp/libseed_stream.so", "xla", "even"]
sys.path.insert(0, here)
import seed_stream_in_jax
seed_stream_in_jax.main()
sys.argv = ["seed_shape_probe.py"]
runpy.run_path(f"{here}/seed_shape_probe.py", run_name="__main__")
PY
