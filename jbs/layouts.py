"""Layout generators. A layout is a 2-D numpy bool array: ``layout[c, k]`` connects input block
``c`` to output block ``k``. All generators are seeded and deterministic in one environment;
numpy and networkx do not promise the same draws across their versions, so keep the layout
itself with a checkpoint (``np.save``) rather than only its seed."""

from __future__ import annotations

import jax.numpy as jnp
import networkx as nx
import numpy as np

__all__ = ["random", "barabasi_albert", "watts_strogatz", "block_diagonal", "magnitude_prune"]


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a positive int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int (layouts are deterministic), got {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return int(seed)


def _check_fraction(name, value, low_inclusive):
    """A real number in (0, 1] (or [0, 1]), as a float; anything else names ``name``."""
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not (0.0 <= value if low_inclusive else 0.0 < value) or not value <= 1.0:
        raise ValueError(f"{name} must be in {'[' if low_inclusive else '('}0, 1], got {value!r}")
    return value


def _check_density(density):
    return _check_fraction("density", density, low_inclusive=False)


def random(rows: int, cols: int, density: float, *, seed: int) -> np.ndarray:
    """Uniformly random layout with exactly ``max(1, round(density * rows * cols))`` blocks (not a
    coin flip per block); at low density some block rows and columns are left empty."""
    rows, cols = _check_positive("rows", rows), _check_positive("cols", cols)
    count = max(1, round(_check_density(density) * rows * cols))
    chosen = np.random.default_rng(_check_seed(seed)).choice(rows * cols, size=count, replace=False)
    layout = np.zeros(rows * cols, dtype=bool)
    layout[chosen] = True
    return layout.reshape(rows, cols)


def _graph_layout(graph: nx.Graph, n: int) -> np.ndarray:
    """Symmetric adjacency with the diagonal set: every block also feeds itself."""
    layout = nx.to_numpy_array(graph, nodelist=range(n), dtype=bool)
    np.fill_diagonal(layout, True)
    return layout


def barabasi_albert(n: int, m: int, *, seed: int) -> np.ndarray:
    """Small-world, scale-free layout (n x n): preferential attachment, m edges per new node.

    Hub blocks get many more connections than leaves (a power-law degree distribution); they
    sit at the low block indices. The density is fixed by m: ``(2 m (n - m) + n) / n**2``, the
    diagonal included (m = 4 over 576 blocks: 1.55%).
    """
    n, m = _check_positive("n", n), _check_positive("m", m)
    if m >= n:
        raise ValueError(f"barabasi_albert needs m < n, got m={m}, n={n}")
    return _graph_layout(nx.barabasi_albert_graph(n, m, seed=_check_seed(seed)), n)


def watts_strogatz(n: int, k: int, p: float, *, seed: int) -> np.ndarray:
    """Small-world layout (n x n): a ring of n blocks each linked to its k nearest neighbours,
    each link rewired with probability p. With k = 2 rewiring usually cuts the ring into pieces
    (no path between some blocks); k >= 4 stays connected in practice."""
    n, k = _check_positive("n", n), _check_positive("k", k)
    if k % 2:
        raise ValueError(f"watts_strogatz needs an even k (k/2 neighbours on each side), got k={k}")
    if k >= n:
        raise ValueError(f"watts_strogatz needs k < n, got k={k}, n={n}")
    p = _check_fraction("p", p, low_inclusive=True)
    return _graph_layout(nx.watts_strogatz_graph(n, k, p, seed=_check_seed(seed)), n)


def block_diagonal(num_groups: int, group_rows: int, group_cols: int | None = None) -> np.ndarray:
    """``num_groups`` dense groups of (group_rows x group_cols) blocks on the diagonal, as in a
    grouped linear layer. Shape (num_groups * group_rows, num_groups * group_cols)."""
    num_groups = _check_positive("num_groups", num_groups)
    group_rows = _check_positive("group_rows", group_rows)
    group_cols = group_rows if group_cols is None else _check_positive("group_cols", group_cols)
    return np.kron(np.eye(num_groups, dtype=bool), np.ones((group_rows, group_cols), dtype=bool))


def magnitude_prune(weights, block_size: int, density: float) -> np.ndarray:
    """Layout that keeps the ``max(1, round(density * blocks))`` blocks of largest L2 norm in a
    dense (C, K) matrix (ties broken by position). Use with ``BlockSparseMatMul.from_dense``."""
    from jbs._src.validation import check_block_size  # noqa: PLC0415

    block_size = check_block_size(block_size)
    weights = np.asarray(weights)
    # (jnp.issubdtype knows JAX's float types, bfloat16 among them, which numpy's does not)
    if not (jnp.issubdtype(weights.dtype, jnp.floating) or jnp.issubdtype(weights.dtype, jnp.integer)
            or weights.dtype == bool):
        raise TypeError(f"weights must be a real (C, K) matrix, got dtype {weights.dtype}")
    if weights.ndim != 2 or weights.shape[0] % block_size or weights.shape[1] % block_size:
        raise ValueError(f"weights must be a 2-D (C, K) matrix with C and K multiples of "
                         f"block_size={block_size}; got shape {weights.shape}")
    cb, kb = weights.shape[0] // block_size, weights.shape[1] // block_size
    blocks = weights.astype(np.float64).reshape(cb, block_size, kb, block_size)
    finite = np.isfinite(blocks).all(axis=(1, 3)).ravel()
    if not finite.all():
        raise ValueError(f"weights must be finite to rank blocks by norm; {np.sum(~finite)} "
                         "blocks hold a NaN or an infinity")
    largest = np.abs(blocks).max(initial=0.0)
    # Scaled by the largest entry first, so that squares of huge weights cannot overflow.
    norms = np.sqrt(np.square(blocks / (largest or 1.0)).sum(axis=(1, 3))).ravel()
    count = max(1, round(_check_density(density) * norms.size))
    keep = np.argsort(-norms, kind="stable")[:count]
    layout = np.zeros(norms.size, dtype=bool)
    layout[keep] = True
    return layout.reshape(cb, kb)
