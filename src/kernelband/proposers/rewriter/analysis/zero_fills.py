"""Host buffers allocated zeroed whose zeros no one can see: the first launch after the allocation writes every
element before anything reads one.

    out = torch.zeros_like(x)             zeroed: torch.zeros, zeros_like, x.new_zeros, torch.full / full_like /
    n = x.numel()                         new_full with 0, or an empty one that `.zero_()` / `.fill_(0)` zeroes
    mul2[(cdiv(n, B),)](x, out, n, B)     the first launch passing it: on every run from the allocation (the
    return out                            launch under no `if` and in no loop the allocation is not in; the
                                          allocation in the launch's block or in an `if` branch falling through
                                          to it), nothing between reading it, handing it on, keeping it or
                                          replacing it; the launch passes it itself, once, for a parameter the
                                          kernel only writes, and its stores cover it (analysis/coverage.py)

`zero_fills(ms)` gives each zeroed allocation with its first launch, its tensor's facts, and why it is not
proven where it is not; computed once per parsed module. Nothing here edits source.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site, host_functions
from kernelband.proposers.rewriter.analysis.coverage import HostTerms, Tensor, covers
from kernelband.proposers.rewriter.analysis.host_flow import Path, header, paths, reaching
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, assigned, code, dotted, subnodes

# What each zeroing allocation is without its zeros: the same arguments, less a fill value.
ZEROED_TORCH = {"zeros": "empty", "zeros_like": "empty_like", "full": "empty", "full_like": "empty_like"}
ZEROED_METHODS = {"new_zeros": "new_empty", "new_full": "new_empty"}
EMPTY_TORCH = frozenset({"empty", "empty_like"})
EMPTY_METHODS = frozenset({"new_empty"})
LIKE = frozenset({"zeros_like", "full_like", "empty_like"})
EXITS = (cst.Return, cst.Raise, cst.Break, cst.Continue)


@dataclass(eq=False)
class ZeroFill:
    """One zeroed allocation. `kind`: "call" (the allocating call zeroes: `edit` is it), "chain" (the value is
    `E.zero_()`: `edit` is that call) or "statement" (a line of its own zeroes an empty buffer: `edit` is it)."""

    hf: HostFunction
    name: str
    kind: str
    edit: cst.CSTNode
    allocation: cst.Call  # the call that allocates the memory
    site: Site | None = None
    param: str | None = None
    refusal: str | None = None

    @property
    def where(self) -> str:
        fn = self.allocation.func
        how = code(fn.attr if isinstance(fn, cst.Attribute) else fn).strip()
        return f"{self.name} (allocated by {how}) in {self.hf.name}"


def zero_fills(ms: ModuleSource) -> list[ZeroFill]:
    if "zero_fills" not in ms.cache:
        found = []
        for hf in host_functions(ms):
            places = paths(hf.scope)
            terms = HostTerms(hf, places)
            for path in places.values():
                fill = _zeroing(hf, path)
                if fill is not None:
                    fill.refusal = _prove(hf, terms, places, fill, path)
                    found.append(fill)
        ms.cache["zero_fills"] = {"all": found}
    return ms.cache["zero_fills"]["all"]


# -- the allocation ------------------------------------------------------------------------------------------
def _is_zero(node: cst.BaseExpression | None) -> bool:
    if isinstance(node, cst.Integer | cst.Float):
        try:
            return float(node.evaluated_value) == 0.0
        except ValueError:
            return False
    return dotted(node) == "False" if node is not None else False


def _torch_name(call: cst.Call) -> str | None:
    name = dotted(call.func) or ""
    return name[len("torch."):] if name.startswith("torch.") and name.count(".") == 1 else None


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) and _torch_name(call) is None else None


def zeroing_call(call: cst.Call) -> bool:
    """`torch.zeros(...)`, `torch.zeros_like(x)`, `x.new_zeros(...)`, or a full one with the fill value 0."""
    name, method = _torch_name(call), _method(call)
    if name in ("zeros", "zeros_like") or method == "new_zeros":
        return True
    if name in ("full", "full_like") or method == "new_full":
        return _is_zero(arg_of(call, 1, "fill_value"))
    return False


def empty_call(call: cst.BaseExpression) -> bool:
    return isinstance(call, cst.Call) and (_torch_name(call) in EMPTY_TORCH or _method(call) in EMPTY_METHODS)


def _zeroes(call: cst.BaseExpression) -> cst.BaseExpression | None:
    """E for `E.zero_()` or `E.fill_(0)`."""
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and (
            call.func.attr.value == "zero_" and not call.args
            or call.func.attr.value == "fill_" and len(call.args) == 1 and _is_zero(call.args[0].value)):
        return call.func.value
    return None


def _zeroing(hf: HostFunction, path: Path) -> ZeroFill | None:
    statement = path[-1].statement
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
        name, value = small.targets[0].target.value, small.value
        if isinstance(value, cst.Call) and zeroing_call(value):
            return ZeroFill(hf, name, "call", value, value)
        inner = _zeroes(value)
        if inner is not None and empty_call(inner):
            return ZeroFill(hf, name, "chain", value, inner)
    if isinstance(small, cst.Expr) and isinstance(_zeroes(small.value), cst.Name):
        name = _zeroes(small.value).value
        allocated = reaching(name, path)
        if empty_call(allocated):
            return ZeroFill(hf, name, "statement", statement, allocated)
    return None


def _tensor(terms: HostTerms, fill: ZeroFill, path: Path) -> Tensor:
    call, name = fill.allocation, fill.name
    torch_name = _torch_name(call)
    positional = [a for a in call.args if a.keyword is None]
    if torch_name in LIKE:
        like = terms.at(positional[0].value, path) if positional else "__unknown"
        return Tensor(name, frozenset({f"{like}.numel()", f"{name}.numel()"}), None, False)
    if torch_name == "full" or _method(call) == "new_full":
        positional = positional[:1]
    size = arg_of(call, 0, "size")
    shape = [size] if size is not None and not positional else [a.value for a in positional]
    if any(a.star for a in positional):
        return Tensor(name, frozenset({f"{name}.numel()"}), None, True)
    dims = [terms.at(s, path) for s in shape]
    if len(shape) == 1 and isinstance(shape[0], cst.Tuple | cst.List):
        dims = [terms.at(e.value, path) for e in shape[0].elements]
    numel = {f"{name}.numel()"}
    if len(dims) == 1 and dims[0].endswith(".shape"):  # torch.zeros(x.shape): x's numel, its rank unknown
        return Tensor(name, frozenset(numel | {f"{dims[0][:-len('.shape')]}.numel()"}), None, True)
    numel.add(terms.at(" * ".join(f"({d})" for d in dims), ()) if dims else "1")
    return Tensor(name, frozenset(numel), tuple(dims), True)


# -- the path to the first launch ----------------------------------------------------------------------------
def _follows(start: Path, site: Site) -> tuple[list[cst.CSTNode] | None, str]:
    """The statements (and `with` headers) run between a statement and a launch, where the launch runs on every
    run that passes the statement; else why not. The statement may sit in a branch of an `if` or in a `with` that
    the launch follows (`if out is None: out = torch.zeros(...)`): the rest of each block it sits in runs between
    the two, and must fall through to them."""
    pa, pb = start, site.path
    k = 0
    while k < min(len(pa), len(pb)) and pa[k].owner is pb[k].owner and pa[k].part == pb[k].part \
            and pa[k].index == pb[k].index:
        k += 1
    if k == len(pa) or k == len(pb) or pa[k].part != pb[k].part:
        return None, f"the {site.where} does not follow the allocation in the block that holds it"
    between: list[cst.CSTNode] = []
    for step in reversed(pa[k + 1:]):  # the blocks the allocation sits in, innermost first
        if not isinstance(step.owner, cst.If | cst.With):
            kind = "a loop" if isinstance(step.owner, cst.For | cst.While) else f"`{header(step.owner)}`"
            return None, f"the allocation runs inside {kind}, which the {site.where} is not in"
        rest = step.block[step.index + 1:]
        exits = [n for s in rest for n in subnodes(s, EXITS)]
        if exits:
            return None, f"`{code(exits[0]).strip()}` after the allocation leaves before the {site.where}"
        between.extend(rest)
    between.extend(pa[k].block[pa[k].index + 1:pb[k].index])
    for step in pb[k + 1:]:
        if isinstance(step.owner, cst.With) and step.part == "body":
            between.extend(item.item for item in step.owner.items)
            between.extend(step.block[:step.index])
            continue
        kind = "a loop" if isinstance(step.owner, cst.For | cst.While) else f"`{header(step.owner)}`"
        return None, f"the {site.where} runs inside {kind}: a run that skips it leaves the zeros to be read"
    return between, ""


def _prove(hf: HostFunction, terms: HostTerms, places: dict[int, Path], fill: ZeroFill, path: Path) -> str | None:
    order = {key: i for i, key in enumerate(places)}
    here = order[id(path[-1].statement)]
    names = hf.aliases(fill.name)
    later = [s for s in hf.sites if order.get(id(s.path[-1].statement), -1) > here
             and any(p.root in names for p in s.passed.values())]
    if not later:
        return f"no launch after `{code(path[-1].statement).strip()}` in {hf.name} passes {fill.name}"
    site = fill.site = later[0]
    between, why = _follows(path, site)
    if between is None:
        return why
    # From a branch the launch follows, no single assignment reaches the launch: none between may replace it.
    nested = not any(step.block is path[-1].block for step in site.path)
    replaced = fill.name in assigned(*[s for s in between if isinstance(s, cst.BaseStatement)]) if nested else \
        reaching(fill.name, site.path) is not (fill.allocation if fill.kind == "statement" else fill.edit)
    if replaced:
        return f"{fill.name} is assigned again before the {site.where}"
    used = hf.uses(fill.name, [site], between)
    if used:
        return f"{fill.name} is {used[0].kind} before the {site.where} (`{used[0].code}`): its zeros may be read"
    passed = [p for p in site.passed.values() if p.root in names]
    if len(passed) != 1:
        return f"the {site.where} passes {fill.name} for {len(passed) or 'no'} pointer parameters" + (
            ": one may read what another writes" if passed else "")
    fill.param = passed[0].param
    arg = site.launch.arg(fill.param)
    if arg is None or not isinstance(arg.value, cst.Name) or arg.value.value != fill.name:
        return f"the {site.where} passes `{passed[0].code}` for {fill.param}, not {fill.name} itself"
    if _torch_name(fill.allocation) == "full" \
            and not any(a.keyword is not None and a.keyword.value == "dtype" for a in fill.allocation.args):
        return f"{fill.where} takes its dtype from the fill value: torch.empty would not"
    return covers(hf, terms, site, fill.param, _tensor(terms, fill, path))
