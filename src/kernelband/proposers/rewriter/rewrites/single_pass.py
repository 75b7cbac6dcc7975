"""single_pass: a kernel whose loops walk a row [0, n) in blocks of a constexpr B (one pass or several, in any
loop form, inside a 2-D tile or a tl.dot's K loop) gets a twin in which each such loop is its body, run once
with its block at offset 0, and the launch calls the twin with B = triton.next_power_of_2(n) where a row fits
one block, the original kernel otherwise:

    if 0 < n_cols <= 16384:
        softmax_kernel_single_pass[(rows,)](..., n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols),
                                            num_warps=min(16, max(4, triton.next_power_of_2(n_cols) // 256)))
    else:
        softmax_kernel[(rows,)](..., n_cols, BLOCK_SIZE=128, num_warps=1)

Where one block of any B >= n computes what the loops compute (`analysis.blocked` says when, and why not), a
block of B >= n > 0 runs each loop once, at offset 0: the twin computes what the original does. Its passes
read the same row at the same offsets, with the same masks, and no store in between; in one basic block the
compiler can keep the first read and reuse it (Triton's common-subexpression pass merges identical loads),
where the loop form reads the row once a pass.

A row fits where the block's tile, B times the tile's other extents (a 2-D tile's rows), holds at most 16,384
elements, as a row of plain loads does today; a block that is a tl.dot operand is at least 16 (tl.dot's minimum) and
at most 64, the K that the loop's own steps cover in one or two: a longer K keeps the loop, whose steps the compiler
pipelines. num_warps follows the tile as in Triton's fused-softmax tutorial (4 up to 1,024 elements, then one warp
more per 256, up to 16); a tl.dot kernel keeps its launch's, an autotuned kernel its configs'. Where the autotuner
or a heuristic sets B, the twin's configs (or heuristics) leave it out and the launch passes it; a config pruner
stays, given B from the launch (it may prune the configs whose tiles do not divide the sizes they tile
unmasked).
"""

from __future__ import annotations

import ast
import math

import libcst as cst

from kernelband import pyast
from kernelband.proposers.rewriter.analysis.block_reads import readable
from kernelband.proposers.rewriter.analysis.blocked import RowBlock
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_values import rereadable
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    dotted,
    fresh_name,
    int_value,
    literal_config,
)
from kernelband.proposers.rewriter.edits import Found, Variant, set_kwarg, statements

MAX_TILE = 16384  # elements a block's tile may hold in the single-pass kernel: 32 per thread of 16 warps
MAX_DOT = 64  # a tl.dot K block in one step: what the loop's own K steps (32-64) cover in one or two; a longer
# K keeps the loop, whose steps the compiler pipelines (one block leaves its loads nothing to overlap with)
MIN_DOT = 16
WARPS = "min(16, max(4, {elements} // 256))"
WITHOUT = '''
def {name}(configs, key):
    """The autotune configs with `key` left out (the launch passes it), each distinct config once."""
    import copy

    kept, seen = [], set()
    for config in configs:
        config = copy.copy(config)
        config.kwargs = {{k: v for k, v in config.kwargs.items() if k != key}}
        text = repr(sorted(config.all_kwargs().items(), key=str))
        if text not in seen:
            seen.add(text)
            kept.append(config)
    return kept
'''
PRUNING = '''
def {name}(pruning, key):
    """The autotuner's pruning with `key`, which the launch passes and the configs leave out, put back into each
    config its pruner reads: a pruner that keeps the configs whose tiles divide the sizes keeps them still."""
    import copy

    prune = pruning.get("early_config_prune")
    if prune is None:
        return pruning

    def pruned(configs, named_args, **kwargs):
        value = kwargs[key] if key in kwargs else named_args[key]
        whole = []
        for config in configs:
            config = copy.copy(config)
            config.kwargs = {{**config.kwargs, key: value}}
            whole.append(config)
        mine = {{id(w): c for w, c in zip(whole, configs)}}
        kept = []
        for config in prune(whole, named_args, **kwargs):
            if id(config) not in mine:  # a config the pruner made: the launch still passes the key
                config = copy.copy(config)
                config.kwargs = {{k: v for k, v in config.kwargs.items() if k != key}}
            kept.append(mine.get(id(config), config))
        return kept

    return {{**pruning, "early_config_prune": pruned}}
'''


