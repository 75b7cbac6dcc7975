"""data_masks: loads and stores masked by a value the kernel loaded are masked by their bounds alone, the data term
applied with tl.where. Each spelling of the same masked update must give the starting kernel's outputs bit for bit
in the interpreter; the refusals name the fact that is missing."""

from __future__ import annotations

import pytest
from interpreted import run_modules

from kernelband.proposers.rewriter.proposer import options

HEAD = '''\
import torch
import triton
import triton.language as tl

'''

# Each case's `run()` makes its inputs from a fixed seed and returns every tensor the launch may write.
RUN = '''

def run():
    torch.manual_seed(0)
    n = 1000
    p = torch.randn(n, dtype=DTYPE)
    grad = torch.randn(n, dtype=DTYPE)
    m = torch.rand(n) < 0.5
    out = torch.full((n,), 7, dtype=DTYPE)
    {launch}
    return grad, out
'''


def case(kernel: str, launch: str, dtype: str = "torch.float32") -> str:
    return HEAD + f"DTYPE = {dtype}\n\n\n" + kernel + RUN.format(launch=launch)


TRITONBENCH = case('''\
@triton.jit
def masked_add_kernel(grad_ptr, p_ptr, p_mask_ptr, n_elements, alpha, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    p_mask = tl.load(p_mask_ptr + offsets, mask=mask).to(tl.int1)
    mask = mask & ~p_mask
    p = tl.load(p_ptr + offsets, mask=mask)
    grad = tl.load(grad_ptr + offsets, mask=mask)
    grad += p * alpha
    tl.store(grad_ptr + offsets, grad, mask=mask)
''', "masked_add_kernel[(triton.cdiv(n, 128),)](grad, p, m, n, 0.5, BLOCK_SIZE=128)")

# positional masks, `&=`, a comparison with 0 as the data term
POSITIONAL = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    flags = tl.load(m_ptr + offs, mask)
    mask &= flags == 0
    p = tl.load(p_ptr + offs, mask)
    g = tl.load(g_ptr + offs, mask)
    tl.store(g_ptr + offs, g + p * alpha, mask)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, n, 0.5, BLOCK=128)")

# the data term inline in each call; the masked-off lanes of a load without `other` reach a bounds-masked store
INLINE = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = tl.load(m_ptr + offs, mask=offs < n)
    p = tl.load(p_ptr + offs, mask=(offs < n) & (m == 0))
    g = tl.load(g_ptr + offs, mask=(offs < n) & (m == 0))
    tl.store(g_ptr + offs, g + p * alpha, mask=(offs < n) & (m == 0))
    tl.store(out_ptr + offs, p, mask=offs < n)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, out, n, 0.5, BLOCK=128)")

# `other` given: the masked-off lanes hold it, and a store bounded alone shows them
OTHER = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inb = offs < n
    m = tl.load(m_ptr + offs, mask=inb, other=0)
    live = inb & (m != 0)
    p = tl.load(p_ptr + offs, mask=live, other=1.0)
    g = tl.load(g_ptr + offs, mask=live, other=2.0)
    tl.store(g_ptr + offs, g + p * alpha, mask=live)
    tl.store(out_ptr + offs, p * 3 + g, mask=inb)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, out, n, 0.5, BLOCK=128)")

HALF = TRITONBENCH.replace("DTYPE = torch.float32", "DTYPE = torch.float16")
OTHER_HALF = OTHER.replace("DTYPE = torch.float32", "DTYPE = torch.float16")

# the data term a comparison of loaded data (x > 0), not a loaded bool
POSITIVE = case('''\
@triton.jit
def k(g_ptr, p_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < n
    x = tl.load(p_ptr + offs, mask=in_range)
    positive = in_range & (x > 0)
    g = tl.load(g_ptr + offs, mask=positive)
    tl.store(g_ptr + offs, g * x, mask=positive)
    tl.store(out_ptr + offs, g, mask=in_range)
''', "k[(triton.cdiv(n, 128),)](grad, p, out, n, BLOCK=128)")

# a store whose old values are not loaded first: it keeps its mask, the loads change; a store between a load
# and a store to the same addresses (`between`) keeps the later store's mask too: the pointers may alias
NO_OLD = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pm = tl.load(m_ptr + offs, mask=mask).to(tl.int1)
    mask = mask & ~pm
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, g + p * alpha, mask=mask)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, out, n, 0.5, BLOCK=128)")

