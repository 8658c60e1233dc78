"""Runs seed_stream.cu's sweep inside a process where jax holds the GPU.

Session 11 found the same kernel ~40% slower under jbs-bench than in the stand-alone
microbenchmark. This driver separates the candidates: with `xla` the problem's buffers (weights,
activations, item tables, outputs) are XLA-allocated jax arrays; without it they come from
cudaMalloc, in the same process. Any further arguments go to the sweep (e.g. `even`).

    python3 seed_stream_in_jax.py /tmp/libseed_stream.so [xla] [even ...]
"""

import ctypes
import sys

import jax
import jax.numpy as jnp

DeviceAlloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_alive = []  # XLA arrays whose buffers the sweep uses; never freed during the run


def _xla_alloc(num_bytes: int) -> int:
    words = (num_bytes + 3) // 4
    array = jnp.full((words,), 1.0, jnp.float32)  # filled on the device: a real buffer
    array.block_until_ready()
    _alive.append(array)
    return array.unsafe_buffer_pointer()


def main() -> int:
    library, *args = sys.argv[1:]
    use_xla = "xla" in args
    args = [a for a in args if a != "xla"]
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; buffers from "
          f"{'XLA' if use_xla else 'cudaMalloc'}", flush=True)
    jax.block_until_ready(jnp.ones(8) + 1)  # XLA's context and allocator are up first
    lib = ctypes.CDLL(library)
    lib.seed_stream_run.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), DeviceAlloc]
    lib.seed_stream_run.restype = ctypes.c_int
    argv = (ctypes.c_char_p * (len(args) + 1))(b"seed_stream", *[a.encode() for a in args])
    callback = DeviceAlloc(_xla_alloc) if use_xla else ctypes.cast(None, DeviceAlloc)
    return lib.seed_stream_run(len(args) + 1, argv, callback)


if __name__ == "__main__":
    sys.exit(main())
