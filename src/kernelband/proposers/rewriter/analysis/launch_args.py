"""Which of a launch's values each kernel parameter gets: `kernel[grid](x, y, *x.stride(), N, BLOCK=B, **cfg)`.

A plain positional or keyword argument is its parameter's value. A starred positional argument covers as many
parameters as it has elements: known where it is a tuple or list literal, a name bound once to one, or a tensor's
`.stride()`, `.size()` or `.shape` whose rank the host fixes (`M, K = a.shape`); else, where it is the only
starred argument whose extent is unknown, fixed by the count of parameters the other arguments leave (the
parameters up to the first one passed by keyword or set by the kernel's configs, none of those left with a
default). Each parameter it covers gets the expression of its element (`x.stride(0)`, `x.shape[1]`, `s[2]`), for
a rewrite that reads or re-emits it. `**cfg` where cfg is a dict literal or `dict(...)` (at the launch, bound once
in the launching function, or at module level) passes its keys as keywords.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis.host_values import rereadable
from kernelband.proposers.rewriter.analysis.syntax import Scope, code, dotted, loads, subnodes

SIZES = ("stride", "size")  # `t.stride()` / `t.size()`: one element per dimension


@dataclass(frozen=True)
class Spread:
    """A parameter given by an element of a starred argument."""

    index: int  # of the starred argument in the call's arguments
    position: int  # of the element within it
    value: cst.BaseExpression  # the element, as an expression the host may evaluate where the launch is


@dataclass
class Mapping:
    args: dict[str, int] = field(default_factory=dict)  # parameter -> index of the argument that is its value
    spread: dict[str, Spread] = field(default_factory=dict)  # parameters covered by a starred argument
    keyed: dict[str, cst.BaseExpression] = field(default_factory=dict)  # keys of `**dict`, parameters or options
    unmapped: str | None = None  # why some parameters' values cannot be told apart


def _sequence(node: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if isinstance(node, cst.Tuple | cst.List) and not any(isinstance(e, cst.StarredElement) for e in node.elements):
        return [e.value for e in node.elements]
    return None


def _bound(name: str, scope: Scope, module: Scope) -> cst.BaseExpression | None:
    """The value of a name bound once in the launching function, or (not bound there) at module level."""
    if name in scope.params:
        return None
    if name in scope.assigns:
        return scope.value(name)
    return module.value(name)


def unpacked(scope: Scope) -> dict[str, tuple[str | None, ...]]:
    """Tensors whose sizes the host unpacks (`M, K = a.shape`, `n, = x.size()`): each one's rank fixed, with the
    name each size is bound to (None for a target that is not a plain name), where the tensor is a parameter or
    a name bound once."""
    found: dict[str, tuple[str | None, ...]] = {}
    for assign in subnodes(scope.node, cst.Assign):
        value = assign.value
        tensor = value.value if isinstance(value, cst.Attribute) and value.attr.value == "shape" else (
            value.func.value if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "size" and not value.args else None)
        if not isinstance(tensor, cst.Name) or len(scope.assigns.get(tensor.value, [])) > 1 \
                or tensor.value in scope.params and tensor.value in scope.assigns:
            continue
        for target in assign.targets:
            if isinstance(target.target, cst.Tuple | cst.List) \
                    and not any(isinstance(e, cst.StarredElement) for e in target.target.elements):
                found.setdefault(tensor.value, tuple(e.value.value if isinstance(e.value, cst.Name) else None
                                                     for e in target.target.elements))
    return found


ALLOCATE = frozenset({"empty", "zeros", "ones", "rand", "randn", "full"})  # torch.X(sizes, ...) / torch.X(*sizes)
LIKE = frozenset({"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"})
NEW = frozenset({"new_empty", "new_zeros", "new_ones", "new_full"})
KEEPS_RANK = frozenset({"contiguous", "clone", "to", "float", "half", "bfloat16", "int", "detach", "transpose",
                        "cuda", "cpu", "type_as", "abs", "neg", "exp", "sigmoid"})
RESHAPE = frozenset({"reshape", "view"})


def ranks(scope: Scope) -> dict[str, int]:
    """The tensors of a function whose rank its code fixes: sizes unpacked (`M, K = a.shape`), allocated with
    a literal number of sizes (`torch.empty((M, N))`, `x.new_zeros(B, H, D)`), shaped like one whose rank is
    known (`torch.empty_like(x)`, `torch.empty(x.shape)`), reshaped to one (`x.reshape(M, K)`), transposed
    (`w.t()`) or converted (`x.contiguous()`, `x.to(...)`). Only names bound once (or parameters never bound)."""
    found = {name: len(sizes) for name, sizes in unpacked(scope).items()}
    values = {name: values[0] for name, values in scope.assigns.items()
              if len(values) == 1 and values[0] is not None and name not in scope.params}
    changed = True
    while changed:
        changed = False
        for name, value in values.items():
            if name not in found and (rank := _rank(value, found)) is not None:
                found[name] = rank
                changed = True
    return found


def _rank(node: cst.BaseExpression, known: dict[str, int]) -> int | None:
    if isinstance(node, cst.Attribute) and node.attr.value == "T" and isinstance(node.value, cst.Name):
        return 2 if known.get(node.value.value) == 2 else None
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute | cst.Name):
        return None
    func = dotted(node.func) or ""
    method = node.func.attr.value if isinstance(node.func, cst.Attribute) else func
    owner = node.func.value if isinstance(node.func, cst.Attribute) else None
    positional = [a.value for a in node.args if a.keyword is None and not a.star]
    starred = any(a.star for a in node.args)
    sizes = [a.value for a in node.args if a.keyword is not None and a.keyword.value == "size"]
    if func.startswith("torch.") and method in LIKE and positional:
        return _tensor_rank(positional[0], known)
    if func.startswith("torch.") and method in ALLOCATE or method in NEW and not func.startswith("torch."):
        if starred:
            return None
        given = sizes or (positional[:1] if method.endswith("full") else positional)
        return _sizes_rank(given, known)
    if method in RESHAPE and owner is not None and not starred and positional:
        return _sizes_rank(positional, known)
    if method == "t" and owner is not None and not node.args:
        return 2 if _tensor_rank(owner, known) == 2 else None
    if method in KEEPS_RANK and owner is not None and not func.startswith("torch."):
        return _tensor_rank(owner, known)
    return None


def _tensor_rank(node: cst.BaseExpression, known: dict[str, int]) -> int | None:
    return known.get(node.value) if isinstance(node, cst.Name) else _rank(node, known)


def _sizes_rank(given: list[cst.BaseExpression], known: dict[str, int]) -> int | None:
    """How many sizes `(M, N)`, `M, N`, `x.shape` or `x.size()` are."""
    if len(given) != 1:
        return len(given) or None
    node = given[0]
    if (literal := _sequence(node)) is not None:
        return len(literal)
    if (sizes := _sizes_of(node)) is not None and sizes[1] in ("shape", "size"):
        return known.get(sizes[0])
    # one value: a size (an int) or a sequence of them, which the code does not say
    return 1 if isinstance(node, cst.Integer) else None


def _sizes_of(node: cst.BaseExpression) -> tuple[str, str] | None:
    """(tensor, "stride" | "size" | "shape") for `t.stride()`, `t.size()`, `t.shape`."""
    if isinstance(node, cst.Attribute) and node.attr.value == "shape" and isinstance(node.value, cst.Name):
        return node.value.value, "shape"
    if isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value in SIZES and isinstance(node.func.value, cst.Name):
        return node.func.value.value, node.func.attr.value
    return None


def _element(node: cst.BaseExpression, position: int, scope: Scope, module: Scope) -> cst.BaseExpression:
    """Element `position` of a starred value, as the host would read it where the launch is: a literal's element
    (also of a sequence a name is bound to, where that element reads the same value there), a tensor's size or
    stride, else the value indexed."""
    if (literal := _sequence(node)) is not None:
        return literal[position]
    if isinstance(node, cst.Name) and (value := _bound(node.value, scope, module)) is not None \
            and (literal := _sequence(value)) is not None and not _mutated(node.value, scope) \
            and _stable(literal[position], scope, node.value in scope.assigns):
        return literal[position]
    sizes = _sizes_of(node)
    if sizes is not None and sizes[1] in SIZES:
        return cst.parse_expression(f"{sizes[0]}.{sizes[1]}({position})")
    text = code(node).strip()
    if not (isinstance(node, cst.Name | cst.Attribute | cst.Subscript | cst.Call)):
        text = f"({text})"
    return cst.parse_expression(f"{text}[{position}]")


def _stable(node: cst.BaseExpression, scope: Scope, local: bool) -> bool:
    """Whether an expression reads the same value wherever in the function it is evaluated after its names are
    bound: a number, or (written in the function, `local`) a size, stride or name of values the function binds
    at most once, outside any loop."""
    if isinstance(node, cst.Integer | cst.Float) or isinstance(node, cst.UnaryOperation) \
            and isinstance(node.expression, cst.Integer | cst.Float):
        return True
    if not local or not rereadable(node) or subnodes(scope.node, cst.For) or subnodes(scope.node, cst.While):
        return False
    return all(len(scope.assigns.get(n.value, [])) + (n.value in scope.params) <= 1 for n in loads(node))


def extent(node: cst.BaseExpression, scope: Scope, module: Scope) -> int | None:
    """How many values `*node` passes, where the host's code fixes it."""
    if (literal := _sequence(node)) is not None:
        return len(literal)
    if isinstance(node, cst.Name) and (value := _bound(node.value, scope, module)) is not None \
            and not _mutated(node.value, scope):
        literal = _sequence(value)
        return len(literal) if literal is not None else None
    sizes = _sizes_of(node)
    return ranks(scope).get(sizes[0]) if sizes is not None else None


