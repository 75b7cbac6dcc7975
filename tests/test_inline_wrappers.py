"""rewrites/inline_wrappers.py: a host function's calls of launching functions written out, so that
launch_fusion reads their two launches in one body (the corpus, tests/respellings/fusion_wrappers.py, runs the
fused variants in the interpreter); and the calls it leaves as they are, where writing them out could change what
the program computes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.fusion_wrappers import TUPLE_RETURN  # noqa: E402

from kernelband.proposers.rewriter.analysis.source import ModuleSource  # noqa: E402
from kernelband.proposers.rewriter.proposer import options  # noqa: E402
from kernelband.proposers.rewriter.rewrites.inline_wrappers import inline  # noqa: E402


def test_the_calls_are_written_out_in_the_caller_and_the_launches_fused():
    respelled = inline(ModuleSource(TUPLE_RETURN))
    assert respelled is not None and respelled.touches == {"fused_add_rmsnorm"}
    caller = respelled.ms.source[respelled.ms.source.index("def fused_add_rmsnorm"):]
    # the buffer the first wrapper returns is the caller's `h` from its allocation on; no alias between launches
    assert "h = torch.empty_like(x)" in caller and "h = out" not in caller and "return y, h" in caller
    assert "eps" not in caller and "1e-6" in caller  # the default, a constant, read where it is passed
    found = options(TUPLE_RETURN, ("launch_fusion",))
    assert len(found.variants) == 1 and found.variants[0].rationale.startswith("add, rmsnorm inlined in")


@pytest.mark.parametrize("change, why", [
    (("    out = torch.empty_like(a)\n", "    out = torch.empty_like(a)\n    if a.numel() == 0:\n        return out\n"),
     "a return before the body's end"),
    (("def add(a, b):", "@torch.no_grad()\ndef add(a, b):"), "a decorator"),
    (("def add(a, b):", "def add(a, *b):"), "a starred parameter"),
    (("    h = add(x, residual)\n", "    torch = None\n    h = add(x, residual)\n"),
     "the caller binds a name the wrapper reads from the module"),
    (("    h = add(x, residual)\n", "    h = add(*(x, residual))\n"), "a starred argument"),
    (("    h = add(x, residual)\n", "    h = add(x, residual) + 0\n"), "a call inside an expression with effects"),
])
def test_a_call_whose_writing_out_could_change_the_program_is_left_as_it_is(change, why):
    source = TUPLE_RETURN.replace(*change)
    assert source != TUPLE_RETURN
    respelled = inline(ModuleSource(source))
    text = respelled.ms.source if respelled is not None else source
    caller = text[text.index("def fused_add_rmsnorm"):]
    assert "add(" in caller.replace("_add(", ""), why  # the add call is still a call
