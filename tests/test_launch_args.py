"""Which value each kernel parameter gets at a launch with starred arguments (`*x.stride()`, `*strides`) and
`**cfg` (analysis/launch_args.py), and the rewrites that read that mapping where they refused starred
arguments before."""

from __future__ import annotations

import libcst as cst
import pytest

from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code
from kernelband.proposers.rewriter.proposer import options
from kernelband.proposers.rewriter.rewrites.launch_inline import sized_like

HEAD = '''
import torch
import triton
import triton.language as tl

CONSTANT = {"num_warps": 2}


@triton.jit
def k(x_ptr, y_ptr, sxm, sxn, sym, syn, M, N, BLOCK: tl.constexpr):
    pass


@triton.jit
def d(x_ptr, n, scale=1.0, BLOCK: tl.constexpr = 64):
    pass
'''


def launches(body: str) -> list:
    """The launches of a host function `f(x, y, z, args)` with this body."""
    source = HEAD + "\n\ndef f(x, y, z, args):\n" + "".join(f"    {line}\n" for line in body.strip().splitlines())
    return ModuleSource(source).launches


def passed(launch) -> dict[str, str | None]:
    return {p.name: None if (v := launch.value(p.name)) is None else code(v).strip() for p in launch.kernel.params}


def test_a_stride_of_a_tensor_whose_rank_the_host_unpacks_covers_that_many_parameters():
    [launch] = launches("M, N = x.shape\nP, Q = y.shape\nk[(M,)](x, y, *x.stride(), *y.stride(), M, N, BLOCK=64)")
    assert launch.unmapped is None
    assert passed(launch) == {"x_ptr": "x", "y_ptr": "y", "sxm": "x.stride(0)", "sxn": "x.stride(1)",
                              "sym": "y.stride(0)", "syn": "y.stride(1)", "M": "M", "N": "N", "BLOCK": "64"}
    # the values after the starred ones are the call's own arguments, which a rewrite may replace in place
    assert code(launch.arg("N").value) == "N" and launch.arg("sxm") is None and "sxm" in launch.spread


def test_one_starred_argument_of_unknown_extent_covers_the_parameters_the_others_leave():
    [launch] = launches("k[(4,)](x, y, *args, N=8, BLOCK=64)")
    assert launch.unmapped is None
    assert passed(launch)["sxm"] == "args[0]" and passed(launch)["M"] == "args[4]" and passed(launch)["N"] == "8"
    [launch] = launches("k[(4,)](x, *args, 16, 8, BLOCK=64)")  # positional values after it
    assert passed(launch)["y_ptr"] == "args[0]" and passed(launch)["syn"] == "args[4]"
    assert passed(launch)["M"] == "16" and passed(launch)["N"] == "8"


def test_a_parameter_with_a_default_where_the_starred_values_may_stop_leaves_the_extent_unknown():
    [launch] = launches("d[(4,)](*args, BLOCK=64)")  # scale may be passed by *args or left at its default
    assert launch.unmapped == "the extent of `*args` is not known: the parameters after it cannot be mapped"
    assert passed(launch)["n"] is None


def test_two_starred_arguments_map_where_each_extent_is_known_and_refuse_with_the_fact_otherwise():
    [launch] = launches("k[(4,)](x, y, *(1, 2), *[3, 4], 5, 6, BLOCK=64)")
    assert [passed(launch)[p] for p in ("sxm", "sxn", "sym", "syn", "M", "N")] == ["1", "2", "3", "4", "5", "6"]
    [launch] = launches("k[(4,)](x, y, *z.stride(), *y.stride(), 5, 6, BLOCK=64)")  # no rank known
    assert launch.unmapped == "the extent of `*z.stride()` is not known: the parameters after it cannot be mapped"
    assert passed(launch)["M"] is None and passed(launch)["x_ptr"] == "x"