def keyword_dict(node: cst.BaseExpression, scope: Scope, module: Scope) -> dict[str, cst.BaseExpression] | None:
    """The keys and values of `**node`: a dict literal of string keys or `dict(k=v, ...)`, at the launch or
    bound once."""
    name = None
    if isinstance(node, cst.Name):
        name, value = node.value, _bound(node.value, scope, module)
        if value is None or _mutated(node.value, scope):
            return None
        node = value
    if isinstance(node, cst.Dict):
        if not all(isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) for e in node.elements):
            return None
        found = {e.key.evaluated_value: e.value for e in node.elements}
    elif isinstance(node, cst.Call) and dotted(node.func) == "dict" \
            and all(a.keyword is not None and not a.star for a in node.args):
        found = {a.keyword.value: a.value for a in node.args}
    else:
        return None
    # A value computed where the dict was built is read from the dict where the launch is: a name in it may
    # since be bound to another value.
    return {key: value if name is None or _constant(value) else cst.parse_expression(f"{name}[{key!r}]")
            for key, value in found.items()}


def _constant(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer | cst.Float | cst.SimpleString) or dotted(node) in ("True", "False", "None")


def _mutated(name: str, scope: Scope) -> bool:
    """Whether the function writes into the dict the name holds (`cfg["BLOCK"] = ...`, `cfg.update(...)`) or
    hands it to a call that may."""
    targets = [t.target for a in subnodes(scope.node, cst.Assign) for t in a.targets]
    targets += [a.target for a in subnodes(scope.node, cst.AugAssign)] + [d.target for d in subnodes(scope.node, cst.Del)]
    for target in targets:
        if any(isinstance(s.value, cst.Name) and s.value.value == name for s in
               [target, *subnodes(target, cst.Subscript)] if isinstance(s, cst.Subscript)):
            return True
    for call in subnodes(scope.node, cst.Call):
        if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                and call.func.value.value == name:
            return True
        if any(not a.star and isinstance(a.value, cst.Name) and a.value.value == name for a in call.args):
            return True
    return False