class _Twin(cst.CSTTransformer):
    """The kernel renamed, each row loop replaced by its body at offset 0, each loop that runs no block under
    one block left out (what it carries keeps the value it had before it), B left out of its autotune configs and
    heuristics."""

    def __init__(self, kernel: Kernel, row: RowBlock, name: str, without: str | None, pruning: str | None,
                 heuristic: bool) -> None:
        super().__init__()
        self.kernel, self.row, self.name, self.heuristic = kernel, row, name, heuristic
        self.without, self.pruning = without, pruning
        self.loops = {id(loop.node): loop for loop in row.loops}
        self.empty = {id(loop.node) for loop in row.empty}

    def _unrolled(self, original, updated):
        loop = self.loops[id(original)]
        body = list(updated.body.body)
        if isinstance(updated.body, cst.SimpleStatementSuite):
            body = [cst.SimpleStatementLine(body=[small]) for small in body]
        first = body[0].with_changes(leading_lines=updated.leading_lines) if body else None
        if loop.form == "while":
            return cst.FlattenSentinel([first, *body[1:]])
        start = cst.parse_statement(f"{loop.var} = 0\n").with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel([start, *body])

    def _left(self, original, updated):
        if id(original) in self.empty:
            return cst.RemoveFromParent()
        return self._unrolled(original, updated) if id(original) in self.loops else updated

    def leave_For(self, original_node, updated_node):
        return self._left(original_node, updated_node)

    def leave_While(self, original_node, updated_node):
        return self._left(original_node, updated_node)

    def leave_Decorator(self, original_node, updated_node):
        call = updated_node.decorator
        if not isinstance(call, cst.Call):
            return updated_node
        name = (dotted(call.func) or "").rpartition(".")[2]
        param = self.row.param
        if name == "autotune" and self.without is not None:
            # a config pruner may guard correctness (tiles that must divide the sizes their unmasked accesses
            # walk): the twin keeps it, reading B from the launch where its configs leave it out
            args = []
            for a in call.args:
                if _configs_arg(call, a):
                    a = a.with_changes(value=cst.parse_expression(f"{self.without}({code(a.value)}, {param!r})"))
                elif _pruning_arg(call, a):
                    a = a.with_changes(value=cst.parse_expression(f"{self.pruning}({code(a.value)}, {param!r})"))
                args.append(a)
            return updated_node.with_changes(decorator=call.with_changes(args=args))
        if name == "heuristics" and self.heuristic and call.args:
            arg = call.args[0]
            if isinstance(arg.value, cst.Dict):
                kept = [e for e in arg.value.elements if not (isinstance(e, cst.DictElement) and isinstance(
                    e.key, cst.SimpleString) and e.key.evaluated_value == param)]
                value = arg.value.with_changes(elements=kept)
            else:
                value = cst.parse_expression(f"{{k: v for k, v in ({code(arg.value)}).items() if k != {param!r}}}")
            return updated_node.with_changes(decorator=call.with_changes(args=[arg.with_changes(value=value),
                                                                                  *call.args[1:]]))
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        if original_node is self.kernel.node:
            return updated_node.with_changes(name=cst.Name(self.name))
        return updated_node


def _never(host: str, low: str, bound: str, exact: bool, block: str | int | None = None) -> bool:
    """Whether a row length that is a number never takes the one-block branch."""
    try:
        n, top = pyast.literal_eval(host), pyast.literal_eval(bound)
    except (ValueError, SyntaxError):
        return False
    if not isinstance(n, int) or not isinstance(top, int):
        return False
    return not (int(low) < n <= top if low == "0" else int(low) <= n <= top) or (exact and n & (n - 1) != 0) \
        or (exact and isinstance(block, int) and block > 0 and n % block != 0)


def _configs_arg(call: cst.Call, arg: cst.Arg) -> bool:
    return (arg.keyword is not None and arg.keyword.value == "configs") or (arg.keyword is None and arg is call.args[0])


