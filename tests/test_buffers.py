"""The host facts (analysis/buffers.py, host_flow.py): how a function's launches follow each other, what each
kernel reads and writes through what the host passes, which names may be the same memory, and what the host
does with a buffer besides launching."""

from __future__ import annotations

from kernelband.proposers.rewriter.analysis.buffers import host_functions
from kernelband.proposers.rewriter.analysis.source import ModuleSource

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _load_twice(p, offs):
    return tl.load(p + offs) * 2


@triton.jit
def copy(src, dst, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@triton.jit
def blocks(src, dst, count, n, B: tl.constexpr):
    block = tl.make_block_ptr(base=src, shape=(n,), strides=(1,), offsets=(tl.program_id(0) * B,),
                              block_shape=(B,), order=(0,))
    tl.atomic_add(count, 1)
    tl.store(dst + tl.arange(0, B), _load_twice(src, tl.arange(0, B)) + tl.load(block, boundary_check=(0,)))
'''


def host(body: str):
    ms = ModuleSource(KERNELS + "\n\ndef f(x, y, flag):\n" + body)
    [function] = [h for h in host_functions(ms) if h.name == "f"]
    return function


def test_launches_in_two_branches_are_alternatives_and_one_before_an_if_leads_into_each():
    f = host("""    a = torch.empty_like(x)
    copy[(4,)](x, a, 64, B=16)
    if flag:
        copy[(4,)](a, y, 64, B=16)
    else:
        n = 64
        copy[(2,)](y, a, n, B=32)
    return a
""")
    first, one, other = f.sites
    assert f.order(one, other).kind == "alternative"
    assert "two branches of `if flag`" in f.order(one, other).why
    into_else = f.order(first, other)
    assert into_else.kind == "sequence" and [t.value for t in into_else.tests] == ["flag"]
    assert [s.part for s in into_else.branches] == ["orelse"] and len(into_else.between) == 1  # n = 64
    assert [(a.kernel.name, b.kernel.name) for a, b, _ in f.pairs()] == [("copy", "copy")] * 2


def test_a_launch_in_a_loop_or_a_handler_does_not_follow_one_outside_it():
    f = host("""    copy[(4,)](x, y, 64, B=16)
    for i in range(3):
        copy[(4,)](y, x, 64, B=16)
    try:
        copy[(4,)](x, y, 64, B=16)
    except RuntimeError:
        copy[(2,)](x, y, 64, B=32)
""")
    first, looped, tried, retried = f.sites
    assert f.order(first, looped).kind == "apart" and "inside a loop" in f.order(first, looped).why
    assert f.order(tried, retried).kind == "alternative"
    assert f.pairs() == []


def test_reads_and_writes_follow_block_pointers_atomics_and_helpers():
    f = host("""    out = torch.empty_like(x)
    count = torch.zeros(1, dtype=torch.int32)
    blocks[(4,)](x.view(-1), out, count, x.numel(), B=16)
    return out
""")
    [site] = f.sites
    assert site.touches.reads == {"src", "count"} and site.touches.writes == {"dst", "count"}
    assert {p.param: p.root for p in site.passed.values()} == {"src": "x", "dst": "out", "count": "count"}
    assert site.reads == {"x", "count"} and site.writes == {"out", "count"}


def test_views_are_their_sources_memory_allocations_are_fresh_and_parameters_may_be_any_other():
    f = host("""    a = torch.empty_like(x)
    v = a.view(-1)[1:]
    c = x.clone()
    z = y.contiguous()
    copy[(4,)](x, a, 64, B=16)
    return v, c, z
""")
    assert f.may_alias("v", "a") and not f.may_alias("a", "c") and not f.may_alias("c", "x")
    assert f.may_alias("z", "y") and f.may_alias("x", "y")  # two parameters: the caller may pass one tensor twice
    assert f.fresh("a") and f.fresh("c") and not f.fresh("z")


def test_the_host_returns_reads_or_hands_on_a_buffer_and_reading_its_sizes_is_no_use():
    f = host("""    a = torch.empty_like(x)
    b = torch.empty_like(a)
    n = a.numel()
    copy[(4,)](x, a, n, B=16)
    copy[(4,)](a, b, a.stride(0), B=16)
    s = b.sum()
    torch.save(b, "b.pt")
    return b[0]
""")
    first, second = f.sites
    assert f.uses("a", [first, second]) == []
    assert [u.kind for u in f.uses("b", [first, second])] == ["read", "handed on", "returned"]
    assert [u.kind for u in f.uses("a", [first])] == ["handed on"]  # the second launch passes it on


def test_a_grid_is_read_where_its_launch_is():
    f = host("""    grid = (triton.cdiv(64, 16),)
    copy[grid](x, y, 64, B=16)
    grid = lambda meta: (triton.cdiv(64, meta["B"]), 2)
    copy[grid](y, x, 64, B=32)
    copy[lambda meta: (meta["B"],)](y, x, 64)
""")
    first, second, third = f.sites
    assert f.grid(first) == (["triton.cdiv(64, 16)"], "")
    assert f.grid(second) == (["triton.cdiv(64, (32))", "2"], "")
    assert f.grid(third)[0] is None and "block sizes its launch does not pass" in f.grid(third)[1]


def test_a_value_set_on_a_line_of_several_statements_reaches_the_launch_and_a_trailing_comma_makes_a_grid():
    f = host("""    a = torch.empty_like(x); n = 64
    copy[4,](x, a, n, B=16)
""")
    [site] = f.sites
    assert f.grid(site) == (["4"], "")
    assert f.reaching("n", site).value == "64" and f.fresh("a")
