#!/usr/bin/env bash
# A/B timing of kernel settings in one device call (run after scripts/gpu_check.sh built and
# installed jbs): runs `python -m jbs.bench ARGS` once per environment setting and prints one
# table of the chosen cases' microseconds side by side. Usage:
#   scripts/ab_bench.sh "JBS_PACK=0" "JBS_PACK=1" -- --suite matmul --ops forward --only '...'
# Each setting's records land in $OUT/ab_<i>/ (or ./gpu_out/ab_<i>/).
set -uo pipefail
out=${OUT:-$(pwd)/gpu_out}
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
[ $# -gt 0 ] && shift
for i in "${!settings[@]}"; do
  mkdir -p "$out/ab_$i"
  echo "== ${settings[$i]}"
  (cd /tmp && env ${settings[$i]} timeout "${STEP_TIMEOUT:-600}" python3 -m jbs.bench --out "$out/ab_$i" --no-peers "$@" \
    > "$out/ab_$i/bench.log" 2>&1) || { echo "failed:"; tail -20 "$out/ab_$i/bench.log"; }
done
python3 - "$out" "${settings[@]}" <<'PY'
import glob, json, sys
out, settings = sys.argv[1], sys.argv[2:]
rows = {}
for i, _ in enumerate(settings):
    for path in glob.glob(f"{out}/ab_{i}/*.json"):
        records = json.load(open(path))
        for r in records if isinstance(records, list) else records.get("records", []):
            if r.get("impl") != "jbs":
                continue
            kernel = "x".join(map(str, r["kernel"])) if "kernel" in r else "-"
            key = (r["op"], r["dtype"], r["n"], kernel, r["block_size"], r["density"])
            rows.setdefault(key, [None] * len(settings))[i] = r["us"]
print("op dtype n kernel bs density | " + " | ".join(settings) + "  (us)")
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2], k[3], k[4], -k[5])):
    print(" ".join(map(str, key)), "|", " | ".join(f"{u:.1f}" if u else "-" for u in rows[key]))
PY
