"""The autotuner's choices, pinned: an autotuned module rewritten to launch, for each key the search met, the
configuration the evaluator's autotuner chose for it.

An autotuner in the user's process times its configurations with Triton's defaults, beside whatever else the
process does; for a kernel of a few µs that choice is a draw, and the speed the search measured is then a
promise the user's program may not keep. The pinned module makes the choice once, the evaluator's, in code a
person would write: the kernel without `@triton.autotune`, a table {key: configuration} beside it, and before
each launch one call of a function of the key as Triton computes it (the values of the `key=[...]` arguments
passed at the launch, then the dtypes of the tensors among its other arguments), cached with `functools.cache`,
so that a key is looked up once, as Triton's autotuner looks up a key it has tuned. Where the launch's grid is a
`lambda meta:` of the key's values and of constexprs every chosen configuration sets, that function also
returns the grid the configuration gives: Triton would call the lambda, and its `triton.cdiv`s (about 1.4 µs
each from the host in Triton 3.9), on every launch. The kernel is then launched directly with the
configuration's values as its keyword arguments, no autotuner in between; a key argument computed at the launch
is named once and read by both. A key the search never met goes to an autotuned copy of the kernel, over the
configurations that won somewhere and the starting kernel's own launch configuration (where the starting kernel
says it in numbers): on a shape the search never timed, the fallback can always choose what the starting kernel
ran.

`pin` returns the pinned source, or why the module cannot be pinned (the module is then handed back as it
is): a `prune_configs_by`, a config's own `pre_hook`, a launch whose arguments cannot be read (a starred
argument of unknown extent) or that is not a statement of its own, a key with values code cannot say.
"""

from __future__ import annotations

import builtins
import json
import textwrap
from dataclasses import dataclass, field

import libcst as cst

from kernelband import pyast
from kernelband.evaluation.records import TunedChoice, TunedConfig
from kernelband.proposers.rewriter.analysis.host_values import rereadable
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    dotted,
    fresh_name,
    int_value,
    literal_config,
    loads,
    subnodes,
)
from kernelband.proposers.rewriter.edits import appended
from kernelband.search.module_edits import Named, Replace, expression_key, shape_tuple, with_import

# Arguments of triton.autotune that change which configurations are tried, and so the choice itself.
_UNPINNABLE = ("prune_configs_by",)
# triton.Config's defaults, for a configuration that does not say its options (and a launch's)
_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}


@dataclass
class Pinned:
    source: str | None  # the pinned module; None when the module cannot be pinned
    reason: str = ""  # why not, one line
    kernels: list[str] = field(default_factory=list)  # the kernels pinned
    keys: int = 0  # the keys in their tables
    notes: list[str] = field(default_factory=list)  # what was left as it was, and why


class CannotPin(Exception):
    pass


def pin(source: str, choices: list[TunedChoice], start: str | None = None) -> Pinned:
    """The module with each autotuned kernel's recorded choices pinned (see the module's docstring); `start`: the
    starting kernel's source, whose launch configuration joins the fallback's."""
    try:
        return _Pinning(source, choices, start).run()
    except CannotPin as exc:
        return Pinned(None, str(exc))
    except cst.ParserSyntaxError as exc:
        return Pinned(None, f"the module does not parse: {str(exc).splitlines()[0]}")


def options(config: TunedConfig) -> dict:
    """A configuration as the launch takes it: its constexprs, then num_warps and num_stages (and num_ctas,
    maxnreg where they are not Triton's defaults)."""
    found = {**config.kwargs, "num_warps": config.num_warps or _DEFAULTS["num_warps"],
             "num_stages": config.num_stages or _DEFAULTS["num_stages"]}
    if config.num_ctas not in (None, 1):
        found["num_ctas"] = config.num_ctas
    if config.maxnreg is not None:
        found["maxnreg"] = config.maxnreg
    return found


