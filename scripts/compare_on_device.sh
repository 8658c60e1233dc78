#!/usr/bin/env bash
# One device call that judges a kernel change against a baseline build: the session-48
# routine. Run on the GPU machine from the repository root, with the candidate build in jbs/
# (the extension module built here against the device's jax, carried) and the baseline's
# extension at BASE (default v1.so, carried too). Steps, each logged to $OUT (or ./gpu_out):
#   1. bits: scripts/compare_builds.py --suite SUITE saved with BASE, checked with the
#      candidate (a change that only reorders work must leave every output bit equal);
#   2. tests: pytest tests/TEST_FILE -k TESTS (skipped if TESTS is empty);
#   3. A-B-A-B: scripts/ab_bench.sh BASE / candidate over `jbs.bench AB_ARGS` (skipped if empty);
#   4. Nsight: scripts/profile_conv.sh for CASES, the candidate (skipped if CASES is empty);
#   5. memcheck: the sanitize sweep (SANITIZE=conv or all; skipped if empty).
# The A-B table and each step's status come last. Settings (environment):
#   BASE=v1.so SUITE=conv TEST_FILE=test_conv_gpu.py TESTS="row_group_dw or halo_ss"
#   AB_ARGS='--suite conv --ops dw --only "kernel != (1, 1)"' CASES="dw:2x3:32:8" SANITIZE=conv
# Nsight writes 4 files per case and the device returns a bounded number of files: keep CASES
# to one or two.
set -uo pipefail
repo=$(pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
base=${BASE:-v1.so}
export PYTHONPATH=$repo:$repo/scripts XLA_PYTHON_CLIENT_PREALLOCATE=false
candidate=$(ls jbs/_jbs_cuda*.so 2>/dev/null | head -1)
if [ -z "$candidate" ] || [ ! -f "$base" ]; then
  echo "need the candidate build in jbs/ and the baseline at $base" >&2
  exit 2
fi
kept=$(mktemp)
cp "$candidate" "$kept"
status=()

cp "$base" "$candidate"
(cd /tmp && python3 -P "$repo/scripts/compare_builds.py" --suite "${SUITE:-conv}" --save /tmp/base_outputs.npz) \
  > "$out/bits_base.log" 2>&1
cp "$kept" "$candidate"
(cd /tmp && python3 -P "$repo/scripts/compare_builds.py" --suite "${SUITE:-conv}" --check /tmp/base_outputs.npz) \
  > "$out/bits.log" 2>&1
status+=("bits: $(tail -1 "$out/bits.log")")

if [ -n "${TESTS:-}" ]; then
  timeout "${STEP_TIMEOUT:-240}" python3 -m pytest -q -x "tests/${TEST_FILE:-test_conv_gpu.py}" -k "$TESTS" \
    > "$out/tests.log" 2>&1
  status+=("tests (rc $?): $(tail -1 "$out/tests.log")")
fi

if [ -n "${AB_ARGS:-}" ]; then
  eval "set -- $AB_ARGS"
  STEP_TIMEOUT=${STEP_TIMEOUT:-150} bash scripts/ab_bench.sh "so=$base" "so=" "so=$base" "so=" -- "$@" \
    > "$out/ab.log" 2>&1
  rm -rf "$out"/ab_*
fi

if [ -n "${CASES:-}" ]; then
  OUT=$out CASES=$CASES STEP_TIMEOUT=100 bash scripts/profile_conv.sh > "$out/profile.log" 2>&1
  status+=("nsight (rc $?): $(grep -c 'rc 0' "$out/profile.log") of $(wc -w <<< "$CASES") cases")
  rm -f "$out"/*.ncu-rep
fi

if [ -n "${SANITIZE:-}" ]; then
  only=$([ "$SANITIZE" = conv ] && echo 1 || echo 0)
  (cd /tmp && SWEEP_CONV_ONLY=$only timeout "${STEP_TIMEOUT:-240}" compute-sanitizer --tool memcheck \
    python3 -P "$repo/scripts/sanitize_sweep.py") > "$out/memcheck.log" 2>&1
  status+=("memcheck (rc $?): $(grep 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)")
fi

rm -f "$kept"
printf '%s\n' "${status[@]}"
[ -f "$out/ab.log" ] && sed -n '/^op /,$p' "$out/ab.log"
exit 0
