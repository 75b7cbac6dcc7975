"""The autotune rewrite: wrap a kernel in @triton.autotune over block sizes, num_warps and num_stages, or
add configs to a kernel that is autotuned already."""


from __future__ import annotations

import math
from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis import knobs as knobs_mod
from kernelband.proposers.rewriter.analysis.buffers import host_functions, touches
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.knobs import Knob
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, tile_terms
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    dotted,
    fresh_name,
    literal_config,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.edits import (
    Edit,
    Found,
    Variant,
    appended,
    defaults_by_keyword,
    keyword_arg,
    parenthesized,
    replace_with,
    set_kwarg,
    with_params,
    without,
)
from kernelband.proposers.rewriter.rewrites.configs import Chooser, ConfigSet
from kernelband.proposers.rewriter.rewrites.launch_options import (
    DEFAULT_STAGES,
    DEFAULT_WARPS,
    STAGES,
    WARPS,
    option_value,
)

MAX_CONFIGS = 8
MAX_NEW_CONFIGS = 12  # configs offered for a kernel that is autotuned already
LAUNCH_OPTIONS = ("num_warps", "num_stages")
OTHER_LAUNCH_OPTIONS = ("num_ctas", "maxnreg", "enable_fp_fusion")
SIZE_WORDS = ("n_", "num", "size", "len", "numel", "elem", "cols", "rows", "dim", "seq", "batch", "head")


# -- autotune ------------------------------------------------------------------------------------------------
def autotune(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    knobs, _ = knobs_mod.find(ms)
    for kernel in ms.kernels.values():
        if kernel.autotune is not None:
            variants.extend(_more_configs(kernel, reasons))
            continue
        why = _why_not_autotune(ms, kernel)
        if why:
            reasons.append(why)
            continue
        variant = _autotuned(ms, kernel, [k for k in knobs if k.kernel is kernel], reasons)
        if variant is not None:
            variants.append(variant)
    return Found(variants, reasons)


def _why_not_autotune(ms: ModuleSource, kernel: Kernel) -> str:
    if not ms.launches_of(kernel):
        return f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that call it)"
    if "triton" not in ms.imported:
        return "the module does not `import triton`"
    for launch in ms.launches_of(kernel):
        if any(launch.kwarg(option) is not None for option in OTHER_LAUNCH_OPTIONS):
            return f"the {launch.where} sets launch options autotune cannot take over"
    return ""


def _tunable(kernel: Kernel, launches: list[Launch], knobs: list[Knob]) -> dict[str, dict[Launch, Knob]]:
    """Block params with a knob of their own at every launch, whose argument can be dropped and whose
    grid can read them from meta."""
    tuned = {}
    for param in facts_of(kernel).tile_sizes:
        at = {launch: k for k in knobs if k.params == (param,) for launch in k.launches}
        if all(launch in at and _droppable(launch, param) and _grid_edit(launch, {param: at[launch]}) is not None
               for launch in launches):
            tuned[param] = at
    return tuned


def _droppable(launch: Launch, param: str) -> bool:
    index = launch.args[param]
    later = launch.call.args[index + 1:]
    return launch.call.args[index].keyword is not None or not any(a.star for a in later)


def _base(knobs: dict[Launch, Knob], kernel: Kernel) -> int:
    known = [k.value for k in knobs.values() if k.value is not None]
    return known[0] if known else (64 if kernel.uses_dot else 1024)


