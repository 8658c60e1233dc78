#!/usr/bin/env bash
# On the GPU machine (no network; jax, nanobind, scikit-build-core, cmake, nvcc preinstalled):
# build jbs against the installed jax, run the whole test suite with the CUDA path active, and
# optionally the benchmark. Logs go to $OUT (or ./gpu_out). Usage:
#   scripts/gpu_check.sh [--tests PYTEST_ARGS] [--bench "JBS_BENCH_ARGS"] [--sanitize] [--notebooks]
# --notebooks runs each notebook in its full (GPU) mode; it needs nbclient, nbformat, ipykernel
# and matplotlib, installed from wheels carried in .whl/ (the machine has no network).
# STEP_TIMEOUT=seconds bounds the tests and the benchmark each (default 3000).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/gpu_out}
mkdir -p "$out"
tests_args="-q -x"
bench_args=""
run_bench=0
run_sanitize=0
run_notebooks=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) tests_args="$2"; shift 2;;
    --bench) run_bench=1; bench_args="$2"; shift 2;;
    --sanitize) run_sanitize=1; shift;;
    --notebooks) run_notebooks=1; shift;;
    *) echo "unknown argument $1" >&2; exit 2;;
  esac
done
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" | tee -a "$out/gpu.txt"

if compgen -G "$repo/jbs/_jbs_cuda.cpython-*.so" > /dev/null; then
  # An extension built elsewhere against this machine's jax (carried into jbs/, see
  # benchmarks/NOTES.md "Building off the GPU machine"): use the source tree as it is.
  echo "== prebuilt extension: $(ls "$repo"/jbs/_jbs_cuda.cpython-*.so)"
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "== build"
  start=$(date +%s)
  cd "$repo"
  JBS_CUDA=ON CMAKE_BUILD_PARALLEL_LEVEL=16 CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90a-real" \
    python3 -m pip install --no-build-isolation --no-deps -q . > "$out/build.log" 2>&1 \
    || { tail -60 "$out/build.log"; echo "BUILD FAILED"; exit 1; }
  echo "built in $(( $(date +%s) - start ))s"
fi
cd /tmp  # import the installed (or carried) jbs, not the source tree's path entry
python3 -c "import jbs; print(jbs.backend_info())" | tee -a "$out/gpu.txt"

echo "== tests"
eval "tests_argv=($tests_args)"  # keeps quoted arguments such as -k "a or b" whole
# (STEP_TIMEOUT seconds at most per step, so that a hung kernel still leaves the logs and the
# rest of the device call's time)
(cd "$repo" && timeout "${STEP_TIMEOUT:-3000}" python3 -P -m pytest "${tests_argv[@]}" -p no:cacheprovider 2>&1 | tee "$out/tests.log" | tail -40)
test_rc=${PIPESTATUS[0]}

if [ $run_bench = 1 ]; then
  echo "== bench"
  eval "bench_argv=($bench_args)"  # keeps quoted arguments such as --only "n == 32" whole
  (cd /tmp && timeout "${STEP_TIMEOUT:-3000}" python3 -m jbs.bench --out "$out" "${bench_argv[@]}" 2>&1 | tee "$out/bench.log" | tail -80)
fi
if [ $run_sanitize = 1 ]; then
  echo "== compute-sanitizer"
  for tool in memcheck racecheck; do
    (cd "$repo" && timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 --target-processes all \
      python3 -P scripts/sanitize_sweep.py > "$out/sanitize_$tool.log" 2>&1); echo "$tool rc=$?"
    tail -5 "$out/sanitize_$tool.log"
  done
fi

notebook_rc=0
if [ $run_notebooks = 1 ]; then
  echo "== notebooks"
  python3 -m pip install -q --no-index --find-links "$repo/.whl" nbclient nbformat ipykernel matplotlib \
    > "$out/notebook_install.log" 2>&1 || tail -20 "$out/notebook_install.log"
  for nb in "$repo"/notebooks/*.ipynb; do
    name=$(basename "$nb" .ipynb)
    (cd /tmp && python3 "$repo/scripts/run_notebook.py" "$nb" "$out/${name}_executed.ipynb" 2>&1 \
      | tee "$out/notebook_$name.log" | tail -15)
    rc=${PIPESTATUS[0]}; echo "notebook $name rc=$rc"; [ $rc = 0 ] || notebook_rc=$rc
  done
fi

echo "tests rc=$test_rc notebooks rc=$notebook_rc"
[ $notebook_rc = 0 ] || exit $notebook_rc
exit $test_rc
