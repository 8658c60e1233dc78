#!/usr/bin/env bash
# One device call for the conv halo kernels (conv/bsconv_halo*_kernel.cuh): their GPU tests, then
# the conv suite (OPS, default forward,dx) with a kernel off (AB_VAR=0; AB_VAR defaults to
# JBS_CONV_HALO, JBS_CONV_HALO_SS compares the ss variant with the halo kernel) and on (default
# dispatch), and a side-by-side table. Needs a built jbs (scripts/gpu_check.sh or a carried
# extension in jbs/).
# Usage: scripts/conv_halo_check.sh [PYTEST_K] [BENCH_ONLY]
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
(cd "$repo" && timeout "${TEST_TIMEOUT:-300}" python3 -P -m pytest -q -x -p no:cacheprovider tests/test_conv_gpu.py \
  -k "${1:-halo}" 2>&1 | tee "$out/tests.log" | tail -15)
only=${2:-"kernel != (1, 1)"}
ab=${AB_VAR:-JBS_CONV_HALO}
for setting in "$ab=0" "$ab="; do
  dir="$out/${setting//=/_}"
  mkdir -p "$dir"
  (cd /tmp && env $setting timeout "${BENCH_TIMEOUT:-200}" python3 -m jbs.bench --suite conv --ops "${OPS:-forward,dx}" \
    --no-peers --out "$dir" --only "$only" > "$dir/bench.log" 2>&1) || tail -20 "$dir/bench.log"
done
python3 - "$out" "$ab" <<'PY'
import glob, json, sys
out, ab = sys.argv[1:3]
rows = {}
for i, name in enumerate((f"{ab}_0", f"{ab}_")):
    for path in glob.glob(f"{out}/{name}/*.json"):
        records = json.load(open(path))
        for r in records if isinstance(records, list) else records.get("records", []):
            if r.get("impl") != "jbs":
                continue
            key = (r["op"], tuple(r["kernel"]), r["block_size"], r["density"])
            rows.setdefault(key, [None, None, r["flops"]])[i] = r["us"]
print(f"op kernel bs density | {ab}=0 us | default us | speed-up | default TFLOP/s")
for key, (off, on, flops) in sorted(rows.items()):
    ratio = f"{off / on:.2f}" if off and on else "-"
    tf = f"{flops / on / 1e6:.0f}" if on else "-"
    print(*key, "|", f"{off:.1f}" if off else "-", "|", f"{on:.1f}" if on else "-", "|", ratio, "|", tf)
PY
