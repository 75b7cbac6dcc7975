"""Tensor descriptors made in the kernel (`tl.make_tensor_descriptor`): a loop that loads through one is a loop
num_stages pipelines, and making a descriptor over the output is no read of it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.gemm_users import TENSOR_DESCRIPTORS  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def test_num_stages_pipelines_a_loop_that_loads_through_descriptors():
    found = options(TENSOR_DESCRIPTORS, ("num_stages",))
    made = [v.apply(found.module) for v in found.variants]
    assert made, found.reasons
    assert all("num_stages=" in m for m in made)


def test_split_k_refuses_a_descriptor_store_for_what_it_is_not_for_a_read():
    found = options(TENSOR_DESCRIPTORS, ("split_k",))
    assert not found.variants
    assert any("stores through a tensor descriptor" in r for r in found.reasons), found.reasons
    assert not any("reads c_ptr" in r for r in found.reasons), found.reasons