def _literal(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    raise CannotPin(f"a key or configuration holds {value!r}, which code cannot say")


def _dict_code(values: dict) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {_literal(v)}" for k, v in values.items()) + "}"


class _Pinning:
    def __init__(self, source: str, choices: list[TunedChoice], start: str | None = None):
        self.source = source
        self.ms = ModuleSource(source)
        self.choices = choices
        try:
            self.start = ModuleSource(start) if start is not None else None
        except cst.ParserSyntaxError:
            self.start = None
        self.used = {n.value for n in subnodes(self.ms.module, cst.Name)}
        self.replace: dict[int, list[cst.BaseStatement]] = {}  # id(original statement) -> its replacement
        self.taken: dict[int, set[str]] = {}  # per launching function: the names its new locals must not take
        self.added: set[str] = set()  # the module-level names the pinning adds
        self.notes: list[str] = []
        self.pinned: list[str] = []
        self.keys = 0

    def run(self) -> Pinned:
        tuned = [k for k in self.ms.kernels.values() if k.autotune is not None]
        if not tuned:
            raise CannotPin("no @triton.autotune decorator on a @triton.jit kernel that the pinning can read")
        for kernel in tuned:
            self._kernel(kernel)
        if not self.pinned:
            raise CannotPin("; ".join(self.notes) or "no autotuner chose anything during the search")
        module = with_import(self.ms.module.visit(Replace(self.replace)), "functools")
        return Pinned(module.code, kernels=self.pinned, keys=self.keys, notes=self.notes)

    def _kernel(self, kernel: Kernel) -> None:
        mine = [c for c in self.choices if c.kernel == kernel.name]
        if not mine:
            self.notes.append(f"{kernel.name} stays autotuned: its autotuner chose nothing during the search")
            return
        call = kernel.autotune.decorator
        if not isinstance(call, cst.Call):
            raise CannotPin(f"the autotune decorator of {kernel.name} is not a call")
        named = {a.keyword.value: a for a in call.args if a.keyword is not None}
        positional = [a for a in call.args if a.keyword is None]
        for arg in _UNPINNABLE:
            if arg in named:
                raise CannotPin(f"{kernel.name}'s autotuner prunes its configurations ({arg}): which configuration "
                                f"a key gets depends on more than the key")
        configs = named.get("configs") or (positional[0] if positional else None)
        key = named.get("key") or (positional[1] if len(positional) > 1 else None)
        if configs is None or key is None:
            raise CannotPin(f"the autotune decorator of {kernel.name} does not name its configs and key")
        try:
            key_names = pyast.literal_eval(code(key.value))
        except (ValueError, SyntaxError):
            key_names = None
        if not isinstance(key_names, list | tuple) or not all(isinstance(n, str) for n in key_names):
            raise CannotPin(f"the autotune key of {kernel.name} is not a literal list of argument names")
        if any(c.chosen.pre_hook for c in mine):
            raise CannotPin(f"a configuration of {kernel.name} runs a pre_hook of its own")
        table: dict[tuple, dict] = {}
        for choice in mine:
            if not choice.exact:
                self.notes.append(f"{kernel.name}: key {choice.key} holds a value code cannot say; it goes to the "
                                  f"tuner")
                continue
            table.setdefault(tuple(choice.key), options(choice.chosen))
        if not table:
            self.notes.append(f"{kernel.name} stays autotuned: none of its keys can be written in its table")
            return
        launches = self.ms.launches_of(kernel)
        if not launches:
            raise CannotPin(f"{kernel.name} is never launched as {kernel.name}[grid](...) in the module")
        names = {
            "table": fresh_name(f"{kernel.name.upper()}_CONFIGS", self.used),
            "tuner": fresh_name(f"{kernel.name}_tuned", self.used),
        }
        self.added |= set(names.values())
        # the tensors among a launch's arguments: every one has a dtype where each key holds as many dtypes
        dtypes = {len(c.key) - len([n for n in key_names if n in launches[0].args]) for c in mine}
        # the constexprs every chosen configuration sets: a grid may read them from the configuration
        chosen = frozenset.intersection(*(frozenset(c) for c in table.values()))
        functions = [self._launch(launch, list(key_names), names, dtypes, chosen) for launch in launches]
        winners = list({json.dumps(c, sort_keys=True): c for c in table.values()}.values())
        start, why = self._starting_config(kernel, configs.value)
        if why:
            self.notes.append(why)
        pruned = self._winning_configs(configs.value, winners, start)
        rest = [f"{a.keyword.value}={code(a.value)}" for a in call.args
                if a.keyword is not None and a.keyword.value not in ("configs", "key")]
        rows = "\n".join(f"    ({', '.join(_literal(v) for v in k)}{',' if len(k) == 1 else ''}): {_dict_code(c)},"
                         for k, c in table.items())
        autotune = code(call.func)
        if pruned is not None:
            configs_code = "[\n" + "".join(f"        {c},\n" for c in pruned) + "    ]"
        elif start is not None:  # the decorator's own list, whatever it holds, and the starting kernel's
            configs_code = f"[*{code(configs.value)}, {start}]"
        else:
            configs_code = code(configs.value)
        tuner_args = "".join(f"    {a},\n" for a in [f"configs={configs_code}", f"key={code(key.value)}", *rest])
        fallback = ("the configurations that won somewhere" if pruned is not None else "the decorator's configurations")
        fallback += " and the starting kernel's launch" if start is not None else ""
        text = (f"# The configuration the search's autotuner chose for each key it met: the `key` arguments' values,\n"
                f"# then the tensors' dtypes (how Triton's autotuner keys its choices).\n"
                f"{names['table']} = {{\n{rows}\n}}\n\n\n"
                f"# A key the search never met is tuned, among {fallback}.\n"
                f"{names['tuner']} = {autotune}(\n{tuner_args})({kernel.name})\n"
                + "".join(f"\n\n{f}" for f in functions))
        decorators = [d for d in kernel.node.decorators if d is not kernel.autotune]
        plain = kernel.node.with_changes(decorators=decorators)
        if decorators and kernel.node.decorators[0] is kernel.autotune:
            decorators[0] = decorators[0].with_changes(leading_lines=kernel.autotune.leading_lines)
            plain = kernel.node.with_changes(decorators=decorators)
        # parsed after a first statement, so that the comments stay with the statements they precede
        added = list(cst.parse_module("pass\n" + text).body[1:])
        added[0] = added[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(), *added[0].leading_lines])
        self.replace[id(kernel.node)] = [plain, *added]
        if pruned is None:
            self.notes.append(f"{kernel.name}: its configs are not a literal list; the fallback tunes over all")
        self.pinned.append(kernel.name)
        self.keys += len(table)

    def _launch(self, launch: Launch, key_names: list[str], names: dict[str, str], dtypes: set[int],
                chosen: frozenset[str]) -> str:
        """Rewrites the launch to take its configuration (and, where it can, its grid) from a function of its
        key cached per key; that function's code."""
        where = launch.where
        statement = self.ms.parents.get(id(self.ms.parents.get(id(launch.call))))
        expr = self.ms.parents.get(id(launch.call))
        if not (isinstance(expr, cst.Expr) and isinstance(statement, cst.SimpleStatementLine)
                and len(statement.body) == 1):
            raise CannotPin(f"the {where} is not a statement of its own: the lookup cannot go before it")
        if launch.unmapped is not None:
            raise CannotPin(f"{launch.unmapped} (the {where}): the autotune key cannot be read from it")
        if mapping := next((a for a in launch.call.args if a.star == "**"), None):
            raise CannotPin(f"the {where} passes `**{code(mapping.value).strip()}`: its keys would be passed twice "
                            "with the chosen config's")
        passed = {p.name: value for p in launch.kernel.params if (value := launch.value(p.name)) is not None}
        if unread := [n for n in key_names if n in launch.spread and not rereadable(passed[n])]:
            raise CannotPin(f"the {where} passes {', '.join(unread)} inside a starred value that cannot be read "
                            "again before it")
        clash = [a.keyword.value for a in launch.call.args
                 if a.keyword is not None and a.keyword.value in ("num_warps", "num_stages", "num_ctas", "maxnreg")]
        if clash:
            raise CannotPin(f"the {where} sets {', '.join(clash)} itself")
        # a key argument computed at the launch gets a name: the key and the launch read the one value
        named, computed = {}, []
        taken = self._locals(launch)
        for n in key_names:
            if n in passed and not isinstance(passed[n], cst.Name | cst.Integer | cst.Float | cst.SimpleString):
                named[id(passed[n])] = cst.Name(fresh_name(n, taken))
                computed.append(f"{named[id(passed[n])].value} = {code(passed[n])}\n")
        keyed = [(passed[n], named.get(id(passed[n]), passed[n])) for n in key_names if n in passed]
        constexprs = {p.name for p in launch.kernel.params if p.constexpr}
        numbers = _number_params(launch)
        tensors = [v for n, v in passed.items()
                   if n not in key_names and n not in constexprs and not _never_a_tensor(v, numbers, launch.scope)]
        sure = dtypes == {len(tensors)}  # every key held a dtype for each: they are all tensors
        # the cached function's parameters: the key's names (its literals written in), then the dtypes
        inputs = list(dict.fromkeys(v.value for _, v in keyed if isinstance(v, cst.Name)))
        mine = set(inputs)
        of = [fresh_name(f"{t.value}_dtype" if isinstance(t, cst.Name) else "dtype", mine) for t in tensors]
        dtype_args = [f"{code(t)}.dtype" if sure else f'getattr({code(t)}, "dtype", None)' for t in tensors]
        key_code = ", ".join(code(v) for _, v in keyed)
        if sure or not of:
            key_code += "".join(f", str({d})" for d in of)
        else:
            key_code += f", *(str(d) for d in ({', '.join(of)}{',' if len(of) == 1 else ''}) if d is not None)"
        lookup = f"{names['table']}.get(({key_code}{',' if len(keyed) + len(of) == 1 else ''}))"
        inner = fresh_name("config", set(inputs) | set(of) | self.used)
        grid = _KeyGrid(self.ms, launch, {expression_key(a): b.value for a, b in keyed if isinstance(b, cst.Name)},
                        set(inputs), chosen, inner).make()
        function = fresh_name(f"{launch.kernel.name}_launch", self.used)
        self.added.add(function)
        local = fresh_name("config", taken)
        call = launch.call.visit(Replace(named)) if named else launch.call
        subscript = call.func
        if grid is not None:
            if grid.statement is not None:  # the grid's own line, read by this launch alone, goes with it
                self.replace[id(grid.statement)] = []
                grid_name = grid.name
            else:
                grid_name = fresh_name("grid", taken)
            subscript = subscript.with_changes(slice=[cst.SubscriptElement(cst.Index(cst.Name(grid_name)))])
            targets = f"{local}, {grid_name}"
            text = (f"@functools.cache\n"
                    f"def {function}({', '.join(inputs + of)}):\n"
                    + _docstring(f"{launch.kernel.name}'s configuration and grid for a key, worked out once per key: "
                                 f"the configuration the search's autotuner chose and the grid it gives; for a key "
                                 f"the search never met, None and the grid for the fallback tuner's choice.")
                    + f"    {inner} = {lookup}\n"
                    f"    if {inner} is None:  # a key the search never met\n"
                    f"        return None, {grid.tuned}\n"
                    f"    return {inner}, {grid.pinned}\n")
        else:
            targets = local
            text = (f"@functools.cache\n"
                    f"def {function}({', '.join(inputs + of)}):\n"
                    + _docstring(f"The configuration the search's autotuner chose for {launch.kernel.name}'s key, "
                                 f"looked up once per key; None for a key the search never met.")
                    + f"    return {lookup}\n")
        tuned = call.with_changes(func=subscript.with_changes(value=cst.Name(names["tuner"])))
        pinned = call.with_changes(func=subscript,
                                   args=appended(call.args, cst.Arg(cst.Name(local), star="**")))
        text_call = ("".join(computed)
                     + f"{targets} = {function}({', '.join(inputs + dtype_args)})\n"
                     f"if {local} is None:  # a key the search never met\n"
                     f"    {_TUNED}\n"
                     f"else:\n"
                     f"    {_PINNED}\n")
        # the launches go in as nodes, not text: a launch over several lines keeps its lines' indentation
        # relative to the block it now stands in
        body = list(cst.parse_module(text_call).visit(_Put({_TUNED: tuned, _PINNED: pinned})).body)
        body[0] = body[0].with_changes(leading_lines=statement.leading_lines)
        self.replace[id(statement)] = list(body)
        return text

    def _locals(self, launch: Launch) -> set[str]:
        """The names a local of the launching function must not take: its own, those it reads, the module's and
        those this pinning added (shared by the function's launches)."""
        scope = launch.scope
        if id(scope) not in self.taken:
            self.taken[id(scope)] = (set(scope.assigns) | set(scope.params) | {n.value for n in loads(scope.node)}
                                     | set(self.ms.module_scope.assigns) | self.ms.imported | self.added)
        return self.taken[id(scope)]

    @staticmethod
    def _winning_configs(configs: cst.BaseExpression, winners: list[dict], start: str | None) -> list[str] | None:
        """The code of the winners as the decorator writes them, in its order, when its configs are a literal
        list that holds every one of them, and the starting kernel's configuration `start` (code) after them
        where none of them is it; None otherwise (the fallback then keeps the decorator's own list)."""
        if not isinstance(configs, cst.List):
            return None
        listed = []
        for element in configs.elements:
            parsed = _parse_config(element.value)
            if parsed is None:
                return None
            listed.append((parsed, code(element.value)))
        if not all(any(w == parsed for parsed, _ in listed) for w in winners):
            return None
        kept = [text for parsed, text in listed if parsed in winners]
        if start is not None and _parse_config(cst.parse_expression(start)) not in winners:
            kept.append(start)
        return kept

    def _starting_config(self, kernel: Kernel, configs: cst.BaseExpression) -> tuple[str | None, str]:
        """The launch configuration the starting kernel runs this kernel with, as a `triton.Config` (code), over
        the parameters the decorator's configs set; or None and why not (no starting kernel given, no kernel of
        that name launched there, a value it computes at the launch, launches that disagree)."""
        if self.start is None:
            return None, ""
        theirs = self.start.kernels.get(kernel.name)
        launches = self.start.launches_of(theirs) if theirs is not None else []
        if not launches:
            return None, (f"{kernel.name}: the starting kernel does not launch a kernel of that name, so its "
                          f"launch is not among the fallback's configurations")
        elements = configs.elements if isinstance(configs, cst.List) else []
        parsed = [literal_config(e.value) for e in elements]
        if elements and None not in parsed:
            tuned = {k for p in parsed for k in p[0]}
        else:  # configs built by code: the constexprs the launches leave to the autotuner
            passed = {name for launch in self.ms.launches_of(kernel) for name in launch.args}
            tuned = {p.name for p in kernel.params if p.constexpr and p.default is None and p.name not in passed}
        found = set()
        for launch in launches:
            values = {}
            for name in (*sorted(tuned), *_DEFAULTS):
                arg = launch.arg(name)
                param = theirs.param(name)
                node = arg.value if arg is not None else param.default if param is not None else None
                value = int_value(node) if node is not None else _DEFAULTS.get(name)
                if value is None and name in tuned:
                    return None, (f"{kernel.name}: the starting kernel computes {name} at its launch, so its launch "
                                  f"is not among the fallback's configurations")
                values[name] = value
            found.add(json.dumps(values, sort_keys=True))
        if len(found) > 1:
            return None, (f"{kernel.name}: the starting kernel launches it with {len(found)} configurations; none "
                          f"joins the fallback's")
        values = json.loads(found.pop())
        kwargs = {k: values[k] for k in sorted(tuned)}
        prefix = dotted(elements[0].value.func) if elements and isinstance(elements[0].value, cst.Call) else None
        options_code = "".join(f", {k}={values[k]}" for k in _DEFAULTS
                               if values[k] is not None and (k in ("num_warps", "num_stages") or values[k] != 1))
        return f"{prefix or 'triton.Config'}({_dict_code(kwargs)}{options_code})", ""