# other names, the fresh names taken already, the mask's parts in the other order
NAMES = case('''\
@triton.jit
def k(dst, src, sel, count, scale, TILE: tl.constexpr):
    start = tl.program_id(axis=0) * TILE
    idx = start + tl.arange(0, TILE)
    keep = tl.load(sel + idx, mask=idx < count).to(tl.int1)
    acc_old = keep
    valid = ~keep & (idx < count)
    v = tl.load(src + idx, mask=valid)
    acc = tl.load(dst + idx, mask=valid)
    acc = acc * scale + v + acc_old.to(tl.float32)
    tl.store(dst + idx, acc, mask=valid)
''', "k[(triton.cdiv(n, 64),)](grad, p, m, n, 0.5, TILE=64)")

# int loads without `other`: the fill keeps their dtype
INTS = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    m = tl.load(m_ptr + offs, mask=mask).to(tl.int1)
    mask = mask & m
    p = tl.load(p_ptr + offs, mask=mask)
    g = tl.load(g_ptr + offs, mask=mask)
    tl.store(g_ptr + offs, g * 3 + p, mask=mask)
    tl.store(out_ptr + offs, p, mask=offs < n)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, out, n, BLOCK=128)", "torch.int32").replace(
    "torch.randn(n, dtype=DTYPE)", "torch.randint(-2**30, 2**30, (n,), dtype=DTYPE)")

# the mask, the loads and the store in one loop body
LOOP = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, alpha, BLOCK: tl.constexpr):
    base = tl.program_id(0) * 4 * BLOCK
    for i in range(4):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        pm = tl.load(m_ptr + offs, mask=mask).to(tl.int1)
        mask = mask & ~pm
        p = tl.load(p_ptr + offs, mask=mask)
        g = tl.load(g_ptr + offs, mask=mask)
        tl.store(g_ptr + offs, g + p * alpha, mask=mask)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, n, 0.5, BLOCK=32)")

