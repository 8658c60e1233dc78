"""What the benchmark sweeps, and the physical floor of each case."""

from __future__ import annotations

import dataclasses
import itertools

import jax.numpy as jnp

OPS = ("forward", "dx", "dw", "step")
SEED_DENSITIES = (1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64)


@dataclasses.dataclass(frozen=True)
class Case:
    op: str
    dtype: str
    n: int
    c: int
    k: int
    block_size: int
    density: float

    @property
    def itemsize(self) -> int:
        return jnp.dtype(self.dtype).itemsize

    def nnz(self) -> int:
        blocks = (self.c // self.block_size) * (self.k // self.block_size)
        return max(1, round(self.density * blocks))

    def weight_bytes(self) -> int:
        return self.nnz() * self.block_size**2 * self.itemsize

    def _op_bytes(self, op: str) -> int:
        x, y = self.n * self.c * self.itemsize, self.n * self.k * self.itemsize
        return x + y + self.weight_bytes()  # each op reads two of (x, y, w) and writes the third

    def bytes(self) -> int:
        """Fewest bytes through HBM: each input read once, each output written once."""
        if self.op == "step":
            return sum(self._op_bytes(op) for op in ("forward", "dx", "dw"))
        return self._op_bytes(self.op)

    def flops(self) -> int:
        """Useful FLOPs: nonzero blocks only."""
        per_op = 2 * self.n * self.nnz() * self.block_size**2
        return 3 * per_op if self.op == "step" else per_op

    def floor_us(self, copy_bytes_per_s: float, dense_flops_per_s: float) -> float:
        return max(self.bytes() / copy_bytes_per_s, self.flops() / dense_flops_per_s) * 1e6


def quick_cases(ops=OPS) -> list[Case]:
    """The issue's targets: seed shape (N=32, 12288^2, bs 32) over densities, small blocks at
    the seed shape, and the compute-bound 8192^3 shape."""
    cases = [Case(op, dt, 32, 12288, 12288, 32, d)
             for op, dt, d in itertools.product(ops, ("bfloat16", "float32"), SEED_DENSITIES)]
    cases += [Case(op, "bfloat16", 32, 12288, 12288, bs, d)
              for op, bs, d in itertools.product(("forward", "dx"), (8, 16), (1 / 2, 1 / 8, 1 / 32))]
    cases += [Case("forward", dt, 8192, 8192, 8192, bs, d)
              for dt, bs, d in itertools.product(("bfloat16", "float32"), (64, 32, 16), (1 / 2, 1 / 4, 1 / 8))]
    return cases


def full_cases(ops=OPS) -> list[Case]:
    """Densities 1..1/64, N 1..8192, block sizes 8..64, both dtypes, every op."""
    cases = []
    for op, dt, n, bs, d in itertools.product(ops, ("bfloat16", "float32"), (1, 32, 256, 2048, 8192),
                                              (8, 16, 32, 64), SEED_DENSITIES):
        c = 8192 if n == 8192 else 12288
        cases.append(Case(op, dt, n, c, c, bs, d))
    return cases


def cpu_cases(ops=OPS) -> list[Case]:
    """A small size the reference path finishes quickly on a CPU."""
    return [Case(op, "float32", 32, 1024, 1024, 32, d) for op, d in itertools.product(ops, (1, 1 / 8))]


@dataclasses.dataclass(frozen=True)
class ConvCase:
    """A block-sparse NHWC convolution, stride 1, SAME padding (PixelCNN++-like shapes)."""

    op: str
    dtype: str
    n: int          # batch
    size: int       # image height = width
    c: int
    k: int
    kernel: tuple   # (kh, kw)
    block_size: int
    density: float

    itemsize = Case.itemsize
    nnz = Case.nnz

    def weight_bytes(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.nnz() * self.block_size**2 * self.itemsize

    def bytes(self) -> int:
        pixels = self.n * self.size * self.size
        return (pixels * (self.c + self.k)) * self.itemsize + self.weight_bytes()

    def flops(self) -> int:
        taps = self.kernel[0] * self.kernel[1]
        return 2 * self.n * self.size * self.size * taps * self.nnz() * self.block_size**2

    floor_us = Case.floor_us


def conv_cases(full: bool = False, ops=("forward", "dx", "dw")) -> list[ConvCase]:
    """Batch 64, PixelCNN++ kernels (2x3, 2x2, 3x3, 1x1), bf16. Quick: 32x32 images, 320
    channels, densities 1/2..1/8. Full: 32x32 and 16x16, 160 and 640 channels, densities 1..1/16."""
    if full:
        grid = itertools.product(ops, (32, 16), (160, 640), ((2, 3), (2, 2), (3, 3), (1, 1)), (32, 16),
                                 (1, 1 / 2, 1 / 4, 1 / 8, 1 / 16))
    else:
        grid = itertools.product(ops, (32,), (320,), ((2, 3), (3, 3), (1, 1)), (32, 16), (1 / 2, 1 / 4, 1 / 8))
    return [ConvCase(op, "bfloat16", 64, size, ch, ch, kernel, bs, d) for op, size, ch, kernel, bs, d in grid]