@dataclass
class _Grid:
    """A launch's `lambda meta: ...` grid as a function of its key: `pinned`, the grid with the chosen
    configuration's values (code reading `config`), `tuned`, the lambda for the fallback tuner."""

    pinned: str
    tuned: str
    statement: cst.SimpleStatementLine | None  # the launching function's `grid = lambda ...`, read by it alone
    name: str = ""  # the name that line binds


class _KeyGrid:
    """Whether a launch's grid depends on the key alone, and how to write it so: a `lambda meta:` reading
    `meta` by constexpr names that every chosen configuration sets, or that the launch passes as a key value or
    a number, and otherwise the key's values (by name, or the expressions the launch passes for them) and
    module-level names."""

    def __init__(self, ms: ModuleSource, launch: Launch, keys: dict[str, str], inputs: set[str],
                 chosen: frozenset[str], config: str):
        self.ms, self.launch, self.keys, self.inputs, self.chosen, self.config = ms, launch, keys, inputs, chosen, config

    def make(self) -> _Grid | None:
        launch = self.launch
        grid = launch.grid
        if len(grid) != 1 or not isinstance(launch.grid_value[0], cst.Lambda) or launch.meta_grid is None:
            return None
        meta, body = launch.meta_grid
        if not launch.meta_use[1]:  # meta read otherwise than by a constexpr's name
            return None
        by_key = body.visit(Named(self.keys))
        local = set(launch.scope.assigns) | set(launch.scope.params)
        module = set(self.ms.module_scope.assigns) | set(self.ms.imported) | set(dir(builtins))
        inner = {n.value for comp in subnodes(by_key, cst.CompFor) for n in subnodes(comp.target, cst.Name)}
        for name in {n.value for n in loads(by_key)} - inner - {meta}:
            if name not in self.inputs and (name in local or name not in module):
                return None  # it reads the launching function's other values
        values: dict[int, cst.BaseExpression] = {}
        for sub in subnodes(by_key, cst.Subscript):
            if dotted(sub.value) != meta:
                continue
            key = sub.slice[0].slice.value.evaluated_value
            arg = launch.arg(key)
            if key in self.chosen:
                values[id(sub)] = cst.parse_expression(f"{self.config}[{json.dumps(key)}]")
            elif arg is not None and (isinstance(arg.value, cst.Integer | cst.Float)
                                      or (isinstance(arg.value, cst.Name) and arg.value.value in self.inputs)):
                values[id(sub)] = arg.value
            else:
                return None
        pinned = by_key.visit(Replace(values))
        tuned = cst.Lambda(params=cst.Parameters([cst.Param(cst.Name(meta))]), body=by_key)
        statement, name = None, ""
        if isinstance(grid[0], cst.Name) and sum(1 for n in loads(launch.scope.node.body) if n.value == grid[0].value) == 1:
            assign = self.ms.parents.get(id(launch.grid_value[0]))
            line = self.ms.parents.get(id(assign))
            if isinstance(assign, cst.Assign) and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                statement, name = line, grid[0].value
        return _Grid(code(pinned), code(tuned), statement, name)