def _pruning_arg(call: cst.Call, arg: cst.Arg) -> bool:
    """autotune's prune_configs_by, by keyword or third in place."""
    positional = [a for a in call.args if a.keyword is None]
    return (arg.keyword is not None and arg.keyword.value == "prune_configs_by") or (
        arg.keyword is None and len(positional) > 2 and arg is positional[2])


def _tuned(kernel: Kernel) -> dict[str, list[int]] | None:
    """The values the autotune configs give each constexpr they set ({} without autotuning); None where the
    configs are not a literal list."""
    if kernel.autotune is None:
        return {}
    call = kernel.autotune.decorator
    arg = next((a for a in call.args if _configs_arg(call, a)), None) if isinstance(call, cst.Call) else None
    if arg is None or not isinstance(arg.value, cst.List | cst.Tuple):
        return None
    found: dict[str, list[int]] = {}
    for element in arg.value.elements:
        config = literal_config(element.value)
        if config is None:
            return None
        for key, value in config[0].items():
            found.setdefault(key, []).append(value)
    return found


def _heuristic_keys(kernel: Kernel) -> set[str] | None:
    """The constexprs a @triton.heuristics dict sets; None where the dict is not a literal."""
    keys: set[str] = set()
    for decorator in kernel.node.decorators:
        call = decorator.decorator
        if isinstance(call, cst.Call) and (dotted(call.func) or "").endswith("heuristics") and call.args:
            if not isinstance(call.args[0].value, cst.Dict):
                return None
            keys |= {e.key.evaluated_value for e in call.args[0].value.elements
                     if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)}
    return keys


