"""``jbs-bench`` / ``python -m jbs.bench``: block-sparse matmul against the physical floor and
the peers (XLA's dense dot, jax.experimental.sparse BCSR, torch's Triton BSR kernels).

On a machine without a GPU it times the reference path at a small size and says that the
kernel timings need a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

import jbs
from jbs.bench import cases as cases_lib
from jbs.bench import report, targets, timing
from jbs.bench.runners import CONV_RUNNERS, RUNNERS, path_of

DENSITY_FREE = ("block_size", "density")  # the dense peer's time does not depend on them
DESCRIPTION = ("Times jbs's block-sparse matmuls and convolutions against the physical floor (bytes over "
               "the measured copy rate, or FLOPs over the measured dense rate) and the peers (XLA's dense "
               "dot or cuDNN's conv, jax.experimental.sparse BCSR, torch's Triton BSR kernel), all in one run.")


def _peers_for(case, full: bool) -> list[str]:
    peers = ["xla_dense"]
    if case.n <= 64:  # the memory-bound cases: how close a plain kernel gets to their floor
        peers.append("xla_copy")
    if case.op == "forward":
        peers.append("torch_bsr")
        if case.dtype == "float32":  # torch's fp32 kernel sums in fp64: jbs's full-fp32 mode beside it
            peers.append("jbs_highest")
        if full and case.dtype == "float32" and case.n == 32 and case.density in (1 / 8, 1 / 64):
            peers.append("jax_bcsr")
    return peers


def _provenance() -> dict:
    """What else decides the figures: the source's commit, where jbs runs from a git checkout,
    and the JBS_* switches set in the environment (they change which kernels run)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=pathlib.Path(jbs.__file__).parent,
                                capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"commit": commit, "switches": {k: v for k, v in sorted(os.environ.items()) if k.startswith("JBS_")}}


