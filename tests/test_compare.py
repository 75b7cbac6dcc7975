"""Parent-side correctness: what `compare` accepts, what it rejects, and what it says about it."""

from __future__ import annotations

import math
import os

import pytest
import torch

from kernelband import tensorfile
from kernelband.evaluation.compare import Outputs, compare, mismatched_paths
from kernelband.worker.outputs import flatten

ATOL, RTOL = 1e-3, 1e-1


def outputs(obj) -> Outputs:
    """What the parent gets back from a worker whose module returned `obj`."""
    return Outputs(*flatten({"result": obj}))


def check(ref, cand, atol=ATOL, rtol=RTOL):
    return compare(outputs(ref), outputs(cand), atol, rtol)


@pytest.fixture
def ref():
    torch.manual_seed(0)
    return torch.randn(64, 33) + 3.0  # no element near zero


def test_identical_outputs_match(ref):
    assert check(ref, ref.clone()) is None


def test_differences_within_atol_plus_rtol_times_ref_pass(ref):
    # |cand - ref| <= atol + rtol * |ref|: 5 % relative error passes with rtol = 10 %.
    assert check(ref, ref * 1.05) is None
    assert check(torch.zeros(8), torch.full((8,), 0.5 * ATOL)) is None


def test_relative_error_beyond_rtol_fails_with_errors_reported():
    ref = torch.full((4, 4), 2.0)
    cand = ref.clone()
    cand[1, 2] = 2.5  # abs error 0.5, rel error 0.25 > rtol 0.1
    m = check(ref, cand)
    assert m is not None
    assert (m.outcome, m.check) == ("wrong_output", "allclose")
    assert m.max_abs == pytest.approx(0.5)
    assert m.max_rel == pytest.approx(0.25)
    assert "max abs error 0.5" in m.detail and "max rel error 0.25" in m.detail


def test_tighter_tolerances_are_honoured(ref):
    assert check(ref, ref * 1.05, rtol=0.01) is not None


def test_the_wrong_output_of_a_tuple_is_named():
    a, b, c = torch.ones(5), torch.ones(3) * 2, torch.arange(4.0) + 1
    bad_b = b.clone()
    bad_b[0] = 9.0
    assert check((a, b, c), (a, b, c)) is None
    m = check((a, b, c), (a, bad_b, c))
    assert m.path == "result[1]"
    assert m.detail.startswith("result[1]:")
    assert m.max_abs == pytest.approx(7.0)


def test_the_wrong_output_of_a_dict_is_named_and_key_order_does_not_matter():
    ref = {"out": torch.ones(4), "lse": torch.full((2,), 3.0)}
    assert check(ref, {"lse": ref["lse"].clone(), "out": ref["out"].clone()}) is None
    m = check(ref, {"out": ref["out"], "lse": ref["lse"] * 2})
    assert (m.outcome, m.check, m.path) == ("wrong_output", "allclose", "result.lse")


def test_missing_or_extra_outputs_are_a_structure_mismatch():
    x = torch.ones(3)
    m = check((x, x), (x,))
    assert (m.outcome, m.check, m.path) == ("wrong_output", "structure", "result[1]")
    m = check({"out": x}, {"out": x, "extra": x})
    assert (m.check, m.path) == ("structure", "result.extra")
    m = check(x, [x])  # a tensor where the reference returns a one-element list
    assert m.check == "structure"


def test_shape_mismatch_is_named():
    m = check(torch.ones(4, 8), torch.ones(8, 4))
    assert (m.outcome, m.check) == ("wrong_output", "shape")
    assert "[8, 4]" in m.detail and "[4, 8]" in m.detail


def test_dtype_mismatch_is_named_even_when_values_agree():
    m = check(torch.ones(4, dtype=torch.float32), torch.ones(4, dtype=torch.float16))
    assert (m.outcome, m.check) == ("wrong_output", "dtype")
    assert "float16" in m.detail and "float32" in m.detail


@pytest.mark.parametrize("bad, name", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "inf")])
def test_non_finite_values_the_reference_lacks_are_suspicious(ref, bad, name):
    cand = ref.clone()
    cand[3, 4] = bad
    cand[7, 1] = bad
    m = check(ref, cand)
    assert (m.outcome, m.check) == ("suspicious", name)
    assert f"2 {name.upper()}" in m.detail


