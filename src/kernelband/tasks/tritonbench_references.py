"""Torch references for the TritonBench-G tasks whose semantics are plain, for the baselines only.

TritonBench's tasks have no torch reference: their correctness is judged against the starting kernel, and
that stays so. These references are what the evaluator times as torch eager and torch.compile beside a
candidate (evaluation/baselines.py); each takes what the performance script hands its `call_op` (the
entry after `to_cuda`) and returns what `call_op` returns, and tests/test_tritonbench_references.py checks
it against the task's own kernel on every shape the interpreter can run. A task is listed only where its
kernel's meaning is certain from its source; left out on purpose:

* matrix_transpose: the wrapper transposes a random matrix of its own, not its input;
* triton_argmax: which index wins a tie between blocks depends on the kernel's block order;
* the dropout, quantization and fp8 tasks: their random streams and rounding modes are the kernel's own.
"""

from __future__ import annotations

import torch


def _add_value(x):
    return x + 10


def _add_pair(inputs):
    x, y = inputs
    return x + y


def _cosine(a):
    return torch.cos(a)


def _sin(x):
    return torch.sin(x)


def _mul2(x):
    return 2 * x


def _square(x):
    return x * x


def _kldiv(inputs):
    x, y = inputs
    return x * torch.log(x / y)


def _softmax_rows(x):
    return torch.softmax(x, dim=1)


def _rmsnorm(inputs, eps=1e-6):
    x, w = inputs
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _l2_norm(x, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + eps)).to(x.dtype)


def _masked_add(inputs, alpha=0.1):
    grad, p_data, p_mask = inputs
    grad.copy_(torch.where(p_mask, grad, grad + p_data * alpha))  # in place, as the kernel; returns None


# task name -> reference(entry)
REFERENCES = {
    "add_value": _add_value,
    "add_example": _add_pair,
    "vector_addition": _add_pair,
    "vector_addition_custom": _add_pair,
    "cosine_compute": _cosine,
    "sin_kernel": _sin,
    "triton_mul2": _mul2,
    "square_matrix": _square,
    "kldiv_compute": _kldiv,
    "softmax_triton1": _softmax_rows,
    "triton_softmax": _softmax_rows,
    "rmsnorm_triton": _rmsnorm,
    "l2_norm_triton1": _l2_norm,
    "masked_add_cuda": _masked_add,
}
