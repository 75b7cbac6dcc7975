"""The autotuner's choices, pinned: an autotuned module rewritten to launch, for each key the search met, the
configuration the evaluator's autotuner chose for it.

An autotuner in the user's process times its configurations with Triton's defaults, beside whatever else the
process does; for a kernel of a few µs that choice is a draw, and the speed the search measured is then a
promise the user's program may not keep. The pinned module makes the choice once, the evaluator's, in code a
person would write: the kernel without `@triton.autotune`, a table {key: configuration} beside it, and at each
launch one lookup of the key, computed from the launch's arguments the way Triton computes it (the values of
the `key=[...]` arguments passed at the launch, then the dtypes of the arguments that have one). A key the
search never met goes to an autotuned copy of the kernel, over only the configurations that won somewhere.

`pin` returns the pinned source, or why the module cannot be pinned (the module is then handed back as it
is): a `prune_configs_by`, a config's own `pre_hook`, a launch whose arguments cannot be read (a starred
argument) or that is not a statement of its own, a key with values code cannot say.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field

import libcst as cst

from kernelband.evaluation.records import TunedChoice, TunedConfig
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, literal_config, subnodes
from kernelband.proposers.rewriter.edits import appended

# Arguments of triton.autotune that change which configurations are tried, and so the choice itself.
_UNPINNABLE = ("prune_configs_by",)
# triton.Config's defaults, for a configuration that does not say its options
_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
HELPER = "tensor_dtypes"


@dataclass
class Pinned:
    source: str | None  # the pinned module; None when the module cannot be pinned
    reason: str = ""  # why not, one line
    kernels: list[str] = field(default_factory=list)  # the kernels pinned
    keys: int = 0  # the keys in their tables
    notes: list[str] = field(default_factory=list)  # what was left as it was, and why


class CannotPin(Exception):
    pass


def pin(source: str, choices: list[TunedChoice]) -> Pinned:
    """The module with each autotuned kernel's recorded choices pinned (see the module's docstring)."""
    try:
        return _Pinning(source, choices).run()
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
    def __init__(self, source: str, choices: list[TunedChoice]):
        self.source = source
        self.ms = ModuleSource(source)
        self.choices = choices
        self.used = {n.value for n in subnodes(self.ms.module, cst.Name)}
        self.replace: dict[int, list[cst.BaseStatement]] = {}  # id(original statement) -> its replacement
        self.notes: list[str] = []
        self.pinned: list[str] = []
        self.keys = 0

    def run(self) -> Pinned:
        tuned = [k for k in self.ms.kernels.values() if k.autotune is not None]
        if not tuned:
            raise CannotPin("no @triton.autotune decorator on a @triton.jit kernel that the pinning can read")
        helper = fresh_name(HELPER, self.used)
        for kernel in tuned:
            self._kernel(kernel, helper)
        if not self.pinned:
            raise CannotPin("; ".join(self.notes) or "no autotuner chose anything during the search")
        first = next(k for k in tuned if k.name in self.pinned)
        helper_def = cst.parse_module(
            f"def {helper}(*args):\n"
            f'    """The dtypes of a launch\'s tensor arguments: the part of an autotuner\'s key that Triton adds '
            f'itself."""\n'
            f"    return tuple(str(a.dtype) for a in args if hasattr(a, \"dtype\"))\n").body[0]
        self.replace[id(first.node)] = [helper_def.with_changes(leading_lines=first.node.leading_lines),
                                        *self.replace[id(first.node)]]
        module = self.ms.module.visit(_Replace(self.replace))
        return Pinned(module.code, kernels=self.pinned, keys=self.keys, notes=self.notes)

    def _kernel(self, kernel: Kernel, helper: str) -> None:
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
            key_names = ast.literal_eval(code(key.value))
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
        for launch in launches:
            self._launch(launch, list(key_names), names, helper)
        winners = list({json.dumps(c, sort_keys=True): c for c in table.values()}.values())
        pruned = self._winning_configs(configs.value, winners)
        rest = [f"{a.keyword.value}={code(a.value)}" for a in call.args
                if a.keyword is not None and a.keyword.value not in ("configs", "key")]
        rows = "\n".join(f"    ({', '.join(_literal(v) for v in k)}{',' if len(k) == 1 else ''}): {_dict_code(c)},"
                         for k, c in table.items())
        autotune = code(call.func)
        configs_code = ("[\n" + "".join(f"        {c},\n" for c in pruned) + "    ]" if pruned is not None
                        else code(configs.value))
        tuner_args = "".join(f"    {a},\n" for a in [f"configs={configs_code}", f"key={code(key.value)}", *rest])
        text = (f"# The configuration the search's autotuner chose for each key it met: the `key` arguments' values,\n"
                f"# then the tensors' dtypes (how Triton's autotuner keys its choices).\n"
                f"{names['table']} = {{\n{rows}\n}}\n"
                + ("# A key the search never met is tuned, among the configurations that won somewhere.\n"
                   if pruned is not None else "# A key the search never met is tuned.\n")
                + f"{names['tuner']} = {autotune}(\n{tuner_args})({kernel.name})\n")
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

    def _launch(self, launch: Launch, key_names: list[str], names: dict[str, str], helper: str) -> None:
        where = launch.where
        statement = self.ms.parents.get(id(self.ms.parents.get(id(launch.call))))
        expr = self.ms.parents.get(id(launch.call))
        if not (isinstance(expr, cst.Expr) and isinstance(statement, cst.SimpleStatementLine)
                and len(statement.body) == 1):
            raise CannotPin(f"the {where} is not a statement of its own: the lookup cannot go before it")
        if any(a.star for a in launch.call.args):
            raise CannotPin(f"the {where} passes starred arguments: the autotune key cannot be read from it")
        params = {p.name for p in launch.kernel.params}
        passed = {name: launch.call.args[i].value for name, i in launch.args.items() if name in params}
        clash = [a.keyword.value for a in launch.call.args
                 if a.keyword is not None and a.keyword.value in ("num_warps", "num_stages", "num_ctas", "maxnreg")]
        if clash:
            raise CannotPin(f"the {where} sets {', '.join(clash)} itself")
        key_values = [code(passed[n]) for n in key_names if n in passed]
        constexprs = {p.name for p in launch.kernel.params if p.constexpr}
        tensors = [code(v) for n, v in passed.items()
                   if n not in key_names and n not in constexprs and not _never_a_tensor(v)]
        parts = [*key_values, *([f"*{helper}({', '.join(tensors)})"] if tensors else [])]
        key = f"({', '.join(parts)}{',' if len(parts) == 1 and not tensors else ''})"
        local = fresh_name("config", self.used)
        tuned = launch.call.with_changes(func=launch.subscript.with_changes(value=cst.Name(names["tuner"])))
        pinned = launch.call.with_changes(args=appended(launch.call.args, cst.Arg(cst.Name(local), star="**")))
        text = (f"{local} = {names['table']}.get({key})\n"
                f"if {local} is None:  # a key the search never met\n"
                f"    {_TUNED}\n"
                f"else:\n"
                f"    {_PINNED}\n")
        # the launches go in as nodes, not text: a launch over several lines keeps its lines' indentation
        # relative to the block it now stands in
        body = list(cst.parse_module(text).visit(_Put({_TUNED: tuned, _PINNED: pinned})).body)
        body[0] = body[0].with_changes(leading_lines=statement.leading_lines)
        self.replace[id(statement)] = list(body)

    @staticmethod
    def _winning_configs(configs: cst.BaseExpression, winners: list[dict]) -> list[str] | None:
        """The code of the winners as the decorator writes them, in its order, when its configs are a literal
        list that holds every one of them; None otherwise (the fallback then keeps the decorator's own list)."""
        if not isinstance(configs, cst.List):
            return None
        listed = []
        for element in configs.elements:
            parsed = _parse_config(element.value)
            if parsed is None:
                return None
            listed.append((parsed, code(element.value)))
        kept = [text for parsed, text in listed if parsed in winners]
        return kept if all(any(w == parsed for parsed, _ in listed) for w in winners) else None


