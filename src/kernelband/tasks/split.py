"""The fixed train/test split of the tasks.

Anything tuned or learned (the rewriter's priors, psi's learning rate, alpha, c, K, the knowledge carried
across kernels) is fitted on train tasks only, and every figure that compares policies is read on test tasks,
so that no figure is one the search was tuned on.

The rule: a TritonBench-G task is a train task when the first 8 bytes of sha256("kernelband-split-3:" + name),
read as a big-endian fraction of 2**64, fall below one half. It depends on the name alone, so a task keeps its
side when the suite grows or shrinks, and it does not depend on Python's per-process string hashing. The salt
is the first of kernelband-split-1..7 whose rule puts 15 of the 29 level-1/2 tasks on the train side (the
others put 10 to 19 there). Every built-in example is a test task: they are the kernels a user reads first,
and a figure on them must be held-out.
"""

from __future__ import annotations

import hashlib

from kernelband.errors import UserError
from kernelband.tasks import example_names

SALT = "kernelband-split-3"
TRAIN_FRACTION = 0.5
SPLITS = ("train", "test")


def _bare(ref: str) -> tuple[str, str]:
    """(kind, name) of a task reference: `tritonbench:x` -> ("tritonbench", "x"); `examples:x` or a path ->
    ("examples" or "file", name); a bare name is a built-in example's, else a TritonBench-G task's."""
    kind, sep, name = ref.partition(":")
    if sep:
        return kind, name
    if ref.endswith(".py") or "/" in ref:
        return "file", ref
    return ("examples" if ref in example_names() else "tritonbench"), ref


def fraction(name: str) -> float:
    """The name's place in [0, 1), the same in every process and on every machine."""
    digest = hashlib.sha256(f"{SALT}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def side(ref: str) -> str:
    """'train' or 'test' for a task reference (`tritonbench:name`, `examples:name` or a bare TritonBench name).
    Built-in examples and task files are test tasks."""
    kind, name = _bare(ref)
    if kind != "tritonbench":
        return "test"
    return "train" if fraction(name) < TRAIN_FRACTION else "test"


def check(split: str | None) -> str | None:
    if split is not None and split not in SPLITS:
        raise UserError(f"unknown split {split!r}: use train or test")
    return split


def select(refs: list[str], split: str | None) -> list[str]:
    """The references of `refs` on side `split` (None: all), in their order."""
    if check(split) is None:
        return list(refs)
    return [r for r in refs if side(r) == split]


def train_first(refs: list[str]) -> list[str]:
    """`refs` with the train tasks first (each side in its given order): a bench learns on train tasks before
    it is measured on the test tasks, so the test tasks start with what was learned."""
    return [r for r in refs if side(r) == "train"] + [r for r in refs if side(r) != "train"]
