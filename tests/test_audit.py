"""The worker's audit of a call (worker/audit.py), on objects made here: what counts as a plain output, and how
a call's kernels split between Triton and the rest."""

from __future__ import annotations

import collections

import pytest
import torch

from kernelband.worker import audit


class Sub(torch.Tensor):
    pass


class Liar(torch.Tensor):
    @property
    def __class__(self):
        return torch.Tensor


Pair = collections.namedtuple("Pair", "a b")


@pytest.mark.parametrize("make, why", [
    (lambda x: x.as_subclass(Sub), "test_audit.Sub, not a torch.Tensor"),
    (lambda x: x.as_subclass(Liar), "test_audit.Liar, not a torch.Tensor"),
    (lambda x: (x, [x.as_subclass(Sub)]), "the output[1][0] is a"),
    (lambda x: Pair(x, x), "test_audit.Pair, not a torch.Tensor"),
    (lambda x: {"out": x.as_subclass(Sub)}, "the output['out'] is a"),
    (lambda x: torch.empty(4, device="meta"), "on meta, not on cpu"),
    (lambda x: x.to_sparse(), "sparse_coo tensor"),
    (lambda x: object(), "is a object, not a torch.Tensor"),
])
def test_what_is_not_a_plain_output(make, why):
    assert why in audit.output_problem(make(torch.ones(4)), ("cpu",))


def test_plain_outputs_pass_and_their_snapshot_keeps_the_values_returned():
    x = torch.arange(6.0)
    out = (x, [x[2:], None, 3], {"n": 1.5}, torch.max(x.view(2, 3), dim=1))
    assert audit.output_problem(out, ("cpu",)) == ""
    copy = audit.snapshot(out)
    x.zero_()
    assert copy[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and copy[1][0].tolist() == [2.0, 3.0, 4.0, 5.0]


def test_a_torch_function_mode_left_active_is_not_plain():
    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    before, x = audit.function_modes(), torch.ones(2)
    with Mode():
        assert "torch function mode" in audit.output_problem(x, ("cpu",), before)
    assert audit.output_problem(x, ("cpu",), before) == ""


def test_torch_work_counts_compute_not_allocation_or_views():
    x = torch.ones(100)
    with audit.TorchWork() as work:
        out = torch.empty_like(x).view(10, 10).contiguous()
        out = (x + 1).reshape(10, 10).sum(dim=0)
    assert dict(work.torch_elements) == {"add": 100, "sum": 10} and out.shape == (10,)
    work.triton = 330
    assert work.share() == pytest.approx(0.75)


def test_kernel_split_finds_torch_work_and_kernels_outside_the_markers():
    acts = [("spin_kernel", 0.0, 100.0, 1), ("early_kernel", 50.0, 101.0, 2), ("add_kernel", 100.0, 110.0, 3),
            ("void at::native::vectorized_elementwise_kernel<add>", 110.0, 140.0, 4),
            ("Memcpy HtoD (Pageable -> Device)", 140.0, 190.0, 5), ("spin_kernel", 150.0, 151.0, 7),
            ("side_kernel", 141.0, 160.0, 6)]
    split = audit.split_kernels(acts, {"add_kernel", "side_kernel", "early_kernel"})
    assert split["past_end"] == ["Memcpy HtoD (Pageable -> Device)", "early_kernel", "side_kernel"]
    assert split["triton_share"] == pytest.approx(80 / 110)
    assert split["top_other"].startswith("void at::native") and split["top_other_share"] == pytest.approx(30 / 110)
    joined = audit.split_kernels([("spin_kernel", 0.0, 9.0, 1), ("add_kernel", 9.0, 19.0, 2),
                                  ("spin_kernel", 20.0, 21.0, 3)], {"add_kernel"})
    assert joined["past_end"] == [] and joined["triton_share"] == 1.0
    # a spin kernel of the call's own is one of its kernels, not the region's end
    own = audit.split_kernels([("spin_kernel", 0.0, 9.0, 1), ("spin_kernel", 9.0, 30.0, 2),
                               ("spin_kernel", 20.0, 21.0, 3)], set())
    assert own["past_end"] == ["spin_kernel"] and own["other_work"] == 21.0


@pytest.mark.gpu
def test_gpu_a_kernel_on_an_unjoined_stream_ends_past_the_marker_and_a_joined_one_does_not():
    """The kernels' record of one call (CUPTI): work left on a side stream runs past the marker queued where the
    timing records its end event; the same work waited for before the call returns does not."""
    from torch.profiler import profile

    x, side = torch.ones(1 << 26, device="cuda"), torch.cuda.Stream()

    def call(join: bool):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x * 2
            for _ in range(3):
                y = y * 2
        if join:
            torch.cuda.current_stream().wait_stream(side)
        return y

    left = audit.call_kernels(lambda: call(False), profile, set())
    joined = audit.call_kernels(lambda: call(True), profile, set())
    assert left["marker"] and any("elementwise" in k for k in left["past_end"]), left
    assert joined["marker"] and joined["past_end"] == [], joined
    assert joined["triton_share"] == 0.0 and joined["other_work"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("name, past, share", [("side_stream", ["add_kernel"], 1.0), ("good", [], 1.0),
                                               ("token_launch", [], 0.5)])
def test_gpu_the_hostile_candidates_kernels_split(name, past, share):
    """side_stream's kernel ends past the marker; good's is all Triton; token_launch's is mostly torch's (its
    do-nothing kernel takes about as long as the add on a small vector, so the share is under half there)."""
    import importlib.util
    from pathlib import Path

    from torch.profiler import profile

    path = Path(__file__).parent / "hostile" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kb_audit_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = torch.rand(1 << 24, device="cuda"), torch.rand(1 << 24, device="cuda")
    module.add(x, y)  # compiled outside the profiled call
    torch.cuda.synchronize()
    split = audit.call_kernels(lambda: module.add(x, y), profile, audit.triton_names(module))
    assert split["past_end"] == past, split
    assert split["triton_share"] == share if share == 1.0 else split["triton_share"] < share, split