def _autotuned(ms: ModuleSource, kernel: Kernel, knobs: list[Knob], reasons: list[str],
               config_set: tuple[str, ConfigSet] | None = None) -> Variant | None:
    """The kernel autotuned over the rewriter's grid around its launch values, or over `config_set`:
    (rewrite, a fixed list such as Inductor's), after the launch's own config."""
    launches = ms.launches_of(kernel)
    tuned = _tunable(kernel, launches, knobs)
    if kernel.heuristics:
        keys = heuristics_keys(kernel)
        if keys is None:
            reasons.append(f"what the heuristics of {kernel.name} set is not known (not a literal dict)")
            return None
        tuned = {p: at for p, at in tuned.items() if p not in keys}  # the heuristics go on setting theirs
    if config_set is not None:  # the set's tiles are tuned; the launch keeps setting any other
        sets = {p for values, _, _ in config_set[1].configs for p in values}
        if not sets <= set(tuned):
            reasons.append(f"{config_set[1].label} set {', '.join(sorted(sets))} but the launches of {kernel.name} "
                           f"let autotune set {', '.join(tuned) or 'no block size'}")
            return None
        tuned = {p: at for p, at in tuned.items() if p in sets}
    edits: list[tuple[cst.CSTNode, Edit]] = []
    dead: set[str] = set()
    for launch in launches:
        grid = _grid_edit(launch, {p: at[launch] for p, at in tuned.items()})
        if grid is None:
            reasons.append(f"cannot rewrite the grid of the {launch.where} as a function of meta")
            return None
        edits.extend(grid)
        edits.append((launch.call, _drop_args(launch, set(tuned))))
        dead |= {n.value for n in loads(launch.call, *launch.region)}
    warps, _ = option_value(launches[0], "num_warps", DEFAULT_WARPS)
    stages, _ = option_value(launches[0], "num_stages", DEFAULT_STAGES)
    base = {p: _base(ks, kernel) for p, ks in tuned.items()}
    tiles = [tile_terms(ms, launch, base) for launch in launches]
    tile = max(math.prod(t) for t in tiles) if all(t and all(isinstance(x, int) for x in t) for t in tiles) else None
    configs = _config_grid(kernel, base, warps or DEFAULT_WARPS,
                           stages if launches[0].kwarg("num_stages") is not None else None, tile)
    rewrite, label, divides = "autotune", "", ()
    if config_set is not None:
        rewrite, chosen = config_set
        label, divides = chosen.label, chosen.divides
        own = configs[:1] if all(knob.value is not None for at in tuned.values() for knob in at.values()) else []
        configs = list(dict.fromkeys(own + [_config_text(*c) for c in chosen.configs]))
        label = f"{label}: "
    key = _key(kernel, set(tuned))
    key += [size for _, size in divides if size not in key]
    sized = _sized_by(kernel, launches)
    if sized is not None:  # the tensors' element count, as one more parameter in the key
        name = fresh_name("tune_numel", set(kernel.names))
        edits.append((kernel.node, _param_added(name)))
        edits.extend((call, set_kwarg(name, total)) for call, total in sized)
        key = [*key, name]
    prune = None
    if divides:  # unmasked or counted in whole tiles: a config runs only where its tiles divide the sizes
        prune = fresh_name(f"_{kernel.name}_tiles_divide", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
    decorator = _decorator(configs, key, _restored(ms, kernel), prune)
    edits.append((kernel.node, _add_decorator(kernel, decorator)))
    if prune is not None:  # last: it turns the kernel's node into the function and the kernel
        edits.append((kernel.node, _function_before(_divides_function(prune, divides))))
    scope = launches[0].scope
    cleanup = (scope.name, frozenset(dead)) if len({x.scope.name for x in launches}) == 1 else None
    touched = frozenset({kernel.name} | {x.scope.top or kernel.name for x in launches})
    staged = kernel.pipelinable or (config_set is not None and any(s is not None for _, _, s in config_set[1].configs))
    over = ", ".join([*tuned, "num_warps"] + (["num_stages"] if staged else []))
    return Variant(rewrite, f"{label}@triton.autotune on {kernel.name}: {len(configs)} configs over {over}, "
                   f"key {key}", touched, tuple(edits), cleanup if scope.name != "<module>" else None)


def config_sets(rewrite: str, choose: Chooser, floors: bool = False) -> Callable[[ModuleSource], Found]:
    """A rewrite that autotunes each kernel over the fixed config lists `choose` draws for it; with `floors`, a
    grid that counts whole tiles (`M // 64`) is rewritten with its tile (`choose` then prunes the configs to the
    tiles that divide the size)."""
    def rewrite_fn(ms: ModuleSource) -> Found:
        variants, reasons = [], []
        for kernel in ms.kernels.values():
            why = _why_not_autotune(ms, kernel)
            sets = choose(ms, kernel) if not why else why
            if isinstance(sets, str):
                reasons.append(sets)
                continue
            if kernel.autotune is not None:
                variants.extend(v for chosen in sets if (v := _merged_configs(kernel, rewrite, chosen, reasons)))
                continue
            knobs = [k for k in knobs_mod.find(ms, floors)[0] if k.kernel is kernel]
            variants.extend(v for chosen in sets if (v := _autotuned(ms, kernel, knobs, reasons, (rewrite, chosen))))
        return Found(variants, reasons)
    return rewrite_fn


def _key(kernel: Kernel, tuned: set[str]) -> list[str]:
    """The arguments whose values change the best config: size-like ints, not pointers or strides (the
    autotune rewrite adds the element count of the tensors too: _sized_by)."""
    plain = [p.name for p in kernel.params if p.name not in tuned and p.name not in kernel.pointers
             and p.name not in facts_of(kernel).tile_sizes and "stride" not in p.name.lower()]
    sized = [n for n in plain if len(n) == 1 or any(w in n.lower() for w in SIZE_WORDS)]
    return sized or [n for n in plain if not any(p.constexpr for p in kernel.params if p.name == n)][:2]


def _sized_by(kernel: Kernel, launches: list[Launch]) -> list[tuple[cst.Call, str]] | None:
    """Each launch's call, with the sum of the element counts of the tensors it passes for the kernel's
    pointer parameters (those passed as a plain name or attribute at every launch); None if there are none,
    or the parameters have a star, or a launch passes one with a default by position (the new parameter
    goes before those).

    The sizes the shapes differ in are often not arguments: flash_decode2_phi's shapes differ only in the
    batch, which only the grid and the tensors know, and rmsnorm_triton's only in the rows. Keyed on their
    size arguments alone (`head_dim`, `N_SIZE`), their autotuners tuned once, on the first shape a process
    called (a kernel of 4-7 µs, which Triton's autotuner times on the CPU that launches it), and kept that
    draw for shapes up to 100x longer: in bench 3, 10 autotuned finalists re-measured more than 10 % off their
    search figure, up to 1.04x searched against 0.34x re-checked (BENCHMARKS.md, bench 3)."""
    params = kernel.node.params
    if params.star_arg not in (cst.MaybeSentinel.DEFAULT, None) or params.kwonly_params or params.star_kwarg \
            or not defaults_by_keyword(params, [launch.call for launch in launches]):
        return None
    tensors = []
    for param in (p.name for p in kernel.params if p.name in kernel.pointers):
        passed = [launch.arg(param) for launch in launches]
        if all(a is not None and not a.star and isinstance(a.value, (cst.Name, cst.Attribute))
               and not _wrapped(launch, a.value) for launch, a in zip(launches, passed)):
            tensors.append([code(a.value) for a in passed])
    if not tensors:
        return None
    return [(launch.call, " + ".join(f"{names[i]}.numel()" for names in tensors))
            for i, launch in enumerate(launches)]


def _wrapped(launch: Launch, value: cst.BaseExpression) -> bool:
    """Whether the name a launch passes for a pointer holds what a `triton.*` call made of a tensor
    (`triton.reinterpret(out, tl.float16)`: a TensorWrapper, which has no `numel()`)."""
    if not isinstance(value, cst.Name):
        return False
    made = launch.scope.value(value.value)
    return isinstance(made, cst.Call) and (dotted(made.func) or "").startswith("triton.")


def _param_added(name: str) -> Edit:
    def edit(node: cst.FunctionDef) -> cst.FunctionDef:
        return node.with_changes(params=with_params(node.params, [cst.Param(cst.Name(name))]))
    return edit


def _config_grid(kernel: Kernel, base: dict[str, int], warps: int, stages: int | None,
                 tile: int | None = None) -> list[str]:
    """The base config, then one change at a time, growing before shrinking (naive kernels tend to be too
    small), with num_warps two steps either way (bench 1's largest num_warps gains were 4 -> 16, 4 -> 1 and
    1 -> 8); at most MAX_CONFIGS. num_warps / 4 only where the base config's `tile` (elements) is known and
    leaves a thread at most knobs.MAX_PER_THREAD of them: int8_quantization's 128 x C tile on one warp did not
    compile in 180 s, in both benches."""
    current = stages or DEFAULT_STAGES
    pipelined = kernel.pipelinable
    grid = [(base, warps, stages)]
    grid += [({**base, p: v * 2}, warps, stages) for p, v in base.items()]
    grid += [(base, warps * 2, stages), (base, warps // 2, stages)]
    grid += [(base, warps, current + 1)] if pipelined else []
    grid += [({p: v * 2 for p, v in base.items()}, warps, stages)] if len(base) > 1 else []
    grid += [({**base, p: v * 4}, warps, stages) for p, v in base.items()]
    grid += [(base, warps * 4, stages)]
    if tile is not None and warps // 4 and tile <= knobs_mod.MAX_PER_THREAD * 32 * (warps // 4):
        grid += [(base, warps // 4, stages)]
    grid += [({**base, p: v // 2}, warps, stages) for p, v in base.items()]
    grid += [(base, warps, current - 1)] if pipelined else []
    valid = [c for c in grid if _config_ok(kernel, c[0], base) and c[1] in WARPS and (c[2] or 3) in STAGES]
    return list(dict.fromkeys(_config_text(*c) for c in valid))[:MAX_CONFIGS]


def _config_ok(kernel: Kernel, values: dict[str, int], base: dict[str, int]) -> bool:
    top = knobs_mod.MAX_DOT_BLOCK if kernel.uses_dot else knobs_mod.MAX_BLOCK
    if any(v > top or (v < knobs_mod.MIN_BLOCK and v < base[p]) or v < 1 for p, v in values.items()):
        return False
    return kernel.uses_dot or len(values) < 2 or math.prod(values.values()) <= knobs_mod.MAX_TILE_ELEMENTS


def _config_text(values: dict[str, int], warps: int, stages: int | None) -> str:
    mapping = ", ".join(f'"{p}": {v}' for p, v in values.items())
    options = f", num_warps={warps}" + (f", num_stages={stages}" if stages is not None else "")
    return f"triton.Config({{{mapping}}}{options})"


def _names(names: list[str]) -> str:
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


def _decorator(configs: list[str], key: list[str], restore: list[str], prune: str | None = None) -> cst.Decorator:
    lines = ["@triton.autotune(", "    configs=["] + [f"        {c}," for c in configs] + ["    ],"]
    lines.append(f"    key={_names(key)},")
    if restore:  # the kernel writes what it reads, or adds into it: every tuning run starts from the same data
        lines.append(f"    restore_value={_names(restore)},")
    if prune is not None:
        lines.append(f'    prune_configs_by={{"early_config_prune": {prune}}},')
    lines.append(")")
    return cst.parse_module("\n".join(lines) + "\ndef kernel():\n    pass\n").body[0].decorators[0]


def _restored(ms: ModuleSource, kernel: Kernel) -> list[str]:
    """Pointer parameters that a tuning run changes in a way the next run reads: the kernel's own read-and-written
    and atomic buffers, and at each launch those the host's aliasing fact adds (`k[grid](x, y, x, n)`)."""
    own = touches(kernel)
    changed = own.reads & own.writes  # atomics count as both
    for host in host_functions(ms):
        changed |= {p for site in host.sites if site.kernel is kernel for p in host.restored(site)}
    return [p.name for p in kernel.params if p.name in changed]


def _divides_function(name: str, divides: tuple[tuple[str, str], ...]) -> cst.FunctionDef:
    pairs = ", ".join(f'("{tile}", "{size}")' for tile, size in divides)
    text = (f"def {name}(configs, named_args, **kwargs):\n"
            f'    """The configs whose tiles divide the sizes they tile (the kernel\'s accesses along them are not '
            'masked, or its grid or loop counts whole tiles only); the launch\'s own, first, where none does."""\n'
            f"    kept = [c for c in configs if all(named_args[size] % c.kwargs[tile] == 0 for tile, size in "
            f"({pairs},))]\n"
            f"    return kept or configs[:1]\n")
    return cst.parse_module(text).body[0]


def _function_before(function: cst.FunctionDef) -> Edit:
    def edit(node: cst.FunctionDef) -> cst.FlattenSentinel:
        return cst.FlattenSentinel([function.with_changes(leading_lines=node.leading_lines),
                                    node.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])])
    return edit


def _add_decorator(kernel: Kernel, decorator: cst.Decorator) -> Edit:
    """The autotuner above @triton.heuristics and @triton.jit: heuristics then read the config it picks."""
    def edit(node: cst.FunctionDef) -> cst.FunctionDef:
        decorators = list(node.decorators)
        at = next(i for i, d in enumerate(decorators)
                  if code(d.decorator).split("(")[0].rpartition(".")[2] in ("jit", "heuristics"))
        return node.with_changes(decorators=[*decorators[:at], decorator, *decorators[at:]])
    return edit


def heuristics_keys(kernel: Kernel) -> set[str] | None:
    """The names @triton.heuristics sets (the keys of its literal dict); None where they are not a literal dict."""
    keys: set[str] = set()
    for decorator in kernel.node.decorators:
        target = decorator.decorator
        if not (isinstance(target, cst.Call) and code(target.func).rpartition(".")[2] == "heuristics"):
            continue
        values = target.args[0].value if target.args else None
        if not isinstance(values, cst.Dict) or not all(
                isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString) for e in values.elements):
            return None
        keys |= {e.key.evaluated_value for e in values.elements}
    return keys


def _drop_args(launch: Launch, tuned: set[str]) -> Edit:
    """Drop the tuned constexprs and num_warps/num_stages; positional arguments after a dropped one are
    passed by keyword."""
    args = launch.call.args
    drop = {launch.args[p] for p in tuned}
    drop |= {i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value in LAUNCH_OPTIONS}
    first = min((i for i in drop if args[i].keyword is None), default=len(args))
    names = {index: name for name, index in launch.args.items()}
    rename = {i: names[i] for i, a in enumerate(args) if i > first and a.keyword is None and i not in drop}

    def edit(call: cst.Call) -> cst.Call:
        new = [keyword_arg(rename[i], a.value).with_changes(comma=a.comma) if i in rename else a
               for i, a in enumerate(call.args)]
        return call.with_changes(args=without(new, drop))
    return edit


class _ToMeta(cst.CSTTransformer):
    """A grid expression with the tuned block sizes read from `meta`; the locals of the launching function
    that depend on them are inlined (and must serve nothing but this grid)."""

    def __init__(self, launch: Launch, ids: dict[int, str], names: dict[str, str], meta: str,
                 less_one: set[int] = frozenset()) -> None:
        super().__init__()
        self.launch, self.ids, self.names, self.meta, self.less_one = launch, ids, names, meta, less_one
        self.load_ids: set[int] = set()
        self.inlined: dict[int, str] = {}  # id of the name replaced -> the name

    def convert(self, node: cst.BaseExpression) -> cst.BaseExpression:
        self.load_ids |= {id(n) for n in loads(node)}
        return node.visit(self)

    def depends(self, node: cst.CSTNode, seen: frozenset[str] = frozenset()) -> bool:
        if any(id(n) in self.ids for n in subnodes(node, cst.Integer) + subnodes(node, cst.Name)):
            return True
        for name in loads(node):
            value = self.launch.scope.value(name.value)
            if name.value in self.names or (name.value not in seen and value is not None
                                            and self.depends(value, seen | {name.value})):
                return True
        return False

    def private(self) -> bool:
        """Whether the inlined locals exist only to compute this grid (their values are in the region)."""
        region = {id(node) for node in self.launch.region}
        return all(id(self.launch.scope.value(name)) in region for name in set(self.inlined.values()))

    def on_leave(self, original_node, updated_node):
        param = self.ids.get(id(original_node))
        if param is None and isinstance(original_node, cst.Name) and id(original_node) in self.load_ids:
            param = self.names.get(original_node.value)
            value = self.launch.scope.value(original_node.value)
            if param is None and value is not None and self.depends(value):
                self.inlined[id(original_node)] = original_node.value
                return parenthesized(self.convert(value))
        if param is not None:
            less = " - 1" if id(original_node) in self.less_one else ""
            return cst.parse_expression(f'({self.meta}["{param}"]{less})' if less else f'{self.meta}["{param}"]')
        if isinstance(original_node, cst.Element | cst.Arg) and id(original_node.value) in self.inlined:
            return updated_node.with_changes(value=updated_node.value.with_changes(lpar=[], rpar=[]))
        return updated_node


def _grid_edit(launch: Launch, tuned: dict[str, Knob]) -> list[tuple[cst.CSTNode, Edit]] | None:
    """Edits that make the grid read the tuned tile sizes from meta; None when that cannot be done."""
    need = {p: k for p, k in tuned.items() if k.role == "tiled" and p not in launch.meta_use[0]}
    if not need:
        return []
    ids = {id(n): p for p, k in need.items() for n in k.nodes
           if id(n) in k.grid_nodes and (isinstance(n, cst.Integer) or k.kind == "shared")}
    less_one = {i for k in need.values() for i in k.less_one}
    names = {k.name: p for p, k in need.items() if k.name is not None and k.kind != "shared"}
    grid = launch.grid_value
    if len(grid) == 1 and isinstance(grid[0], cst.Lambda):
        converter = _ToMeta(launch, ids, names, grid[0].params.params[0].name.value, less_one)
        body = converter.convert(grid[0].body)
        edit = (grid[0], lambda node: node.with_changes(body=body))
    elif launch.meta_grid is None:
        meta = "META" if "meta" in {n.value for n in loads(*grid)} else "meta"
        converter = _ToMeta(launch, ids, names, meta, less_one)
        edit = _new_grid(launch, [converter.convert(g) for g in grid], meta)
    else:
        return None
    return [edit] if converter.private() else None


def _new_grid(launch: Launch, converted: list[cst.BaseExpression], meta: str) -> tuple[cst.CSTNode, Edit]:
    """`lambda meta: (...)` in place of the grid's value (when a local holds it only for this launch) or
    of the launch's subscript."""
    text = ", ".join(code(c) for c in converted)
    if len(converted) == 1 and isinstance(converted[0], cst.Tuple):
        text = text if converted[0].lpar else f"({text})"
    else:
        text = f"({text},)" if len(converted) == 1 else f"({text})"
    grid = f"lambda {meta}: {text}"
    named = launch.grid[0] if len(launch.grid) == 1 and isinstance(launch.grid[0], cst.Name) else None
    if named is not None and launch.scope.value(named.value) is not None:
        if sum(1 for n in launch.scope.body_loads() if n.value == named.value) == 1:
            return launch.scope.value(named.value), replace_with(grid)
    new_slice = [cst.SubscriptElement(cst.Index(cst.parse_expression(grid)))]
    return launch.subscript, lambda node: node.with_changes(slice=new_slice)


def existing_configs(kernel: Kernel) -> tuple[cst.List, list[tuple[dict, int | None, int | None]]] | None:
    call = kernel.autotune.decorator
    if not isinstance(call, cst.Call):
        return None
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "configs"),
               call.args[0] if call.args and call.args[0].keyword is None else None)
    if arg is None or not isinstance(arg.value, cst.List):
        return None
    parsed = []
    for element in arg.value.elements:
        config = literal_config(element.value)
        if config is None or not all(isinstance(k, str) and type(v) is int for k, v in config[0].items()):
            return None
        values, options = config
        parsed.append((values, options.get("num_warps"), options.get("num_stages")))
    return arg.value, parsed


def _merged_configs(kernel: Kernel, rewrite: str, config_set: ConfigSet, reasons: list[str]) -> Variant | None:
    """An autotuned kernel's own configs and the set's, one list: the set's tiles with the other values of the
    kernel's first config (a group size, say), where the kernel's configs set every tile the set sets."""
    label, chosen = config_set.label, config_set.configs
    decorator = kernel.autotune.decorator
    if config_set.divides and any(a.keyword is not None and a.keyword.value == "prune_configs_by"
                                  for a in decorator.args):
        reasons.append(f"{kernel.name}'s accesses along {config_set.divides[0][0]} are not masked, and its autotuner "
                       "prunes its configs its own way already")
        return None
    found = existing_configs(kernel)
    if found is None:
        reasons.append(f"the autotune configs of {kernel.name} are made when the module runs, not held in its source: none can be added")
        return None
    configs_list, parsed = found
    tiles = {p for values, _, _ in chosen for p in values}
    if not parsed or not all(tiles <= set(values) for values, _, _ in parsed):
        reasons.append(f"{label} set {', '.join(sorted(tiles))}, which the autotune configs of {kernel.name} do not "
                       "all set (the launch does)")
        return None
    base = parsed[0][0]
    have = {_config_text(v, w or DEFAULT_WARPS, s) for v, w, s in parsed}
    new = [text for values, warps, stages in chosen
           if (text := _config_text({**base, **values}, warps, stages)) not in have]
    new = list(dict.fromkeys(new))
    if not new:
        reasons.append(f"the autotune configs of {kernel.name} hold {label} already")
        return None
    elements = [cst.Element(cst.parse_expression(text)) for text in new]

    def edit(node: cst.List) -> cst.List:
        items = list(node.elements)
        for element in elements:
            items = appended(items, element)
        return node.with_changes(elements=items)
    edits: list[tuple[cst.CSTNode, Edit]] = [(configs_list, edit)]
    if config_set.divides:  # the tiles must divide the sizes: the autotuner prunes the configs whose do not
        ms = kernel.ms
        prune = fresh_name(f"_{kernel.name}_tiles_divide", {n for s in ms.scopes for n in s.assigns} | set(ms.kernels))
        key = next((a.value for a in decorator.args if a.keyword is not None and a.keyword.value == "key"), None)
        if not isinstance(key, cst.List):
            reasons.append(f"the autotune key of {kernel.name} is not a literal list")
            return None
        have_keys = {e.value.evaluated_value for e in key.elements if isinstance(e.value, cst.SimpleString)}
        more = [cst.Element(cst.SimpleString(f'"{size}"')) for _, size in config_set.divides if size not in have_keys]

        def keyed(node: cst.List) -> cst.List:
            items = list(node.elements)
            for element in more:
                items = appended(items, element)
            return node.with_changes(elements=items)
        pruned = keyword_arg("prune_configs_by", cst.parse_expression(f'{{"early_config_prune": {prune}}}'))
        edits += [(key, keyed), (decorator, lambda node: node.with_changes(args=appended(node.args, pruned))),
                  (kernel.node, _function_before(_divides_function(prune, config_set.divides)))]
    return Variant(rewrite, f"{label}: {len(new)} configs added to the {len(parsed)} of {kernel.name}'s autotuner",
                   frozenset({kernel.name}), tuple(edits))


def _more_configs(kernel: Kernel, reasons: list[str]) -> list[Variant]:
    """One variant per config next to an existing one (one change at a time) that is not there yet."""
    found = existing_configs(kernel)
    if found is None:
        reasons.append(f"the autotune configs of {kernel.name} are made when the module runs, not held in its source: none can be added")
        return []
    configs_list, parsed = found
    have = {_config_text(v, w or DEFAULT_WARPS, s) for v, w, s in parsed}
    candidates = [text for values, warps, stages in parsed
                  for text in _config_grid(kernel, values, warps or DEFAULT_WARPS, stages)[1:]]
    variants = []
    for text in list(dict.fromkeys(t for t in candidates if t not in have))[:MAX_NEW_CONFIGS]:
        element = cst.Element(cst.parse_expression(text))
        variants.append(Variant("autotune", f"add {text} to the autotune configs of {kernel.name}",
                                frozenset({kernel.name}),
                                ((configs_list, lambda node, e=element: node.with_changes(
                                    elements=appended(node.elements, e))),)))
    if not variants:
        reasons.append(f"the autotune configs of {kernel.name} cover the rewriter's grid already")
    return variants
