"""Float16 matrix product with float32 accumulation, deliberately naive: 32x32x32 tiles, no pipelining, row-major tile order."""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Tiles in plain row-major order: neighbouring programs share A's rows but not B's columns.
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        # Zeros outside the matrices add nothing to the dot product.
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (k + offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(k + offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(tl.float16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 32) * triton.cdiv(N, 32),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32,
                        num_warps=4, num_stages=1)
    return c


# --------------------------------- kernelband task ---------------------------------
import torch  # noqa: E402  (the task definition runs on its own)

ENTRY = "matmul"
# 256^3 (0.4 MB moved, 34 MFLOP) to 8192^3 (400 MB moved, 1.1 TFLOP); square, skinny and odd sizes.
SHAPES = [
    dict(M=256, N=256, K=256),
    dict(M=512, N=512, K=512),
    dict(M=1000, N=1000, K=1000),
    dict(M=1024, N=1024, K=1024),
    dict(M=2048, N=2048, K=2048),
    dict(M=3000, N=3000, K=3000),
    dict(M=4096, N=4096, K=1000),
    dict(M=4096, N=4096, K=4096),
    dict(M=8192, N=1024, K=4096),
    dict(M=256, N=8192, K=8192),
    dict(M=8192, N=8192, K=256),
    dict(M=8192, N=8192, K=8192),
]
HELD_OUT = [dict(M=1337, N=2311, K=1001), dict(M=5000, N=1003, K=3001)]
INTERPRETER_SHAPES = [dict(M=64, N=64, K=64), dict(M=50, N=70, K=45)]
# Without it the interpreter would run the full-size held-out shapes on the CPU.
INTERPRETER_HELD_OUT = [dict(M=33, N=65, K=97)]
# B is scaled by 1/sqrt(K), like a weight initialised for fan-in K, so C is about N(0, 1) at every K and
# one tolerance fits all shapes. On an H100, torch's own float16 matmul (with or without reduced-precision
# reductions) and this kernel land within one float16 ulp of the reference at every shape: at most 3.9e-3
# where |C| is 4 to 8, which RTOL covers, and far below ATOL near C = 0. So the defaults stand. They still
# pass a split-K that adds a few float32 partials in float16, and (in a torch emulation at K >= 1000) fail
# a kernel that accumulates all of K in float16, as they should: the task asks for float32 accumulation.
ATOL, RTOL = 1e-3, 1e-1


def make_inputs(device, M, N, K):
    a = torch.randn(M, K, device=device).half()
    b = (torch.randn(K, N, device=device) * K**-0.5).half()
    return a, b


def reference(a, b):
    return (a.float() @ b.float()).half()


def baseline(a, b):  # what a user runs in torch: cuBLAS in half precision, not the float32 reference
    return a @ b


def bytes_moved(M, N, K):
    return 2 * (M * K + K * N + M * N)


def flops(M, N, K):
    return 2 * M * N * K
