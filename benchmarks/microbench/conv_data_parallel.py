"""Data-parallel scaling of a block-sparse conv training step: one GPU with B images against
all GPUs with B images each, the batch sharded over them (images partitioned by
jbs/_src/sharding.py: partitioned_images). Prints us per step and images per second."""

import time

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jbs


def time_step(step, x, w, calls=20):
    for _ in range(3):
        jax.block_until_ready(step(x, w))
    start = time.perf_counter()
    for _ in range(calls):
        out = step(x, w)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls * 1e6


def main(per_device=64, channels=320, bs=32, density=0.25):
    conv = jbs.BlockSparseConv(jbs.layouts.random(channels // bs, channels // bs, density, seed=0),
                               bs, (3, 3))
    w = jax.random.normal(jax.random.key(1), conv.w_shape, jnp.bfloat16) * 0.05
    step = jax.jit(jax.value_and_grad(lambda x, w: jnp.mean(conv(x, w).astype(jnp.float32) ** 2),
                                      argnums=(0, 1)))
    devices = jax.devices()
    print(f"{devices[0].device_kind} x {len(devices)}; {conv}")
    rows = []
    for count in sorted({1, len(devices)}):
        mesh = Mesh(np.array(devices[:count]), ("data",))
        x = jax.random.normal(jax.random.key(0), (per_device * count, 32, 32, channels), jnp.bfloat16)
        x = jax.device_put(x, NamedSharding(mesh, P("data")))
        ws = jax.device_put(w, NamedSharding(mesh, P()))
        hlo = step.lower(x, ws).compile().as_text()
        us = time_step(step, x, ws)
        rows.append((count, x.shape[0], us, x.shape[0] / us * 1e6, "all-gather" in hlo))
    print("| GPUs | images | us per step | images/s | all-gather in HLO |\n|---|---|---|---|---|")
    for count, images, us, rate, gathered in rows:
        print(f"| {count} | {images} | {us:.0f} | {rate:.0f} | {gathered} |")


if __name__ == "__main__":
    main()