# Tensor methods that give a number: an argument computed by one has no dtype for the key.
_NUMBER_METHODS = ("stride", "numel", "size", "element_size", "dim")


def _never_a_tensor(node: cst.BaseExpression) -> bool:
    """A literal, or a tensor method's number (`x.stride(0)`): left out of the key's dtypes, which it never
    adds to (the table's keys then read like the launch's tensors only)."""
    if isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.Imaginary):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("None", "True", "False")
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _NUMBER_METHODS)


def _parse_config(node: cst.BaseExpression) -> dict | None:
    """A literal `triton.Config` as `options` writes one; None otherwise."""
    parsed = literal_config(node)
    if parsed is None or set(parsed[1]) - set(_DEFAULTS):
        return None
    kwargs, given = parsed
    return options(TunedConfig(kwargs=kwargs, num_warps=given.get("num_warps"), num_stages=given.get("num_stages"),
                               num_ctas=given.get("num_ctas"), maxnreg=given.get("maxnreg")))


_TUNED, _PINNED = "__kernelband_tuned_launch__", "__kernelband_pinned_launch__"


class _Put(cst.CSTTransformer):
    """Puts nodes in place of the placeholder names."""

    def __init__(self, nodes: dict[str, cst.BaseExpression]):
        super().__init__()
        self.nodes = nodes

    def leave_Name(self, original_node, updated_node):
        return self.nodes.get(original_node.value, updated_node)


class _Replace(cst.CSTTransformer):
    def __init__(self, replace: dict[int, list[cst.BaseStatement]]):
        super().__init__()
        self.replace = replace

    def on_leave(self, original_node, updated_node):
        new = self.replace.get(id(original_node))
        if new is None:
            return updated_node
        return cst.FlattenSentinel(new)
