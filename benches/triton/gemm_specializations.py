"""Triton's side of the main job: N specializations of one tiled GEMM, each
made and launched once, the work `kiln warm` does on a folder holding one
GEMM file with N `// kiln specialize` lines (each a different constant, so
no two share a compiled kernel).

One process prints one JSON line:

    python3 gemm_specializations.py --cache DIR [--count 64]

Run it twice on one cache folder: the first run is Triton's cold start
(every specialization compiled), the second a new process on a warm cache
(every specialization found in Triton's cache and loaded). `first_launches_s`
times from the first launch to the last launch's end (what a program waits
for before its kernels run); `process_s` times from the script's start,
imports included.
"""

import argparse
import json
import os
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", required=True, help="Triton's cache folder")
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = args.cache

    started = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a, b, c, m, n, k, SALT: tl.constexpr, TILE: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * TILE + tl.arange(0, TILE)
        cols = pid_n * TILE + tl.arange(0, TILE)
        inner = tl.arange(0, TILE)
        acc = tl.zeros((TILE, TILE), dtype=tl.float32)
        for t in range(0, tl.cdiv(k, TILE)):
            ks = t * TILE + inner
            a_tile = tl.load(a + rows[:, None] * k + ks[None, :],
                             mask=(rows[:, None] < m) & (ks[None, :] < k), other=0.0)
            b_tile = tl.load(b + ks[:, None] * n + cols[None, :],
                             mask=(ks[:, None] < k) & (cols[None, :] < n), other=0.0)
            acc += tl.dot(a_tile, b_tile, input_precision="ieee")
        acc += SALT
        tl.store(c + rows[:, None] * n + cols[None, :], acc,
                 mask=(rows[:, None] < m) & (cols[None, :] < n))

    size = args.size
    a = torch.randn(size, size, device="cuda", dtype=torch.float32)
    b = torch.randn(size, size, device="cuda", dtype=torch.float32)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    tile = 16
    grid = (triton.cdiv(size, tile), triton.cdiv(size, tile))
    torch.cuda.synchronize()

    launches = time.perf_counter()
    for salt in range(args.count):
        matmul[grid](a, b, c, size, size, size, SALT=float(salt), TILE=tile)
    torch.cuda.synchronize()
    ended = time.perf_counter()

    expected = a @ b + float(args.count - 1)
    error = (c - expected).abs().max().item()
    print(json.dumps({
        "count": args.count,
        "first_launches_s": ended - launches,
        "process_s": ended - started,
        "max_error": error,
        "triton": triton.__version__,
    }))


if __name__ == "__main__":
    main()