# a load inside the store's value: both change
NESTED = case('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = tl.load(m_ptr + offs, mask=offs < n)
    mask = (offs < n) & (m != 0)
    g = tl.load(g_ptr + offs, mask=mask)
    tl.store(g_ptr + offs, g + tl.load(p_ptr + offs, mask=mask) * alpha, mask=mask)
''', "k[(triton.cdiv(n, 128),)](grad, p, m, n, 0.5, BLOCK=128)")

CASES = {"tritonbench": TRITONBENCH, "positional": POSITIONAL, "inline": INLINE, "other": OTHER, "half": HALF,
         "other_half": OTHER_HALF, "positive": POSITIVE, "no_old": NO_OLD, "names": NAMES, "ints": INTS, "loop": LOOP,
         "nested": NESTED}


def made(source: str) -> tuple[list[str], list[str]]:
    found = options(source, ("data_masks",))
    return [v.apply(found.module) for v in found.variants], list(found.reasons)


def test_every_spelling_is_rewritten():
    for name, source in CASES.items():
        variants, _ = made(source)
        assert len(variants) == 1, name
        compile(variants[0], name, "exec")
        assert "tl.where(" in variants[0], name


def test_the_tritonbench_kernel_is_masked_by_its_bounds():
    (new,), reasons = made(TRITONBENCH)
    assert reasons == []
    assert "keep = ~p_mask\n" in new
    assert "p = tl.where(keep, tl.load(p_ptr + offsets, mask=offsets < n_elements), False)" in new
    assert "grad_old = tl.load(grad_ptr + offsets, mask=offsets < n_elements)" in new
    assert "tl.store(grad_ptr + offsets, tl.where(keep, grad, grad_old), mask=offsets < n_elements)" in new


def test_a_store_without_its_old_values_keeps_its_mask():
    (new,), reasons = made(NO_OLD)
    assert "tl.store(out_ptr + offs, g + p * alpha, mask=mask)" in new
    assert "tl.where(keep, tl.load(p_ptr + offs, mask=offs < n), False)" in new
    assert any("the store's old values are not loaded before it" in r for r in reasons)
    between = OTHER.replace("    tl.store(g_ptr + offs, g + p * alpha, mask=live)\n", "").replace(
        "mask=inb)\n", "mask=inb)\n    tl.store(g_ptr + offs, g + p * alpha, mask=live)\n")
    (new,), reasons = made(between)
    assert "tl.store(g_ptr + offs, g + p * alpha, mask=live)" in new and "p_raw = " in new
    assert any("the store to g_ptr in k keeps its mask" in r for r in reasons), reasons


@pytest.mark.parametrize("offsets", ["tl.program_id(0) + tl.arange(0, BLOCK)",  # windows that overlap
                                     "tl.program_id(0) * BLOCK + tl.program_id(1) + tl.arange(0, BLOCK)"])
def test_a_store_whose_programs_may_share_elements_keeps_its_mask(offsets):
    """Writing back old values is no race only where each program writes elements of its own: overlapping
    windows, or a second program axis the address does not separate, keep the store's mask (the loads change)."""
    source = TRITONBENCH.replace("    block_start = pid * BLOCK_SIZE\n    offsets = block_start + tl.arange(0, BLOCK_SIZE)\n",
                                 f"    offsets = {offsets.replace('BLOCK', 'BLOCK_SIZE')}\n")
    assert source != TRITONBENCH
    (new,), reasons = made(source)
    assert "tl.store(grad_ptr + offsets, grad, mask=mask)" in new and "tl.where(keep, tl.load(p_ptr" in new
    assert any("no proof that each program writes elements of its own" in r for r in reasons), reasons


def test_a_load_in_a_store_changes_with_it():
    (new,), reasons = made(NESTED)
    assert reasons == []
    assert "tl.store(g_ptr + offs, tl.where(keep, g + tl.where(keep, tl.load(p_ptr + offs, mask=offs < n), False) " \
           "* alpha, g_old), mask=offs < n)" in new


def test_fresh_names_and_other():
    (new,), _ = made(NAMES)
    assert "keep_1 = ~keep\n" in new and "acc_old_1 = tl.load(dst + idx, mask=idx < count)" in new
    (new,), reasons = made(OTHER)
    assert reasons == [] and "tl.store(g_ptr + offs, tl.where(keep, g + p * alpha, g_old), mask=inb)" in new
    assert "p_raw = tl.load(p_ptr + offs, mask=inb, other=1.0)" in new
    assert "tl.where(keep, p_raw, tl.cast(1.0, p_raw.dtype))" in new


def test_every_spelling_gives_the_original_outputs_bit_for_bit():
    modules = {}
    for name, source in CASES.items():
        (variant,), _ = made(source)
        modules[f"kb_orig_{name}"], modules[f"kb_new_{name}"] = source, variant
    run_modules(modules, f"""
import importlib
import torch
for name in {list(CASES)!r}:
    old = importlib.import_module("kb_orig_" + name).run()
    new = importlib.import_module("kb_new_" + name).run()
    for a, b in zip(old, new):
        assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
        assert a.view(torch.uint8).equal(b.view(torch.uint8)), (name, (a != b).sum().item())
""")


REFUSED = {
    "bounds only": ('''\
@triton.jit
def k(g_ptr, p_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(g_ptr + offs, tl.load(p_ptr + offs, mask=mask), mask=mask)
''', "k: no load or store is masked by a value the kernel loads"),
    "or": ('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = tl.load(m_ptr + offs, mask=offs < n)
    mask = (offs < n) | (m != 0)
    tl.store(g_ptr + offs, tl.load(p_ptr + offs, mask=mask), mask=offs < n)
''', "no `&` term free of loaded values"),
    "branch": ('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = tl.load(m_ptr + offs, mask=offs < n)
    if FLAG:
        mask = (offs < n) & (m != 0)
        p = tl.load(p_ptr + offs, mask=mask)
        tl.store(g_ptr + offs, p, mask=offs < n)
''', "is masked by loaded values in a branch, not in straight-line code"),
    "set in a branch": ('''\
@triton.jit
def k(g_ptr, p_ptr, m_ptr, n, FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    m = tl.load(m_ptr + offs, mask=mask)
    if FLAG:
        mask = mask & (m != 0)
    p = tl.load(p_ptr + offs, mask=mask)
    tl.store(g_ptr + offs, p, mask=offs < n)
''', "holds a value set in a loop or a branch"),
    "loaded bound": ('''\
@triton.jit
def k(g_ptr, p_ptr, len_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    length = tl.load(len_ptr)
    p = tl.load(p_ptr + offs, mask=(offs < n) & (offs < length))
    tl.store(g_ptr + offs, p, mask=offs < n)
''', "also reads the offsets: it may bound them"),
    "gather": ('''\
@triton.jit
def k(g_ptr, p_ptr, i_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.load(i_ptr + offs, mask=offs < n)
    p = tl.load(p_ptr + i, mask=(offs < n) & (i >= 0))
    tl.store(g_ptr + offs, p, mask=offs < n)
''', "reads an address computed from loaded values"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refusals_name_the_missing_fact(name):
    kernel, reason = REFUSED[name]
    variants, reasons = made(HEAD + kernel)
    assert variants == [] and any(reason in r for r in reasons), reasons
