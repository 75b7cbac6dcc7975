"""Gathers by an index tensor, for the tiny language model's step (step.py): rows of an embedding table by
token id, and each row's probability of its target token as a negative log-likelihood."""

import torch
import triton
import triton.language as tl


@triton.jit
def embedding_kernel(ids_ptr, table_ptr, out_ptr, dim, table_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    # The token id is read from memory: which table row a program copies depends on the data.
    token = tl.load(ids_ptr + row)
    cols = tl.arange(0, BLOCK)
    for start in range(0, dim, BLOCK):
        mask = start + cols < dim
        values = tl.load(table_ptr + token * table_row_stride + start + cols, mask=mask)
        tl.store(out_ptr + row * dim + start + cols, values, mask=mask)


def embedding(ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """table[ids]: one row of `table` per id, in the shape of `ids` plus the table's width."""
    flat = ids.reshape(-1)
    dim = table.shape[1]
    out = torch.empty((flat.numel(), dim), device=table.device, dtype=table.dtype)
    embedding_kernel[(flat.numel(),)](flat, table, out, dim, table.stride(0), BLOCK=128, num_warps=2)
    return out.view(*ids.shape, dim)


@triton.jit
def nll_kernel(probs_ptr, targets_ptr, out_ptr, row_stride):
    row = tl.program_id(axis=0)
    target = tl.load(targets_ptr + row)
    p = tl.load(probs_ptr + row * row_stride + target)
    tl.store(out_ptr + row, -tl.log(p))


def token_nll(probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log(probs[i, targets[i]]) for each row i of a float32 matrix of probabilities."""
    flat = targets.reshape(-1)
    out = torch.empty(flat.numel(), device=probs.device, dtype=torch.float32)
    nll_kernel[(flat.numel(),)](probs, flat, out, probs.stride(0), num_warps=1)
    return out
