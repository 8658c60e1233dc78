"""The benchmark's markdown table and its speed-up plot."""

from __future__ import annotations

import pathlib

KEY = ("op", "dtype", "n", "c", "k", "block_size", "density")


def _by_case(records):
    cases = {}
    for r in records:
        cases.setdefault(tuple(r[k] for k in KEY), {})[r["impl"]] = r
    return cases


def markdown(meta: dict, records: list[dict]) -> str:
    lines = [f"# jbs matmul benchmark: {meta['device']}, {meta['date']}", "",
             f"Command: `{meta['command']}`; jax {meta['jax']}; GPU kernels: {meta['gpu_kernels']}. "
             f"Floor = max(bytes / {meta['copy_bytes_per_s'] / 1e9:.1f} GB/s copy, "
             "useful FLOPs / dense matmul rate), both measured in this run.", "",
             "| op | dtype | n | c x k | bs | density | jbs us | floor us | jbs/floor | jbs TFLOP/s "
             "| dense us | x dense | torch BSR us | x torch | BCSR us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, impls in _by_case(records).items():
        op, dtype, n, c, k, bs, density = key
        ours = impls.get("jbs")
        if ours is None:
            continue
        cell = lambda impl: f"{impls[impl]['us']:.1f}" if impl in impls else "-"
        ratio = lambda impl: f"{impls[impl]['us'] / ours['us']:.2f}" if impl in impls else "-"
        lines.append(f"| {op} | {dtype} | {n} | {c}x{k} | {bs} | 1/{1 / density:.0f} | {ours['us']:.1f} "
                     f"| {ours['floor_us']:.1f} | {ours['us'] / ours['floor_us']:.2f} | {ours['tflops']:.0f} "
                     f"| {cell('xla_dense')} | {ratio('xla_dense')} | {cell('torch_bsr')} | {ratio('torch_bsr')} "
                     f"| {cell('jax_bcsr')} |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: pathlib.Path) -> None:
    """Speed-up over the dense dot against density, forward op, one line per (dtype, n, bs)."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)")
        return
    lines = {}
    for key, impls in _by_case(records).items():
        op, dtype, n, c, k, bs, density = key
        if op == "forward" and "jbs" in impls and "xla_dense" in impls:
            lines.setdefault((dtype, n, c, bs), []).append(
                (1 / density, impls["xla_dense"]["us"] / impls["jbs"]["us"]))
    if not lines:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (dtype, n, c, bs), points in sorted(lines.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                label=f"{dtype}, N={n}, {c}x{c}, bs={bs}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("1 / density")
    ax.set_ylabel("speed-up over XLA dense dot")
    ax.set_title("jbs block-sparse forward vs dense")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
