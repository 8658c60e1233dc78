"""The benchmark's markdown tables and its speed-up plot."""

from __future__ import annotations

import pathlib

RESULT_FIELDS = {"impl", "path", "us", "floor_us", "bytes", "flops", "tflops", "suite"}

# torch.sparse._triton_ops hard-codes its float32 BSR kernels to sum in float64 without TF32, while
# jbs's float32 default runs on TF32 tensor cores (as XLA's dot does): not like for like.
TORCH_FP32_NOTE = ("In float32, torch's BSR kernel sums in float64 without TF32 (hard-coded) while jbs "
                   "uses TF32 by default: float32 'x torch' figures marked h compare it with jbs at "
                   "precision='highest' (full float32 sums, timed beside it from session 65 on); unmarked "
                   "ones compare precisions as much as kernels.")


def torch_speedup(impls, digits: int = 2) -> str:
    """torch BSR's time over jbs's, against jbs at precision="highest" where that was timed (the
    float32 pairing; marked h), else against jbs's default."""
    if "torch_bsr" not in impls:
        return "-"
    ours = impls.get("jbs_highest") or impls["jbs"]
    return f"{impls['torch_bsr']['us'] / ours['us']:.{digits}f}" + (" h" if "jbs_highest" in impls else "")


def _case_key(record):
    return tuple((k, str(v)) for k, v in record.items() if k not in RESULT_FIELDS)


def _by_case(records):
    cases = {}
    for r in records:
        cases.setdefault(_case_key(r), {})[r["impl"]] = r
    return cases


def _shape(r) -> str:
    if r.get("suite") == "conv":
        return f"{r['n']}x{r['size']}x{r['size']}, {r['c']}->{r['k']}, {r['kernel'][0]}x{r['kernel'][1]}"
    return f"{r['n']} x {r['c']} -> {r['k']}"


def _dense_mark(record: dict) -> str:
    return "*" if record.get("path", "").startswith("dense") else ""


def markdown(meta: dict, records: list[dict]) -> str:
    lines = [f"# jbs benchmark: {meta['device']}, {meta['date']}", "",
             f"Command: `{meta['command']}`; jax {meta['jax']}; GPU kernels: {meta['gpu_kernels']}. "
             f"Floor = max(bytes / {meta['copy_bytes_per_s'] / 1e9:.1f} GB/s copy, useful FLOPs / dense "
             f"matmul rate ({', '.join(f'{k} {v / 1e12:.3g} TFLOP/s' for k, v in meta['dense_flops_per_s'].items())}"
             "), both measured in this run. Useful FLOPs count nonzero blocks only. "
             "The training step's floor is the sum of its three ops' floors. "
             "'x dense' and 'x torch' are speed-ups of jbs over them (>1: jbs faster); "
             "'% dense rate' is jbs's useful TFLOP/s over the dense op's TFLOP/s in this run. "
             "'copy us' is the floor's bytes through XLA's elementwise add (two arrays read, one "
             "written), timed the same way: the floor plus what one plain kernel adds to it. "
             "A 'jbs us' marked * ran XLA's dense dot on the densified weights, where jbs's rule "
             "(jbs/_src/dense_fallback.py) finds it faster than the block kernels. "
             "Every impl's floor is the case's, the block-sparse problem's. '-': not timed in this run "
             "(torch needs a CUDA GPU and torch installed; BCSR runs in the full sweep only). "
             + TORCH_FP32_NOTE, "",
             "| suite | op | dtype | shape | bs | density | jbs us | floor us | jbs/floor | copy us "
             "| jbs TFLOP/s | dense us | x dense | % dense rate | torch BSR us | x torch | BCSR us |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for impls in _by_case(records).values():
        ours = impls.get("jbs")
        if ours is None:
            continue
        dense = impls.get("xla_dense")
        cell = lambda impl: f"{impls[impl]['us']:.1f}" if impl in impls else "-"
        ratio = lambda impl: f"{impls[impl]['us'] / ours['us']:.2f}" if impl in impls else "-"
        dense_rate = "-"
        if dense:
            dense_tflops = dense["tflops"]
            dense_rate = f"{100 * ours['tflops'] / dense_tflops:.0f}%" if dense_tflops else "-"
        lines.append(f"| {ours.get('suite', 'matmul')} | {ours['op']} | {ours['dtype']} | {_shape(ours)} "
                     f"| {ours['block_size']} | 1/{1 / ours['density']:.0f} | {ours['us']:.1f}{_dense_mark(ours)} "
                     f"| {ours['floor_us']:.1f} | {ours['us'] / ours['floor_us']:.2f} | {cell('xla_copy')} "
                     f"| {ours['tflops']:.3g} "
                     f"| {cell('xla_dense')} | {ratio('xla_dense')} | {dense_rate} | {cell('torch_bsr')} "
                     f"| {torch_speedup(impls)} | {cell('jax_bcsr')} |")
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: pathlib.Path) -> None:
    """Speed-up over the dense op against density, forward op, one line per configuration."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)")
        return
    lines = {}
    for impls in _by_case(records).values():
        ours, dense = impls.get("jbs"), impls.get("xla_dense")
        if ours and dense and ours["op"] == "forward":
            label = f"{ours.get('suite', 'matmul')} {ours['dtype']}, {_shape(ours)}, bs={ours['block_size']}"
            lines.setdefault(label, []).append((1 / ours["density"], dense["us"] / ours["us"]))
    if not lines:
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, points in sorted(lines.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xlabel("1 / density")
    ax.set_ylabel("speed-up over the XLA dense op")
    ax.set_title("jbs block-sparse forward vs dense (same run)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