def test_a_name_bound_once_to_a_sequence_gives_its_elements_unless_the_function_changes_it():
    [launch] = launches("s = (x.stride(0), x.stride(1))\nk[(4,)](x, y, *s, *s, 5, 6, BLOCK=64)")
    assert passed(launch)["sxn"] == "x.stride(1)" and passed(launch)["sym"] == "x.stride(0)"
    # the function changes the list: its length is not the literal's, and its elements are read where it is
    [launch] = launches("s = [x.stride(0), x.stride(1)]\ns[0] = 1\nk[(4,)](x, y, *s, *s, 5, 6, BLOCK=64)")
    assert launch.unmapped == "the extent of `*s` is not known: the parameters after it cannot be mapped"
    [launch] = launches("s = [x.stride(0), x.stride(1)]\ns.append(1)\nk[(4,)](x, y, *s, 7, 8, 5, 6, BLOCK=64)")
    assert passed(launch)["sxm"] == "s[0]" and passed(launch)["sym"] == "7"  # by the count the others leave


def test_keyword_dicts_pass_their_keys_parameters_and_launch_options():
    [launch] = launches('cfg = dict(BLOCK=128, num_warps=4)\nk[(4,)](x, y, 1, 2, 3, 4, 5, 6, **cfg, **CONSTANT)')
    assert launch.unmapped is None and passed(launch)["BLOCK"] == "128"
    assert code(launch.value("num_warps")) == "4" and code(launch.keyed["num_warps"]) == "4"
    [launch] = launches('n = 1\ncfg = {"BLOCK": n}\nn = 2\nk[(4,)](x, y, 1, 2, 3, 4, 5, 6, **cfg)')
    assert passed(launch)["BLOCK"] == "cfg['BLOCK']"  # read from the dict where the launch is, not n again
    [launch] = launches('cfg = {"BLOCK": 64}\ncfg["BLOCK"] = 32\nk[(4,)](x, y, 1, 2, 3, 4, 5, 6, **cfg)')
    assert launch.unmapped == "the keys of `**cfg` are not known: which parameters it sets is not known"


def test_keyword_dicts_count_toward_the_extent_of_a_starred_argument():
    [launch] = launches('cfg = {"N": 8, "BLOCK": 64}\nk[(4,)](x, y, *args, **cfg)')
    assert passed(launch)["M"] == "args[4]" and passed(launch)["N"] == "8"


def test_configs_of_an_autotuned_kernel_count_toward_the_extent_of_a_starred_argument():
    source = HEAD.replace("@triton.jit\ndef k(", "@triton.autotune(configs=[triton.Config({'BLOCK': 32})], key=['M'])"
                          "\n@triton.jit\ndef k(") + "\n\ndef f(x, y, args):\n    k[(4,)](x, y, *args)\n"
    [launch] = ModuleSource(source).launches
    assert launch.unmapped is None and passed(launch)["N"] == "args[5]" and passed(launch)["BLOCK"] is None


@pytest.mark.parametrize("allocation, like", [
    ("torch.empty_like(x)", "x"), ("x.new_empty(x.shape)", "x"), ("torch.empty(x.shape, device=x.device)", "x"),
    ("torch.zeros(x.size(), dtype=x.dtype)", "x"), ("torch.empty((M, N), device=x.device)", "x"),
    ("torch.empty(M, N)", "x"), ("y.new_zeros((M, N))", "x"), ("torch.full(x.shape, 0.0)", "x"),
    ("torch.empty((N, M))", None), ("torch.empty(x.shape[0])", None), ("torch.empty_strided(x.shape, (1, 1))", None),
])
def test_an_allocation_is_sized_like_the_tensor_whose_sizes_it_takes(allocation, like):
    ms = ModuleSource(f"def f(x, y):\n    M, N = x.shape\n    h = {allocation}\n")
    scope = next(s for s in ms.scopes if s.name == "f")
    assert sized_like(scope, scope.value("h")) == like


STARRED = HEAD + '''

@triton.jit
def add_rows(a_ptr, b_ptr, c_ptr, stride_m, stride_n, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * stride_m + cols * stride_n
    tl.store(c_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def add(a, b):
    M, N = a.shape
    c = torch.empty_like(a)
    add_rows[(M,)](a, b, c, *a.stride(), N, BLOCK=triton.next_power_of_2(N))
    return c
'''