# Tensor methods that give a number: an argument computed by one has no dtype for the key.
_NUMBER_METHODS = ("stride", "numel", "size", "element_size", "dim")


def _number_params(launch: Launch) -> frozenset[str]:
    """The launching function's parameters annotated as numbers (`seed: int`) or defaulting to a number
    (`eps=1e-5`), never assigned in it. A caller may still pass a tensor for one: its key then lacks that
    dtype, and the lookup still picks a config the search measured (which config runs never changes a result)."""
    fn = launch.scope.node
    if not isinstance(fn, cst.FunctionDef):
        return frozenset()
    return frozenset(p.name.value for p in fn.params.params
                     if (p.annotation is not None and dotted(p.annotation.annotation) in ("int", "float", "bool")
                         or isinstance(p.default, cst.Integer | cst.Float))
                     and p.name.value not in launch.scope.assigns)


def _never_a_tensor(node: cst.BaseExpression, numbers: frozenset[str] = frozenset(), scope=None,
                    depth: int = 0) -> bool:
    """A literal, a parameter annotated as a number, a tensor method's number (`x.stride(0)`), arithmetic of
    those (`1.0 / 127`), or a local assigned one of them once (`n = x.numel()`, where `scope` is the launching
    function's): left out of the key's dtypes, which it never adds to (the table's keys then read like the
    launch's tensors only)."""
    if depth > 8:
        return False
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.Imaginary):
        return True
    if isinstance(node, cst.BinaryOperation):
        return all(_never_a_tensor(n, numbers, scope, depth + 1) for n in (node.left, node.right))
    if isinstance(node, cst.UnaryOperation):
        return _never_a_tensor(node.expression, numbers, scope, depth + 1)
    if isinstance(node, cst.Name):
        if node.value in ("None", "True", "False") or node.value in numbers:
            return True
        if scope is None:
            return False
        value = scope.value(node.value)
        if value is not None:
            return _never_a_tensor(value, numbers, scope, depth + 1)
        return _unpacked_from_shape(scope, node.value)
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _NUMBER_METHODS)


