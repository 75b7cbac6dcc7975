"""The raw tensor files between a worker and the parent: every dtype a worker stores comes back bit for bit,
and a layout that does not fit the file is refused before anything is read."""

from __future__ import annotations

import pytest
import torch

from kernelband import tensorfile
from kernelband.evaluation.compare import Outputs, compare
from kernelband.worker.outputs import flatten


def _roundtrip(tensors: dict, tmp_path) -> dict:
    path = str(tmp_path / "t.tensors")
    layout = tensorfile.write(tensors, path)
    return tensorfile.read(path, layout)


def test_every_stored_dtype_and_odd_shapes_come_back_exactly(tmp_path):
    torch.manual_seed(0)
    tensors = {name: (torch.rand(3, 5) * 100).to(dtype) for name, dtype in tensorfile.DTYPES.items()
               if not name.startswith("uint") or name == "uint8"}
    tensors["empty"] = torch.empty(0, 7)
    tensors["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    tensors["odd"] = torch.arange(13, dtype=torch.int8)  # 13 bytes: the next tensor must stay aligned
    tensors["after_odd"] = torch.randn(4, 4)
    back = _roundtrip(tensors, tmp_path)
    assert back.keys() == tensors.keys()
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, name
        # bit for bit, whatever the dtype (float8 has no ==)
        assert torch.equal(back[name].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), name


def test_complex_and_non_contiguous_outputs_survive_flatten_and_the_file(tmp_path):
    z = torch.randn(4, 3, dtype=torch.complex64)
    strided = torch.randn(6, 8).t()[::2]
    entries, tensors = flatten({"result": (z, strided)})
    path = str(tmp_path / "t.tensors")
    layout = tensorfile.write(tensors, path)
    loaded = Outputs.load({"file": path, "layout": layout, "entries": entries})
    assert compare(loaded, Outputs(*flatten({"result": (z, strided.contiguous())})), 0.0, 0.0) is None


@pytest.mark.parametrize("spec, why", [
    ({"offset": 0, "nbytes": 16, "dtype": "object", "shape": [4]}, "not allowed"),
    ({"offset": 0, "nbytes": 16, "dtype": "float32", "shape": [5]}, "do not fit"),
    ({"offset": 64, "nbytes": 4096, "dtype": "float32", "shape": [1024]}, "do not fit"),
    ({"offset": 3, "nbytes": 16, "dtype": "float32", "shape": [4]}, "bad offset"),
    ({"offset": -64, "nbytes": 16, "dtype": "float32", "shape": [4]}, "bad offset"),
    ({"offset": 0, "nbytes": 16, "dtype": "float32", "shape": [-4]}, "bad shape"),
    ({"offset": 0, "nbytes": 16, "dtype": "float32", "shape": "4"}, "bad shape"),
    ("float32", "not a mapping"),
])
def test_a_layout_that_does_not_fit_is_refused(tmp_path, spec, why):
    path = str(tmp_path / "t.tensors")
    tensorfile.write({"x": torch.randn(4)}, path)
    with pytest.raises(tensorfile.TensorFileError, match=why):
        tensorfile.read(path, {"x": spec})
