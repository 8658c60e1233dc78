"""HBM rates by direction: write-only, read-only and copy, at the byte counts of the seed
shape's weight gradient (whose output is its bytes: 151 MB at density 1/2 in bf16, 75 MB at
1/4, 38 MB at 1/8).

Why: jbs-bench's floor divides every op's bytes by the copy rate (read + write counted). A
weight gradient's bytes are nearly all writes, so if HBM writes alone run slower than the copy
rate, the dw floor is below what the hardware can do. Each rate is a CUDA-graph replay
(jbs.bench.timing.time_torch_graph) over buffers rotated beyond L2, the harness of the copy
rate. Prints one line per size and direction. Needs torch with CUDA.

    python benchmarks/microbench/hbm_rates.py
"""

import torch

from jbs.bench.timing import rotation, time_torch_graph


def main() -> None:
    print("direction   MB     us      GB/s (bytes moved / time; copy counts read + write)")
    for num_bytes in (151_000_000, 75_500_000, 37_700_000, 2**30):
        sets = rotation(num_bytes)  # enough buffers that a replay's bytes exceed the L2
        buffers = [torch.empty(num_bytes, dtype=torch.uint8, device="cuda").random_() for _ in range(sets)]
        targets = [torch.empty_like(b) for b in buffers]
        sums = [torch.empty((), dtype=torch.int64, device="cuda") for _ in buffers]
        cases = {
            "write": (lambda dst: dst.fill_(7), [(t,) for t in targets], num_bytes),
            "read": (lambda src, out: torch.sum(src.view(torch.int64), dim=0, out=out),
                     list(zip(buffers, sums)), num_bytes),
            "copy": (lambda src, dst: dst.copy_(src), list(zip(buffers, targets)), 2 * num_bytes),
        }
        for name, (fn, input_sets, moved) in cases.items():
            us = time_torch_graph(fn, input_sets, calls=10)
            print(f"{name:8s} {num_bytes / 1e6:7.1f} {us:8.1f} {moved / us / 1e3:8.0f}", flush=True)
        del buffers, targets, sums
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
