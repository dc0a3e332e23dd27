"""Triton's autotuner over a tiled GEMM's tile shapes: the side-by-side figure
for kiln's own tuning (the `cuda_tune` example), run on the same GPU.

One process tunes once and prints one JSON line:

    python3 autotune_gemm.py --cache DIR [--cache-results]

Run it twice on one cache folder: the first run is Triton's cold tune (every
config compiled and benchmarked), the second a new process on a warm kernel
cache (compiles come from the cache; the configs are benchmarked again unless
--cache-results keeps the autotuner's answer on disk).
"""

import argparse
import json
import os
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", required=True, help="Triton's cache folder")
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--cache-results", action="store_true")
    args = parser.parse_args()
    os.environ["TRITON_CACHE_DIR"] = args.cache

    started = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    configs = [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=3)
        for (m, n, k, w) in [
            (32, 32, 32, 2), (32, 64, 32, 4), (64, 32, 32, 4), (64, 64, 32, 4),
            (64, 64, 64, 4), (64, 128, 32, 4), (128, 64, 32, 4), (128, 128, 32, 8),
            (128, 128, 64, 8), (64, 256, 32, 8), (256, 64, 32, 8), (128, 256, 32, 8),
            (256, 128, 32, 8), (32, 128, 64, 4), (128, 32, 64, 4), (16, 64, 64, 2),
        ]
    ]

    @triton.autotune(configs=configs, key=["M", "N", "K"], cache_results=args.cache_results)
    @triton.jit
    def gemm(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            x = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :])
            y = tl.load(b + (k0 + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc)

    size = args.size
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    ready = time.perf_counter()

    def grid(meta):
        return (triton.cdiv(size, meta["BLOCK_M"]), triton.cdiv(size, meta["BLOCK_N"]))

    gemm[grid](a, b, c, size, size, size)
    torch.cuda.synchronize()
    tuned = time.perf_counter()

    expected = (a.float() @ b.float())
    error = (c - expected).abs().max().item()
    best = gemm.best_config
    print(json.dumps({
        "tool": "triton",
        "version": triton.__version__,
        "configs": len(configs),
        "size": size,
        "cache_results": args.cache_results,
        "tune_s": tuned - ready,
        "process_s": tuned - started,
        "winner": best.kwargs | {"num_warps": best.num_warps},
        "max_abs_error": error,
    }))


if __name__ == "__main__":
    main()