def _configured(decorators: list[cst.Decorator]) -> set[str] | None:
    """The parameters a kernel's autotune configs or heuristics set; None where one of them is not literal."""
    found: set[str] = set()
    for decorator in decorators:
        name = dotted(decorator.decorator.func if isinstance(decorator.decorator, cst.Call)
                      else decorator.decorator) or ""
        if name.endswith("autotune"):
            configs = [c for c in subnodes(decorator, cst.Call) if (dotted(c.func) or "").endswith("Config")]
            if not configs:
                return None
            for config in configs:
                if not config.args or not isinstance(config.args[0].value, cst.Dict):
                    return None
                keys = [e.key for e in config.args[0].value.elements if isinstance(e, cst.DictElement)]
                if not all(isinstance(k, cst.SimpleString) for k in keys):
                    return None
                found |= {k.evaluated_value for k in keys}
        elif name.endswith("heuristics"):
            tables = [a.value for a in decorator.decorator.args] if isinstance(decorator.decorator, cst.Call) else []
            if len(tables) != 1 or not isinstance(tables[0], cst.Dict) or not all(
                    isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
                    for e in tables[0].elements):
                return None
            found |= {e.key.evaluated_value for e in tables[0].elements}
    return found


def map_args(params: list, decorators: list[cst.Decorator], call: cst.Call, scope: Scope, module: Scope) -> Mapping:
    """The mapping of a launch's arguments onto the kernel's parameters (`params`: name, default)."""
    mapping = Mapping()
    names = [p.name for p in params]
    keywords: set[str] = set()
    opaque: str | None = None
    for index, arg in enumerate(call.args):
        if arg.keyword is not None:
            mapping.args[arg.keyword.value] = index
            keywords.add(arg.keyword.value)
        elif arg.star == "**":
            keyed = keyword_dict(arg.value, scope, module)
            if keyed is None:
                opaque = f"`**{code(arg.value).strip()}`"
                mapping.unmapped = f"the keys of {opaque} are not known: which parameters it sets is not known"
                continue
            for key, value in keyed.items():
                mapping.keyed.setdefault(key, value)
                keywords.add(key)
    positional = [(i, a) for i, a in enumerate(call.args) if a.keyword is None and a.star != "**"]
    extents = [1 if not a.star else extent(a.value, scope, module) for _, a in positional]
    unknown = [i for i, e in enumerate(extents) if e is None]
    if len(unknown) == 1:
        extents[unknown[0]] = _remainder(params, decorators, keywords, opaque, sum(e or 0 for e in extents))
    at = 0
    for (index, arg), size in zip(positional, extents):
        if size is None:
            mapping.unmapped = (f"the extent of `*{code(arg.value).strip()}` is not known: the parameters after it "
                                "cannot be mapped")
            break
        if not arg.star:
            if at < len(names):
                mapping.args.setdefault(names[at], index)
        else:
            for position in range(size):
                if at + position < len(names):
                    mapping.spread[names[at + position]] = Spread(
                        index, position, _element(arg.value, position, scope, module))
        at += size
    return mapping


def _remainder(params: list, decorators: list[cst.Decorator], keywords: set[str], opaque: str | None,
               known: int) -> int | None:
    """How many values the one starred argument of unknown extent passes: the parameters left between the
    other positional values and the first parameter passed by keyword or set by the configs, where no parameter
    it might stop short of has a default; None where that count is not certain."""
    if opaque is not None:
        return None
    configured = _configured(decorators)
    if configured is None:
        return None
    named = keywords | configured
    first = next((i for i, p in enumerate(params) if p.name in named), len(params))
    if any(p.name not in named and p.default is None for p in params[first:]):
        return None
    if first < known or first > known and params[first - 1].default is not None:
        return None
    return first - known