def _unpacked_from_shape(scope, name: str) -> bool:
    """`name` is bound once, by unpacking a tensor's shape or strides (`M, N = x.shape`): an integer."""
    fn = scope.node
    if len(scope.assigns.get(name, [])) != 1 or not isinstance(fn, cst.FunctionDef):
        return False
    for statement in fn.body.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and shape_tuple(small.value) \
                    and isinstance(small.targets[0].target, cst.Tuple) \
                    and any(isinstance(e.value, cst.Name) and e.value.value == name
                            for e in small.targets[0].target.elements):
                return True
    return False


def _parse_config(node: cst.BaseExpression) -> dict | None:
    """A literal `triton.Config` as `options` writes one; None otherwise."""
    parsed = literal_config(node)
    if parsed is None or set(parsed[1]) - set(_DEFAULTS):
        return None
    kwargs, given = parsed
    return options(TunedConfig(kwargs=kwargs, num_warps=given.get("num_warps"), num_stages=given.get("num_stages"),
                               num_ctas=given.get("num_ctas"), maxnreg=given.get("maxnreg")))


def _docstring(text: str) -> str:
    """A function's docstring, its lines filled to the module's width."""
    return textwrap.fill(f'"""{text}"""', width=110, initial_indent="    ", subsequent_indent="    ") + "\n"


def _tuple_code(items: list[str]) -> str:
    return f"({', '.join(items)}{',' if len(items) == 1 else ''})"


_TUNED, _PINNED = "__kernelband_tuned_launch__", "__kernelband_pinned_launch__"


class _Put(cst.CSTTransformer):
    """Puts nodes in place of the placeholder names."""

    def __init__(self, nodes: dict[str, cst.BaseExpression]):
        super().__init__()
        self.nodes = nodes

    def leave_Name(self, original_node, updated_node):
        return self.nodes.get(original_node.value, updated_node)
