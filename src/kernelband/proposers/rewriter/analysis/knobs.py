"""Block-size knobs: the values passed to a kernel's tile-size constexprs that can be scaled without changing
what the module computes: a tile size that scales a program id ("tiled", the grid must follow it) or that a loop
steps by ("looped", any value covers the same range), as `roles` finds them. A size that covers a whole
dimension (`BLOCK = next_power_of_2(n_cols)`) is left alone: a smaller one would drop columns.

A knob is found where a launch passes a block-size constexpr

* as an integer literal (`BLOCK_SIZE=128`): the literal is the knob, and for a tiled constexpr so are the
  equal literals the grid divides by (`triton.cdiv(n, 128)`);
* as a name bound to one integer (`BLOCK = 16` in the launching function, a module constant, a
  parameter default): the knob is that integer;
* as any other name (`block_size = triton.next_power_of_2(...)`, a parameter without default): the
  value is known only at run time, and a rewrite scales the name where the launch and the grid use it.

A name qualifies only when nothing but the launch and its grid reads it (changing it must not resize an
output buffer, say), and a tiled constexpr only when the grid follows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from kernelband.proposers.rewriter.analysis import grids
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import Scope, code, int_value, subnodes

# Per-dimension bounds; a kernel with tl.dot keeps tiles within what its shared memory holds.
MIN_BLOCK = 16
MAX_BLOCK = 8192
MAX_DOT_BLOCK = 256
MAX_TILE_ELEMENTS = 16384  # the product of a launch's known block sizes, for kernels with several
# Elements a thread may hold (a tile over 32 x num_warps threads) where a rewrite raises that count: `rows`, and
# autotune's num_warps / 4. In bench 2 (H200), 4 candidates did not compile within the evaluator's 180 s: rows-16
# of 16 x 2,048 elements on one warp (1,024 a thread), rows-16 of cos_func's run-time block of up to 16,384 on
# four warps (2,048 a thread, twice), and int8_quantization's autotune grid with num_warps=1 on its 128 x 512
# tile (2,048 a thread; bench 1's num_warps=1 config on it too). 16 x 1,024 on four warps (128) compiled.
MAX_PER_THREAD = 256


@dataclass(frozen=True, eq=False)
class Knob:
    kernel: Kernel = field(repr=False)
    params: tuple[str, ...]  # the constexprs it sets (more than one when a grid literal serves several)
    role: str  # "tiled" or "looped"
    value: int | None  # None: known only at run time
    nodes: tuple[cst.CSTNode, ...] = field(repr=False)  # integers to rewrite, or (value None) names to scale
    grid_nodes: frozenset[int]  # ids of the nodes that sit in a grid expression
    name: str | None  # the variable, for a named knob
    kind: str  # "literal", "local", "module", "default", "runtime" or "shared" (a name several constexprs take)
    launches: tuple[Launch, ...] = field(repr=False)
    less_one: frozenset[int] = frozenset()  # ids of the nodes that hold the value less one (`(n + 63) // 64`)

    @property
    def label(self) -> str:
        return "/".join(self.params)

    @property
    def where(self) -> str:
        return ", ".join(dict.fromkeys(launch.where for launch in self.launches))

    @property
    def touches(self) -> frozenset[str]:
        return frozenset(launch.scope.top or launch.kernel.name for launch in self.launches)

    def allows(self, value: int) -> bool:
        """Whether `value` is a sane size for every constexpr this knob sets."""
        if self.value is None or value < 1:
            return False
        top = MAX_DOT_BLOCK if self.kernel.uses_dot else MAX_BLOCK
        if value > top or (value < MIN_BLOCK and value < self.value):
            return False
        if len(facts_of(self.kernel).tile_sizes) > 1 and not self.kernel.uses_dot:
            return _tile_elements(self, value) <= MAX_TILE_ELEMENTS
        return True


def _tile_elements(knob: Knob, value: int) -> int:
    total = value ** len(knob.params)
    for launch in knob.launches:
        for param in facts_of(launch.kernel).tile_sizes:
            arg = launch.arg(param)
            if param not in knob.params and arg is not None and int_value(arg.value):
                total *= int_value(arg.value)
    return total


def role(kernel: Kernel, param: str) -> str | None:
    facts = facts_of(kernel)
    return "tiled" if param in facts.tiled else "looped" if param in facts.looped else None


def find(ms: ModuleSource, floors: bool = False) -> tuple[list[Knob], list[str]]:
    """The module's knobs in source order, and why other block sizes are not knobs. With `floors`, a grid that
    counts the whole tiles only (`M // 64`) follows its tile too: for a caller that keeps to the tiles that
    divide the size (`extents.unbounded_extents`), since any other would leave the rest of it undone."""
    knobs: list[Knob] = []
    reasons: list[str] = []
    named: dict[tuple, list[tuple[Launch, str, cst.Name]]] = {}
    for launch in ms.launches:
        kernel = launch.kernel
        if kernel.autotune is not None:
            reasons.append(f"{kernel.name} is autotuned: its configs set the block sizes")
            continue
        literals = []
        for param in facts_of(kernel).tile_sizes:
            arg = launch.arg(param)
            if role(kernel, param) is None:
                reasons.append(f"{param} of {kernel.name} neither scales the program id nor steps a loop")
            elif arg is None:
                reasons.append(f"{param} is not passed where the {launch.where} can be read")
            elif isinstance(arg.value, cst.Integer):
                literals.append(param)
            elif isinstance(arg.value, cst.Name):
                kind, _ = ms.name_value(launch.scope, arg.value.value)
                home = launch.scope if kind != "module" else ms.module_scope
                named.setdefault((id(home.node), arg.value.value), []).append((launch, param, arg.value))
            else:
                reasons.append(f"{param} at the {launch.where} is an expression ({_short(arg.value)})")
        knobs.extend(_literal_knobs(launch, literals, reasons, floors))
    for (_, name), uses in named.items():
        if len({(id(launch.kernel), param) for launch, param, _ in uses}) > 1:
            knobs.extend(_shared_knobs(ms, name, uses, reasons, floors))
        elif (knob := _named_knob(ms, name, uses, reasons, floors)) is not None:
            knobs.append(knob)
    order = {id(launch): i for i, launch in enumerate(ms.launches)}
    knobs.sort(key=lambda k: (order[id(k.launches[0])], facts_of(k.kernel).tile_sizes.index(k.params[0])))
    return knobs, reasons


def _short(node: cst.CSTNode) -> str:
    text = code(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _divisions(launch: Launch, floors: bool) -> list:
    return launch.tile_divisions() if floors else launch.ceil_divisions()


def _unfollowed(launch: Launch, what: str, floors: bool, matches) -> str:
    """Why the grid does not follow a tile: it never divides by it, or (`floors` off) it counts its whole tiles
    only, which another tile would leave part of the size undone by, or reach past."""
    if not floors and any(d.floor and matches(d) for d in launch.tile_divisions()):
        return (f"the grid of the {launch.where} counts the whole tiles of {what} only (a floor division): another "
                "tile that does not divide the size would leave part of it undone")
    return f"the grid of the {launch.where} does not follow {what}"


def _literal_knobs(launch: Launch, params: list[str], reasons: list[str], floors: bool = False) -> list[Knob]:
    kernel = launch.kernel
    meta, _ = launch.meta_use
    divisions = [d for d in _divisions(launch, floors) if isinstance(d.divisor, cst.Integer)]
    knobs = []
    for param in params:
        if role(kernel, param) == "looped":
            node = launch.arg(param).value
            knobs.append(Knob(kernel, (param,), "looped", int_value(node), (node,), frozenset(), None,
                              "literal", (launch,)))
    by_value: dict[int | None, list[str]] = {}
    for param in params:
        if role(kernel, param) == "tiled":
            by_value.setdefault(int_value(launch.arg(param).value), []).append(param)
    for value, group in by_value.items():
        same = [d for d in divisions if int_value(d.divisor) == value]
        owners = grids.owners(launch.kernel.ms, launch, same, group)
        separable = len(group) == 1 or all(len(o) == 1 for o in owners.values())
        parts = [(p,) for p in group] if separable else [tuple(group)]
        for part in parts:
            mine = [d for d in same if len(group) == 1 or not separable or owners[id(d)] == list(part)]
            if not mine and not all(p in meta for p in part):
                reasons.append(_unfollowed(launch, f"{'/'.join(part)} = {value}", floors,
                                           lambda d, value=value: int_value(d.divisor) == value))
                continue
            nodes = [launch.arg(p).value for p in part] + [n for d in mine for n in d.nodes]
            knobs.append(Knob(kernel, part, "tiled", value, tuple(nodes),
                              frozenset(id(n) for d in mine for n in d.nodes), None, "literal", (launch,),
                              frozenset(id(n) for d in mine for n in d.less_one)))
    return knobs


def _named_knob(ms: ModuleSource, name: str, uses: list[tuple[Launch, str, cst.Name]],
                reasons: list[str], floors: bool = False) -> Knob | None:
    launch0, param0, _ = uses[0]
    kernel = launch0.kernel
    kind, value = ms.name_value(launch0.scope, name)
    literal = value if isinstance(value, cst.Integer) else None
    kind = kind if literal is not None else "runtime"
    if not _only_launches_read(ms, name, [u[0] for u in uses], kind == "module"):
        reasons.append(f"{name} is used beyond the {launch0.where} and its grid")
        return None
    nodes: list[cst.CSTNode] = [literal] if literal is not None else []
    grid_nodes: set[int] = set()
    less_one: set[int] = set()
    for launch, param, arg_name in uses:
        divisions = [d for d in _divisions(launch, floors)
                     if (isinstance(d.divisor, cst.Name) and d.divisor.value == name)
                     or (literal is not None and int_value(d.divisor) == int_value(literal))]
        if role(kernel, param) == "tiled" and not divisions and param not in launch.meta_use[0]:
            reasons.append(_unfollowed(launch, name, floors,
                                       lambda d: isinstance(d.divisor, cst.Name) and d.divisor.value == name))
            return None
        for division in divisions:
            changes = [n for n in division.nodes if literal is None or isinstance(n, cst.Integer)]
            nodes.extend(changes)
            grid_nodes |= {id(n) for n in changes}
            less_one |= {id(n) for n in division.less_one}
        if literal is None:
            nodes.append(arg_name)
    unique = tuple({id(n): n for n in nodes}.values())
    return Knob(kernel, (param0,), role(kernel, param0), int_value(literal), unique, frozenset(grid_nodes),
                name, kind, tuple(dict.fromkeys(u[0] for u in uses)), frozenset(less_one))


def _shared_knobs(ms: ModuleSource, name: str, uses: list[tuple[Launch, str, cst.Name]],
                  reasons: list[str], floors: bool = False) -> list[Knob]:
    """One name passed as several constexprs (`BM=BLOCK, BN=BLOCK`): a knob for each, scaled where the launch
    passes it and where the grid counts that constexpr's tiles (`grids.owners`), the name itself left alone."""
    kernels = {id(launch.kernel) for launch, _, _ in uses}
    launch0 = uses[0][0]
    if len(kernels) > 1:
        reasons.append(f"{name} sets the tile sizes of several kernels")
        return []
    kind, value = ms.name_value(launch0.scope, name)
    if not _only_launches_read(ms, name, [u[0] for u in uses], kind == "module"):
        reasons.append(f"{name} is used beyond the {launch0.where} and its grid")
        return []
    kernel = launch0.kernel
    params = list(dict.fromkeys(param for _, param, _ in uses))
    found = []
    for param in params:
        nodes: list[cst.CSTNode] = []
        grid_nodes: set[int] = set()
        launches = []
        for launch, each, arg_name in uses:
            if each != param:
                continue
            launches.append(launch)
            nodes.append(arg_name)
            divisions = [d for d in _divisions(launch, floors)
                         if isinstance(d.divisor, cst.Name) and d.divisor.value == name]
            owned = grids.owners(ms, launch, divisions, params)
            mine = [d for d in divisions if owned[id(d)] == [param]]
            if role(kernel, param) == "tiled" and not mine and param not in launch.meta_use[0]:
                reasons.append(f"the grid of the {launch.where} does not count the tiles of {param} = {name}")
                break
            for division in mine:
                nodes.extend(division.nodes)
                grid_nodes |= {id(n) for n in division.nodes}
        else:
            unique = tuple({id(n): n for n in nodes}.values())
            found.append(Knob(kernel, (param,), role(kernel, param), int_value(value), unique,
                              frozenset(grid_nodes), name, "shared", tuple(dict.fromkeys(launches))))
    return found


def _only_launches_read(ms: ModuleSource, name: str, launches: list[Launch], module_wide: bool) -> bool:
    allowed: set[int] = set()
    for launch in launches:
        for root in (launch.call, *launch.region):
            allowed |= {id(n) for n in subnodes(root, cst.Name)}
    scopes: list[Scope] = ms.scopes if module_wide else [launches[0].scope]
    return all(id(n) in allowed for scope in scopes for n in scope.body_loads() if n.value == name)
