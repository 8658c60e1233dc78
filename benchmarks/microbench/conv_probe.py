"""Runs one block-sparse conv (batch 64, 32x32, 320 channels, bf16, as jbs-bench's conv suite)
a few times, so that a profiler can be pointed at its kernel:

    python3 conv_probe.py [forward|dx|dw] [kh]x[kw] [block_size] [density]

e.g. ncu -k regex:halo --launch-skip 2 --launch-count 1 python3 conv_probe.py forward 2x3 32 1/2
"""

import sys

import jax
import jax.numpy as jnp

import jbs


def conv_case(args):
    """The jitted op and its operands from [op] [kh]x[kw] [block_size] [density] (the defaults:
    forward 3x3 32 1/2), and a line that names them."""
    op = args[0] if len(args) > 0 else "forward"
    kernel = tuple(int(k) for k in (args[1] if len(args) > 1 else "3x3").split("x"))
    block_size = int(args[2]) if len(args) > 2 else 32
    density = float(eval(args[3])) if len(args) > 3 else 0.5  # "1/2" or 0.5
    channels = 320
    layout = jbs.layouts.random(channels // block_size, channels // block_size, density, seed=0)
    conv = jbs.BlockSparseConv(layout, block_size, kernel)
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (64, 32, 32, channels), jnp.float32).astype(jnp.bfloat16)
    w = jax.random.normal(kw, conv.w_shape, jnp.float32).astype(jnp.bfloat16)
    if op == "forward":
        fn = jax.jit(conv)
    elif op == "dx":
        fn = jax.jit(lambda x, w: jax.vjp(lambda x: conv(x, w), x)[1](x)[0])
    else:
        fn = jax.jit(lambda x, w: jax.vjp(lambda w: conv(x, w), w)[1](conv(x, w))[0])
    return fn, x, w, f"{op} {kernel} bs {block_size} density {density}"


def main() -> None:
    fn, x, w, name = conv_case(sys.argv[1:])
    for _ in range(5):
        out = fn(x, w)
    out.block_until_ready()
    print(name, out.shape, flush=True)


if __name__ == "__main__":
    main()