class _Launch:
    """How one launch of the kernel reads n and the tile's other extents, and its branch."""

    def __init__(self, ms: ModuleSource, launch: Launch, row: RowBlock, tuned: dict | None,
                 heuristics: set[str] | None) -> None:
        self.ms, self.launch, self.row, self.tuned, self.heuristics = ms, launch, row, tuned, heuristics
        self.kernel = launch.kernel

    def _set_elsewhere(self, name: str) -> bool:
        return (self.tuned is None and self.kernel.autotune is not None) or name in (self.tuned or {}) \
            or self.heuristics is None or name in self.heuristics

    def value(self, name: str) -> str | int | None:
        """What the launch passes for a kernel parameter: its code (an int where it is a number); None where
        the launch cannot say it (set by the autotuner or a heuristic, or an expression it would evaluate
        again)."""
        passed = self.launch.value(name)  # an argument, an element of a starred one or a value of a `**dict`
        if passed is not None:
            number = int_value(passed)
            if number is None and isinstance(passed, cst.Name):
                kind, given = self.ms.name_value(self.launch.scope, passed.value)
                number = int_value(given) if kind != "default" else None
            return number if number is not None else code(passed) if rereadable(passed) else None
        if self.launch.unmapped is not None or self._set_elsewhere(name):
            return None
        param = self.kernel.param(name)
        if param is not None and param.default is not None and rereadable(param.default):
            return int_value(param.default) if int_value(param.default) is not None else code(param.default)
        return None

    def extent(self, name: str) -> int | str | None:
        """A tile extent at the launch: its value, or the largest the literal autotune configs give it."""
        if name.isdigit():
            return int(name)
        if self.tuned and name in self.tuned and self.launch.value(name) is None:
            return max(self.tuned[name])
        if self.tuned is None and self.launch.value(name) is None and self.kernel.node.decorators[0] is self.kernel.autotune:
            # configs the rewrite cannot read: the autotuner holds them at run time
            return f"max(config.kwargs.get({name!r}, 1) for config in {self.kernel.name}.configs)"
        return self.value(name)

    def plan(self, twin: str) -> tuple[cst.CSTNode, object] | str | None:
        """(the launch's statement, its edit into the branch); None where the row's length is a number that
        never fits one block; or why the launch cannot branch."""
        ms, launch, row = self.ms, self.launch, self.row
        parent = ms.parents.get(id(launch.call))
        statement = ms.parents.get(id(parent))
        if not (isinstance(parent, cst.Expr | cst.Return) and isinstance(statement, cst.SimpleStatementLine)
                and len(statement.body) == 1 and launch.scope.name != "<module>"):
            return f"the {launch.where} is part of a larger expression: the launch cannot branch on the row's length"
        if row.param in launch.meta_use[0] or not launch.meta_use[1]:
            return f"the grid of the {launch.where} reads the launch's {row.param}"
        host = self._host(row.bound)
        if isinstance(host, str) and host.startswith("!"):
            return host[1:]
        atom = isinstance(pyast.parse(host, mode="eval").body, ast.Name | ast.Attribute | ast.Subscript | ast.Call
                          | ast.Constant)
        n = host if atom else f"({host})"
        size = f"triton.next_power_of_2({n})"
        low = "0"
        if row.dot:
            size, bound, elements = f"max({MIN_DOT}, {size})", str(MAX_DOT), None
            low = str(MIN_DOT) if row.padded else low
        else:
            extents = [self.extent(d) for d in row.others]
            if any(e is None for e in extents):
                missing = next(d for d, e in zip(row.others, extents) if e is None)
                return f"the {launch.where} does not say {missing}, the extent of the tile beside {row.param}"
            numbers = math.prod(e for e in extents if isinstance(e, int))
            codes = [f"({e})" if not str(e).isidentifier() else str(e) for e in extents if not isinstance(e, int)]
            if numbers > MAX_TILE:
                return f"the tile beside {row.param} at the {launch.where} holds more than {MAX_TILE} elements already"
            rest = " * ".join(([str(numbers)] if numbers > 1 else []) + codes)
            bound = str(MAX_TILE // numbers) if not codes else f"{MAX_TILE // numbers} // ({' * '.join(codes)})"
            elements = size if not rest else f"{size} * {rest}"
        block = self._block() if row.padded else None
        if row.padded and block is None:
            return (f"the lanes past the row's end change {self.kernel.name}'s result ({row.padded}), and the "
                    f"{launch.where} does not say {row.param} as a value it can read again: no guard can see that "
                    f"its blocks leave no such lane")
        if _never(host, low, bound, bool(row.padded), block):
            return None
        block_arg = launch.arg(row.param)
        if row.param in launch.spread or row.param in launch.keyed:
            return f"the {launch.where} passes {row.param} inside a starred argument: the twin's block cannot be set"
        warps = elements is not None and self.kernel.autotune is None and "num_warps" not in launch.keyed

        def edit(line: cst.SimpleStatementLine) -> cst.If:
            small = line.body[0]
            call = small.value
            args = list(call.args)
            if block_arg is not None:
                index = launch.args[row.param]
                args[index] = args[index].with_changes(value=cst.parse_expression(size))
                single = call.with_changes(args=args)
            else:
                single = set_kwarg(row.param, size)(call)
            single = single.with_changes(func=single.func.with_changes(value=cst.Name(twin)))
            if warps:
                single = set_kwarg("num_warps", WARPS.format(elements=elements))(single)
            # no lane past n in either kernel: n is a power of two (the twin's one block) and a multiple of the
            # launch's block (the original's last block)
            size_b = block if isinstance(block, int) or str(block).isidentifier() else f"({block})"
            divides = "" if block == 1 else f" and {n} % {size_b} == 0"
            exact = f" and {n} & ({n} - 1) == 0{divides}" if row.padded else ""
            branch = cst.parse_statement(f"if {low} < {n} <= {bound}{exact}:\n    pass\nelse:\n    pass\n"
                                         if low == "0" else
                                         f"if {low} <= {n} <= {bound}{exact}:\n    pass\nelse:\n    pass\n")
            return branch.with_changes(
                leading_lines=line.leading_lines,
                body=branch.body.with_changes(body=[line.with_changes(body=[small.with_changes(value=single)],
                                                                      leading_lines=[])]),
                orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(
                    body=[line.with_changes(leading_lines=[])])))
        return statement, edit

    def _block(self) -> str | int | None:
        """The original's block at the launch: its value, or the least common multiple of the literal autotune
        configs' (each divides what it divides); None where the launch cannot say it."""
        param = self.row.param
        if self.launch.value(param) is None and self.tuned and param in self.tuned:
            return math.lcm(*self.tuned[param])
        return self.value(param)

    def _host(self, end: ast.expr) -> str:
        """n in the launch's values; "!why" where the launch cannot compute it."""
        row, names = self.row, {}
        for node in ast.walk(end):
            if isinstance(node, ast.Name) and self.kernel.param(node.id) is not None and node.id not in names:
                value = self.value(node.id)
                if value is None:
                    return (f"!the row's length ({ast.unparse(end)}) reads {node.id}, which the {self.launch.where} "
                            "does not pass as a value it can read again")
                names[node.id] = str(value)
        class Values(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                return pyast.parse(names[node.id], mode="eval").body if node.id in names else node

        return ast.unparse(Values().visit(pyast.parse(row.host_end, mode="eval")))


def single_pass(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    if "triton" not in ms.imported:
        return Found([], ["the module does not `import triton`"])
    for kernel in ms.kernels.values():
        blocks = facts_of(kernel).blocked
        if not blocks.params:
            reasons.append(f"{kernel.name} has no loop that walks a row in blocks of a constexpr")
            continue
        if not ms.launches_of(kernel):
            reasons.append(f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that call it)")
            continue
        for param in blocks.params:
            row = blocks.of(param)
            if isinstance(row, str):
                reasons.append(row)
                continue
            found = _variant(ms, kernel, row)
            if isinstance(found, str):
                reasons.append(found)
            else:
                variants.append(found)
    return Found(variants, reasons)


def _variant(ms: ModuleSource, kernel: Kernel, row: RowBlock) -> Variant | str:
    tuned, heuristics = _tuned(kernel), _heuristic_keys(kernel)
    used = {n for s in ms.scopes for n in s.assigns} | set(ms.kernels)
    twin = fresh_name(f"{kernel.name}_single_pass", used)
    edits: list = []
    for launch in ms.launches_of(kernel):
        found = _Launch(ms, launch, row, tuned, heuristics).plan(twin)
        if isinstance(found, str):
            return found
        if found is not None:
            edits.append(found)
    if not edits:
        return f"{kernel.name}'s rows ({readable(row.bound)}) never fit one block of {row.param}"
    # B set by the autotuner's configs (or configs the rewrite cannot read): the twin's configs leave it out
    without = fresh_name("_configs_without", used) if kernel.autotune is not None and (
        tuned is None or row.param in tuned) else None
    call = kernel.autotune.decorator if kernel.autotune is not None else None
    pruning = fresh_name("_pruning_with", used | {without}) if without and isinstance(call, cst.Call) and any(
        _pruning_arg(call, a) for a in call.args) else None
    heuristic = heuristics is None or row.param in heuristics
    gap = [cst.EmptyLine(), cst.EmptyLine()]
    copy = kernel.node.visit(_Twin(kernel, row, twin, without, pruning, heuristic)).with_changes(leading_lines=gap)
    helper = statements(WITHOUT.format(name=without).lstrip("\n")) if without else []
    helper += statements(PRUNING.format(name=pruning).lstrip("\n")) if pruning else []
    helper = [h.with_changes(leading_lines=gap) for h in helper]
    edits.append((kernel.node, lambda node: cst.FlattenSentinel([node, *helper, copy])))
    touched = frozenset({kernel.name, twin} | {x.scope.top for x in ms.launches_of(kernel)})
    end = ast.unparse(row.bound)
    if row.dot:
        size, bound = f"max({MIN_DOT}, triton.next_power_of_2({end}))", str(MAX_DOT)
    else:
        size = f"triton.next_power_of_2({end})"
        bound = f"{MAX_TILE} // ({' * '.join(row.others)})" if row.others else str(MAX_TILE)
    exact = (f" and {end} is a power of two and a multiple of the launch's {row.param}, so that no lane lies past it "
             f"({row.padded})") if row.padded else ""
    low = f"{MIN_DOT} <=" if row.dot and row.padded else "0 <"
    over = readable(row.end) if row.bound is not row.end else end
    empty = f" ({len(row.empty)} loop(s) that run no block there left out)" if row.empty else ""
    return Variant("single_pass", f"{kernel.name}'s {len(row.loops)} loop(s) over {over} as one block of {size}{empty} "
                   f"where {low} {end} <= {bound}{exact} ({twin}), the loops otherwise", touched, tuple(edits))
