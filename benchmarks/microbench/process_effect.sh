#!/usr/bin/env bash
# On the GPU machine: the seed-shape microbenchmark (seed_stream.cu, `even` sweep: the jbs
# even-split kernel and its replicas) stand-alone, and inside a jax process with its buffers
# from cudaMalloc or from XLA under each XLA allocator setting. Tables go to $OUT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp/process_effect}
mkdir -p "$out"
flags="-O3 -std=c++17 -I $repo/cuda -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr"
nvcc $flags -o /tmp/seed_stream "$here/seed_stream.cu" &
nvcc $flags -DSEED_STREAM_LIBRARY -Xcompiler -fPIC -shared -o /tmp/libseed_stream.so "$here/seed_stream.cu" &
wait
run() {  # name, command...
  local name=$1; shift
  echo "== $name"
  timeout 240 "$@" "${SWEEP_ARGS[@]}" > "$out/$name.md" 2>&1 || echo "($name failed: rc $?)"
  grep -E "^\| (bf16|fp32)" "$out/$name.md" | cut -d"|" -f2-4,7,9,11
}
SWEEP_ARGS=(${SWEEP:-even})
run standalone /tmp/seed_stream
run jax_cudamalloc python3 "$here/seed_stream_in_jax.py" /tmp/libseed_stream.so
run jax_xla_bfc_prealloc python3 "$here/seed_stream_in_jax.py" /tmp/libseed_stream.so xla
XLA_PYTHON_CLIENT_PREALLOCATE=false run jax_xla_bfc_growing python3 "$here/seed_stream_in_jax.py" /tmp/libseed_stream.so xla
XLA_PYTHON_CLIENT_ALLOCATOR=platform run jax_xla_platform python3 "$here/seed_stream_in_jax.py" /tmp/libseed_stream.so xla
