#!/usr/bin/env bash
# One device call for the conv halo kernel (conv/bsconv_halo_kernel.cuh): its GPU tests, then
# the conv suite (OPS, default forward,dx) with the kernel off (JBS_CONV_HALO=0) and on (default dispatch), and a
# side-by-side table. Needs a built jbs (scripts/gpu_check.sh or a carried extension in jbs/).
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
for setting in "JBS_CONV_HALO=0" "JBS_CONV_HALO="; do
  dir="$out/${setting//=/_}"
  mkdir -p "$dir"
  (cd /tmp && env $setting timeout "${BENCH_TIMEOUT:-200}" python3 -m jbs.bench --suite conv --ops "${OPS:-forward,dx}" \
    --no-peers --out "$dir" --only "$only" > "$dir/bench.log" 2>&1) || tail -20 "$dir/bench.log"
done
python3 - "$out" <<'PY'
import glob, json, sys
out = sys.argv[1]
rows = {}
for i, name in enumerate(("JBS_CONV_HALO_0", "JBS_CONV_HALO_")):
    for path in glob.glob(f"{out}/{name}/*.json"):
        records = json.load(open(path))
        for r in records if isinstance(records, list) else records.get("records", []):
            if r.get("impl") != "jbs":
                continue
            key = (r["op"], tuple(r["kernel"]), r["block_size"], r["density"])
            rows.setdefault(key, [None, None, r["flops"]])[i] = r["us"]
print("op kernel bs density | halo off us | halo on us | speed-up | on TFLOP/s")
for key, (off, on, flops) in sorted(rows.items()):
    ratio = f"{off / on:.2f}" if off and on else "-"
    tf = f"{flops / on / 1e6:.0f}" if on else "-"
    print(*key, "|", f"{off:.1f}" if off else "-", "|", f"{on:.1f}" if on else "-", "|", ratio, "|", tf)
PY
