"""Device time per kernel of one block-sparse conv op (conv_probe.py's case), through CUPTI
(torch.profiler), to tell a kernel's own time from the rest of an op:

    python3 conv_kernel_times.py [forward|dx|dw] [kh]x[kw] [block_size] [density] [repeats]
"""

import sys

import torch

from conv_probe import conv_case


def main() -> None:
    fn, x, w, name = conv_case(sys.argv[1:5])
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    for _ in range(3):
        fn(x, w).block_until_ready()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            out = fn(x, w)
        out.block_until_ready()
    rows = [(e.key, e.device_time_total / repeats, e.count / repeats) for e in prof.key_averages()
            if e.device_time_total > 0]
    print(f"{name}: us per call, calls per op")
    for kernel, us, calls in sorted(rows, key=lambda r: -r[1]):
        print(f"  {us:8.1f} {calls:4.1f}  {kernel[:110]}")


if __name__ == "__main__":
    main()
