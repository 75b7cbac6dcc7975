"""Running a spelling and its variants: in the Triton interpreter, in a fresh process, the variants' outputs
against the original's; or, for spellings the interpreter refuses, every kernel launch compiled for sm_90
(each launch's arguments captured as the entry runs with launching replaced by compiling)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from respellings import Spelling

SAME_OUTPUTS = """
import torch, importlib
torch.manual_seed(0)
{inputs}
args = [a.to("{device}") if isinstance(a, torch.Tensor) else a for a in args]
def clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x
def flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return []
original = importlib.import_module("kb_original")
want_args = [clone(a) for a in args]
want = flat(getattr(original, "{entry}")(*want_args)) + [a for a in want_args if isinstance(a, torch.Tensor)]
for index in range({count}):
    variant = importlib.import_module(f"kb_variant_{{index}}")
    got_args = [clone(a) for a in args]
    got = flat(getattr(variant, "{entry}")(*got_args)) + [a for a in got_args if isinstance(a, torch.Tensor)]
    assert len(got) == len(want), (index, len(got), len(want))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (index, g.shape, w.shape, g.dtype, w.dtype)
        if w.is_floating_point():
            ok = torch.allclose(g.float(), w.float(), atol={atol}, rtol={rtol}, equal_nan=True)
        else:
            ok = torch.equal(g, w)
        assert ok, (index, (g.float() - w.float()).abs().max().item())
"""

# Launching is replaced by compiling for sm_90: each JITFunction.run derives a signature from the arguments it
# is given and compiles; an autotuner compiles every config.
COMPILE = """
import importlib, sys, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.autotuner import Autotuner
from triton.runtime.jit import JITFunction
TYPES = {{torch.float16: "*fp16", torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.int32: "*i32",
         torch.int64: "*i64", torch.int8: "*i8", torch.uint8: "*u8", torch.bool: "*i1"}}
compiled = []
def run(self, *args, grid=None, warmup=False, **kwargs):
    names = self.arg_names
    values = dict(zip(names, args))
    values.update({{k: v for k, v in kwargs.items() if k in names}})
    options = {{k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages", "num_ctas")}}
    signature, constexprs = {{}}, {{}}
    for i, name in enumerate(names):
        value = values.get(name, self.params[i].default)
        if self.params[i].is_constexpr or value is None or isinstance(value, (bool, str)):
            signature[name] = "constexpr"
            constexprs[(i,)] = value
        elif isinstance(value, torch.Tensor):
            signature[name] = TYPES[value.dtype]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            signature[name] = "i64" if abs(int(value)) >= 2**31 else "i32"
    source = ASTSource(self, signature, constexprs=constexprs)
    triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    compiled.append(self.fn.__name__)
def tuned(self, *args, **kwargs):
    for config in self.configs:
        self.fn.run(*args, **{{**kwargs, **config.all_kwargs()}})
JITFunction.run = run
Autotuner.run = tuned
torch.manual_seed(0)
{inputs}
for index in range({count}):
    compiled.clear()
    try:
        getattr(importlib.import_module(f"kb_compiled_{{index}}"), "{entry}")(*args)
        assert compiled, "no kernel was launched"
    except BaseException:
        print(f"source {{index}}:", file=sys.stderr)
        raise
"""


def _run(modules: dict[str, str], script: str, interpret: bool) -> subprocess.CompletedProcess:
    folder = tempfile.mkdtemp()
    for name, source in modules.items():
        with open(os.path.join(folder, f"{name}.py"), "w") as f:
            f.write(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([folder, *sys.path])
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)


def same_outputs(spelling: Spelling, variants: list[str], device: str = "cpu") -> None:
    """Asserts that each variant's entry returns (and leaves in its tensor arguments) what the original's does:
    in the interpreter on the CPU, compiled on a GPU."""
    modules = {"kb_original": spelling.source, **{f"kb_variant_{i}": v for i, v in enumerate(variants)}}
    script = SAME_OUTPUTS.format(inputs=spelling.inputs, entry=spelling.entry, count=len(variants),
                                 atol=spelling.atol, rtol=spelling.rtol, device=device)
    done = _run(modules, script, interpret=device == "cpu")
    assert done.returncode == 0, done.stderr[-3000:]


def block_pointers_compile() -> bool:
    """Whether this Triton still compiles tl.make_block_ptr (3.9 removed it for tensor descriptors)."""
    script = ("import triton, triton.language as tl\n"
              "from triton.backends.compiler import GPUTarget\nfrom triton.compiler import ASTSource\n"
              "@triton.jit\ndef k(p, B: tl.constexpr):\n"
              "    b = tl.make_block_ptr(p, (B,), (1,), (0,), (B,), (0,))\n    tl.store(b, tl.load(b))\n"
              "triton.compile(ASTSource(k, {'p': '*fp32', 'B': 'constexpr'}, constexprs={(1,): 16}),"
              " target=GPUTarget('cuda', 90, 32))\n")
    return _run({}, script, interpret=False).returncode == 0


def compiles_for_sm90(spelling: Spelling, sources: list[str]) -> None:
    """Asserts that every kernel each source's entry launches compiles for an H100 (all in one process: the
    compiles are what is checked, not a fresh start for each)."""
    script = COMPILE.format(inputs=spelling.inputs, count=len(sources), entry=spelling.entry)
    done = _run({f"kb_compiled_{i}": source for i, source in enumerate(sources)}, script, interpret=False)
    assert done.returncode == 0, done.stderr[-3000:]