def _torch_usable() -> bool:
    try:
        import torch  # noqa: PLC0415
        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="jbs-bench", description=DESCRIPTION)
    parser.add_argument("--full", action="store_true", help="the full sweep (long) instead of the quick one")
    parser.add_argument("--ops", default=",".join(cases_lib.OPS), help="comma list of forward,dx,dw,step")
    parser.add_argument("--out", default="jbs_bench_results",
                        help="folder for the JSON, markdown and PNG (default: ./jbs_bench_results)")
    parser.add_argument("--no-peers", action="store_true", help="time jbs alone")
    parser.add_argument("--suite", choices=("all", "matmul", "conv"), default="all",
                        help="matmul (OpenAI's 32 x 12288^2 layer and the compute-bound 8192^3), conv "
                             "(PixelCNN++ shapes) or all")
    parser.add_argument("--only", default=None,
                        help="keep the cases where this Python expression over the case fields "
                             "(op, dtype, n, c, k, block_size, density; conv cases also size and kernel, "
                             "with n the batch) is true, e.g. \"n == 32 and block_size == 32\"")
    args = parser.parse_args(argv)
    ops = tuple(op for op in args.ops.split(",") if op)
    bad = set(ops) - set(cases_lib.OPS)
    if bad:
        parser.error(f"--ops: unknown {sorted(bad)}; expected some of {cases_lib.OPS}")

    info = jbs.backend_info()
    print(info, flush=True)
    on_gpu = info.gpu_present and info.cuda_kernels
    sweep = []
    if args.suite in ("all", "matmul"):
        cases = ((cases_lib.full_cases(ops) if args.full else cases_lib.quick_cases(ops)) if on_gpu
                 else cases_lib.cpu_cases(ops))
        sweep += [("matmul", case) for case in cases]
    if args.suite in ("all", "conv"):
        conv_ops = tuple(op for op in ops if op != "step")
        cases = (cases_lib.conv_cases(args.full, conv_ops) if on_gpu else
                 [cases_lib.ConvCase(op, "float32", 4, 8, 64, 64, (3, 3), 16, 0.25) for op in conv_ops])
        sweep += [("conv", case) for case in cases]
    if not on_gpu:
        print("\nNo GPU kernels here: timing the reference path at a small size, briefly "
              "(a demonstration of the command, not figures to quote). Kernel timings need a "
              "CUDA GPU.\n", flush=True)
        timing.use_sampling(timing.DEMONSTRATION)
    if args.only:
        sweep = [(suite, case) for suite, case in sweep if eval(args.only, {}, dict(case.__dict__))]  # noqa: S307
        print(f"--only {args.only!r}: {len(sweep)} cases", flush=True)

    copy_bw = timing.measure_copy_bandwidth(2**30 if on_gpu else 2**26)
    dense_size = 8192 if on_gpu else 1024
    rates = {dt: timing.measure_dense_rate(jnp.dtype(dt), dense_size) for dt in {c.dtype for _, c in sweep}}
    print(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s (read + write); dense matmul "
          + ", ".join(f"{dt} {r / 1e12:.1f} TFLOP/s" for dt, r in rates.items()), flush=True)

    use_torch = on_gpu and not args.no_peers and _torch_usable()
    records = []
    started = time.time()
    meta = {"device": str(jax.devices()[0].device_kind), "date": datetime.date.today().isoformat(),
            "command": " ".join(["jbs-bench"] + (argv if argv is not None else sys.argv[1:])),
            "jax": jax.__version__, "python": platform.python_version(), "gpu_kernels": on_gpu,
            "copy_bytes_per_s": copy_bw, "dense_flops_per_s": rates, **_provenance()}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.suite}_gpu" if on_gpu else f"{args.suite}_cpu_reference"

    def write():  # after every case, so a sweep cut short still leaves its records
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    dense_times = {}
    for index, (suite, case) in enumerate(sweep, 1):
        floor = case.floor_us(copy_bw, rates[case.dtype])
        impls = ["jbs"] + ([] if args.no_peers else _peers_for(case, args.full) if suite == "matmul" else ["xla_dense"])
        runners = RUNNERS if suite == "matmul" else CONV_RUNNERS
        for impl in impls:
            if impl in ("torch_bsr", "jbs_highest") and not use_torch:
                continue
            cache_key = (suite, impl) + tuple(v for k, v in case.__dict__.items() if k not in DENSITY_FREE)
            try:
                if impl == "xla_dense" and cache_key in dense_times:
                    us = dense_times[cache_key]
                else:
                    us = dense_times[cache_key] = runners[impl](case)
            except Exception as error:  # noqa: BLE001 - a failing peer must not stop the sweep
                print(f"  {impl} failed on {case}: {type(error).__name__}: {error}"[:300], flush=True)
                continue
            # the dense peer does all the FLOPs of the dense op, not only the nonzero blocks'
            flops = case.flops() if impl != "xla_dense" else round(case.flops() / case.nnz() * (
                (case.c // case.block_size) * (case.k // case.block_size)))
            if impl == "xla_copy":  # moves the case's bytes, computes nothing
                flops = 0
            path = {}
            if impl == "jbs" and on_gpu:
                path = {"path": path_of(case) if suite == "matmul" else "block kernels"}
            records.append({**case.__dict__, "suite": suite, "impl": impl, **path, "us": us, "floor_us": floor,
                            "bytes": case.bytes() if impl in ("jbs", "xla_copy") else None, "flops": flops,
                            "tflops": flops / us * 1e-6})
        write()
        elapsed = time.time() - started
        print(f"[{index}/{len(sweep)} {elapsed:5.0f}s] {suite} {case.op} {case.dtype} n={case.n} "
              f"bs={case.block_size} density={case.density:.4g}", flush=True)

    write()
    table = report.markdown(meta, records) + "\n" + targets.markdown(meta, records)
    (out / f"{stem}.md").write_text(table)
    report.plot(records, out / f"{stem}.png")
    print("\n" + table)
    print(f"wrote {out / stem}.json, .md and .png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
