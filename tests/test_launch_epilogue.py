"""launch_fusion's epilogue form (launch_epilogue.py): an element-wise kernel over the first kernel's output
flattened is computed where the first stores it; and the facts whose absence keeps it two launches."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from respellings.fusion_epilogue import GEMM_BIAS_RELU, ROWS_THEN_SCALE  # noqa: E402

from kernelband.proposers.rewriter.proposer import options  # noqa: E402


def fused(source: str) -> tuple[list[str], list[str], tuple[str, ...]]:
    found = options(source, ("launch_fusion",))
    return [v.apply(found.module) for v in found.variants], [v.rationale for v in found.variants], found.reasons


def test_the_gemm_computes_the_bias_and_relu_where_it_stores_and_drops_the_buffer_store():
    [variant], [why], _ = fused(GEMM_BIAS_RELU)
    assert "computed where mm_kernel stores c" in why and "c no longer stored" in why
    assert "bias_relu_kernel[" not in variant.split("def linear_relu")[1]
    body = variant.split("def mm_kernel_bias_relu_kernel_epilogue")[1].split("\ndef ")[0]
    assert "tl.store(c_ptr" not in body  # the host never reads c again
    assert "% N_1" in body  # the bias at the output's column, from the store's own offsets


def test_the_buffer_store_stays_where_the_host_returns_it():
    [variant], [why], _ = fused(ROWS_THEN_SCALE)
    assert "probs still stored" in why
    body = variant.split("def row_softmax_scale_cast_epilogue")[1].split("\ndef ")[0]
    assert "tl.store(y_ptr" in body and "tl.store(dst_1" in body


def test_a_buffer_allocated_with_values_is_refused():
    source = GEMM_BIAS_RELU.replace("c = torch.empty((M, N)", "c = torch.zeros((M, N)")
    _, whys, reasons = fused(source)
    assert not any("epilogue" in w for w in whys)
    assert any("c is not allocated empty here" in r for r in reasons), reasons


def test_a_consumer_reading_the_buffer_at_other_elements_is_refused():
    source = GEMM_BIAS_RELU.replace("x = tl.load(x_ptr + offs, mask=mask)", "x = tl.load(x_ptr + offs % N, mask=mask)")
    _, whys, reasons = fused(source)
    assert not any("epilogue" in w for w in whys)
    assert any("reads c at other elements than it writes out" in r for r in reasons), reasons


def test_a_producer_storing_the_buffer_inside_a_loop_is_refused():
    source = ROWS_THEN_SCALE.replace(
        "    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)",
        "    for _ in range(1):\n        tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)")
    _, whys, reasons = fused(source)
    assert not any("epilogue" in w for w in whys)
    assert any("stores to probs inside a block" in r for r in reasons), reasons
