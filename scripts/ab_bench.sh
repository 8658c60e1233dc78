#!/usr/bin/env bash
# A/B timing of kernel settings in one device call (run after scripts/gpu_check.sh built and
# installed jbs): runs `python -m jbs.bench ARGS` once per environment setting and prints one
# table of the chosen cases' microseconds side by side. Usage:
#   scripts/ab_bench.sh "JBS_PACK=0" "JBS_PACK=1" -- --suite matmul --ops forward --only '...'
# A word so=PATH in a setting runs it with the extension module PATH (another build) in
# place of jbs/'s own, which the script restores afterwards; so= alone is jbs/'s own. So two
# builds compare in one call, alternating: "so=old.so" "so=" "so=old.so" "so=".
# Each setting's records land in $OUT/ab_<i>/ (or ./gpu_out/ab_<i>/).
set -uo pipefail
out=${OUT:-$(pwd)/gpu_out}
repo=$(cd "$(dirname "$0")/.." && pwd)
settings=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do settings+=("$1"); shift; done
[ $# -gt 0 ] && shift
extension=$(ls "$repo"/jbs/_jbs_cuda*.so 2>/dev/null | head -1)
own_extension=$(mktemp)
[ -n "$extension" ] && cp "$extension" "$own_extension"
for i in "${!settings[@]}"; do
  mkdir -p "$out/ab_$i"
  echo "== ${settings[$i]}"
  envs=()
  chosen=$own_extension
  for word in ${settings[$i]}; do
    case "$word" in
      so=) chosen=$own_extension;;
      so=*) chosen=$(cd "$repo" && realpath "${word#so=}");;
      *) envs+=("$word");;
    esac
  done
  [ -n "$extension" ] && cp "$chosen" "$extension"
  (cd /tmp && env "${envs[@]}" timeout "${STEP_TIMEOUT:-600}" python3 -m jbs.bench --out "$out/ab_$i" --no-peers "$@" \
    > "$out/ab_$i/bench.log" 2>&1) || { echo "failed:"; tail -20 "$out/ab_$i/bench.log"; }
done
[ -n "$extension" ] && cp "$own_extension" "$extension"
rm -f "$own_extension"
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