def test_divisibility_hints_read_the_values_a_starred_stride_passes():
    found = options(STARRED, ("divisibility_hints",))
    assert found.variants, found.reasons
    out = found.variants[0].apply(found.module)
    assert "enumerate((a.stride(0), a.stride(1), N))" in out
    assert "add_rows[(M,)](a, b, c, *a.stride(), N, BLOCK=triton.next_power_of_2(N), ALIGNED=" in out
    unknown = STARRED.replace("    M, N = a.shape\n", "    M, N = a.shape[0], a.shape[-1]\n")
    found = options(unknown.replace("*a.stride(), N,", "*a.stride(), *b.stride(), N,").replace(
        "stride_n, n_cols", "stride_n, sb_m, sb_n, n_cols"), ("divisibility_hints",))
    assert any("the extent of `*a.stride()` is not known" in r for r in found.reasons), found.reasons


BRANCHED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows(x_ptr, y_ptr, stride_m, stride_n, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    tl.store(y_ptr + row * stride_m + cols, tl.load(x_ptr + row * stride_m + cols, mask=mask) * 2, mask=mask)


@triton.jit
def square_rows(x_ptr, y_ptr, stride_m, stride_n, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * stride_m + cols, mask=mask)
    tl.store(y_ptr + row * stride_m + cols, v * v, mask=mask)


def run(x, square):
    M, N = x.shape
    h = torch.empty_like(x)
    out = torch.empty_like(x)
    scale_rows[(M,)](x, h, *x.stride(), N, BLOCK=256)
    if square:
        square_rows[(M,)](h, out, *x.stride(), N, BLOCK=256)
    return out
'''


def test_launch_fusion_reads_starred_strides_and_still_refuses_a_pair_that_only_some_runs_make():
    fused = options(BRANCHED, ("launch_fusion",))
    assert fused.variants, fused.reasons
    text = fused.variants[0].apply(fused.module)
    assert "stride_m=x.stride(0), stride_n=x.stride(1)" in text
    # where the second launch does not run, the first runs as it was, its starred strides kept
    assert "    else:\n        scale_rows[(M,)](x, h, *x.stride(), N, BLOCK=256)\n" in text
    first_in_branch = BRANCHED.replace(
        "    scale_rows[(M,)](x, h, *x.stride(), N, BLOCK=256)\n    if square:\n        square_rows",
        "    if square:\n        scale_rows[(M,)](x, h, *x.stride(), N, BLOCK=256)\n    square_rows")
    refused = options(first_in_branch, ("launch_fusion",))
    assert not refused.variants
    assert refused.reasons == ("the scale_rows launch in run runs inside `if square`, which the square_rows launch "
                               "in run is not in",)


def test_a_launch_option_in_a_keyword_dict_is_read_as_the_launch_s():
    source = STARRED.replace("N, BLOCK=triton.next_power_of_2(N))", "N, **opts)").replace(
        "    c = torch.empty_like(a)\n", "    c = torch.empty_like(a)\n    opts = {'BLOCK': 256, 'num_warps': 2}\n")
    [launch] = [la for la in ModuleSource(source).launches if la.kernel.name == "add_rows"]
    assert isinstance(launch.value("BLOCK"), cst.Integer) and code(launch.value("num_warps")) == "2"


@pytest.mark.parametrize("binding, extent", [
    ("t = x.reshape(M, N)", 2), ("t = torch.empty((M, N, 4), device=x.device)", 3), ("t = torch.zeros(M, N)", 2),
    ("t = torch.empty_like(x)", 2), ("t = x.new_empty(x.shape)", 2), ("t = x.contiguous()", 2),
    ("t = torch.randn((M,))", 1), ("t = x.t()", 2),
    ("t = z.t()", None),  # z's rank is not known: t() keeps a rank of 0, 1 or 2
    ("t = z.reshape(*shape)", None),
])
def test_the_rank_of_a_tensor_the_host_builds_fixes_the_extent_of_its_strides(binding, extent):
    [launch] = launches(f"M, N = x.shape\n{binding}\nk[(4,)](x, y, *t.stride(), *y.stride(), 5, 6, BLOCK=64)")
    if extent is None:
        assert launch.unmapped == "the extent of `*t.stride()` is not known: the parameters after it cannot be mapped"
    else:
        assert launch.unmapped is None  # y's strides: the count the others leave
        assert len([p for p, s in launch.spread.items() if s.index == 2]) == extent
