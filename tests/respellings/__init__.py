"""A corpus of re-spellings: for each structural pattern, the same computation written the ways users write it
(other names, literal and variable tile sizes, tuple, lambda and meta grids, for and while loops, scalar and
vector accumulators, pointer arithmetic and block pointers, a helper @triton.jit function). Each module here
holds one pattern's SPELLINGS; tests/test_respellings.py checks that the pattern's rewrites fire on every
spelling, and on every spelling with all its names replaced (`renamed`), and that every variant gives the
original's outputs in the interpreter, in a fresh process (block-pointer spellings, which the interpreter
refuses, compile for sm_90 instead)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Spelling:
    pattern: str  # the computation: "gemm", "softmax", ...
    name: str  # how it is spelled: "literal_grid", "while_loop", ...
    source: str  # a whole module: the kernels and the entry function
    entry: str  # the function to call
    inputs: str  # Python that binds `args`, the entry's positional arguments (small: the interpreter runs it)
    rewrites: tuple[str, ...]  # the rewrites that must fire on it
    interpretable: bool = True  # False: the interpreter refuses it (block pointers); compiled for sm_90 instead
    atol: float = 1e-2
    rtol: float = 1e-2

    @property
    def id(self) -> str:
        return f"{self.pattern}-{self.name}"
