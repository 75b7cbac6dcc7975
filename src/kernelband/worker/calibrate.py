"""Measure a GPU's peak copy bandwidth and dense matmul throughput (run inside a worker)."""

from __future__ import annotations


def measure(do_bench) -> dict:
    import torch

    name = torch.cuda.get_device_name(0)
    best_bw = 0.0
    for n_bytes in (256 << 20, 1 << 30):
        x = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda").uniform_()
        y = torch.empty_like(x)
        ms = do_bench(lambda x=x, y=y: y.copy_(x), warmup=25, rep=200, return_mode="median")
        best_bw = max(best_bw, 2 * n_bytes / (ms * 1e-3) / 1e9)  # bytes read + bytes written
        del x, y
    flops = {}
    n = 8192
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        ms = do_bench(lambda a=a, b=b: a @ b, warmup=25, rep=200, return_mode="median")
        flops[label] = 2 * n**3 / (ms * 1e-3) / 1e12
        del a, b
    torch.cuda.empty_cache()
    return {"device": name, "bw_gbps": best_bw, "tflops": max(flops.values()), "tflops_by_dtype": flops,
            "torch": torch.__version__}