def test_nan_where_the_reference_has_nan_too_is_fine(ref):
    r = ref.clone()
    r[0, 0] = math.nan
    assert check(r, r.clone()) is None
    moved = r.clone()
    moved[0, 0], moved[0, 1] = 1.0, math.nan  # NaN in another place: an ordinary wrong output
    m = check(r, moved)
    assert m.outcome == "wrong_output"


def test_all_zero_output_where_the_reference_is_not_is_suspicious(ref):
    m = check(ref, torch.zeros_like(ref))
    assert (m.outcome, m.check) == ("suspicious", "zeros")
    assert check(torch.zeros(4), torch.zeros(4)) is None


def test_integer_tensors_must_match_exactly():
    ref = torch.tensor([1000, 5, 7, -3], dtype=torch.int32)
    assert check(ref, ref.clone()) is None
    off_by_one = ref.clone()
    off_by_one[0] = 1001  # within atol + rtol * |ref| = 100, but an index or a count is exact
    m = check(ref, off_by_one)
    assert (m.outcome, m.check, m.path) == ("wrong_output", "equal", "result")
    assert m.max_abs == 1.0
    m = check(ref.to(torch.int64), ref.to(torch.int8))
    assert m.check == "dtype"


def test_bool_tensors_must_match_exactly():
    ref = torch.tensor([True, False, True])
    assert check(ref, ref.clone()) is None
    assert check(ref, torch.tensor([True, True, True])).check == "equal"


def test_plain_values_are_compared_with_the_tolerances():
    assert check((torch.ones(2), 2.0), (torch.ones(2), 2.05)) is None
    m = check((torch.ones(2), 2.0), (torch.ones(2), 3.0))
    assert (m.check, m.path, m.max_abs) == ("allclose", "result[1]", 1.0)
    assert check("relu", "gelu").check == "value"


def test_outputs_load_reads_the_worker_file_and_removes_it(tmp_path):
    entries, tensors = flatten({"result": {"out": torch.arange(6.0).reshape(2, 3)}})
    path = tmp_path / "out.tensors"
    layout = tensorfile.write(tensors, str(path))
    loaded = Outputs.load({"file": str(path), "layout": layout, "entries": entries})
    assert not path.exists()
    assert torch.equal(loaded.tensors["result.out"], torch.arange(6.0).reshape(2, 3))
    assert loaded.nbytes() == 6 * 4  # the result's bytes, for the speed-of-light bound
    assert compare(loaded, outputs({"out": torch.arange(6.0).reshape(2, 3)}), ATOL, RTOL) is None
    assert os.listdir(tmp_path) == []


def test_an_input_the_reference_updates_in_place_is_compared_too():
    out, buf = torch.ones(3), torch.arange(4.0)
    ref = Outputs(*flatten({"result": out, "inputs": {"1": buf}}))
    stale = Outputs(*flatten({"result": out, "inputs": {"1": torch.zeros(4) + 7}}))
    assert compare(ref, Outputs(*flatten({"result": out, "inputs": {"1": buf.clone()}})), ATOL, RTOL) is None
    m = compare(ref, stale, ATOL, RTOL)
    assert (m.outcome, m.path) == ("wrong_output", "inputs.1")


def test_ignored_outputs_are_left_out_and_all_disagreements_are_found():
    """The reference's own non-reproducible test outputs (geglu_tanh_triton's torch.empty_like columns) are
    found as a set of paths and left out of the comparison; every other output still counts."""
    a = {"case_1": torch.ones(4), "case_2": torch.zeros(4), "case_3": torch.arange(4.0)}
    b = {"case_1": torch.ones(4), "case_2": torch.full((4,), math.nan), "case_3": torch.arange(4.0) * 2}
    found = mismatched_paths(outputs(a), outputs(b), ATOL, RTOL)
    assert found == ["result.case_2", "result.case_3"]
    assert compare(outputs(a), outputs(b), ATOL, RTOL, ignore=set(found)) is None
    worse = dict(b, case_1=torch.ones(4) * 3)
    mismatch = compare(outputs(a), outputs(worse), ATOL, RTOL, ignore=set(found))
    assert mismatch is not None and mismatch.path == "result.case_1"
