"""divisibility_hints: a kernel whose loads and stores read integer parameters in their offsets or mask bounds
(`analysis.alignment`: strides, sizes) learns, from a constexpr its launches pass, which of them are multiples
of 8:

    _stride_am = a.stride(0)
    ...
    _aligned = sum(1 << i for i, v in enumerate((M, N, K, _stride_am, ...)) if type(v) is int and v % 8 == 0
                   and v % 16)
    matmul_kernel[grid](a, b, c, M, N, K, _stride_am, ..., ALIGNED=_aligned)

    @triton.jit
    def matmul_kernel(a_ptr, ..., ALIGNED: tl.constexpr = 0):
        if ALIGNED & 1:
            M = M // 8 * 8
        ...

Why: Triton specializes an integer argument on its value only where it is a multiple of 16 (or is 1). A row
stride or a size of 1000 or 3000 is a multiple of 8 but not of 16, so the compiler knows nothing of the row
starts' alignment (`offs_m[:, None] * stride_am`) nor of a mask's constancy (`k + offs_k < K`), and every load
and store of fp16 falls to 2-byte accesses, with no 16-byte cp.async. 8 elements are 16 bytes of fp16 or bf16.

`tl.multiple_of(x, 8)` on an argument does nothing (it sets an attribute on the value it is given, and on a
function argument the attribute is dropped), so the twin rebinds the argument instead: `x = x // 8 * 8` is an
identity where x is a multiple of 8, and Triton's axis analysis derives divisibility 8 from the product.

Why a bit per parameter, a constexpr, rather than one test that all are multiples of 8: a stride of 1 (the
contiguous axis) is never one, and the rebinding would make it 0; Triton specializes 1 itself. So each
rebinding sits under `if ALIGNED & bit:`, decided at compile time, and the host sets only the bits of the
values that are multiples of 8 and not of 16 (Triton knows those of 16 itself, and the rebinding would state
less). With no bit set the kernel is the original, compiled as before; it compiles once per combination of
bits, as Triton compiles once per combination of its own specializations. The kernel is changed in place, not
copied into a twin: what a later rewrite does to it (its tiles, its order) then holds on every shape.

Each value the host tests is evaluated once: a launch's argument that is not a name or a number is bound to a
new local just before the launch's line (`k[grid](...)`, `h = k[grid](...)`, `return k[grid](...)`) and passed
to the launch. Parameters that every launch passes as a number
Triton specializes already (1 or a multiple of 16), or as one that is not a multiple of 8, are left out.
Refused: a kernel whose offsets and masks read no integer parameter, a launch that only some runs of its line
make (a branch of an expression, a lambda) or outside a function, one with a starred argument whose extent
is not known (analysis/launch_args.py) or one that binds names as it evaluates them (`:=`), a parameter a
launch neither passes nor has a number as its default, and kernels with `*args` or keyword-only parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.host_values import rereadable
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, launch_value
from kernelband.proposers.rewriter.analysis.syntax import (
    code,
    fresh_name,
    int_value,
    plain_signature,
    restated,
    subnodes,
)
from kernelband.proposers.rewriter.edits import Found, Variant, appended, carried, keyword_arg, statements
from kernelband.proposers.rewriter.rewrites.matmul_launch import branched, host_names

D = 8  # elements: 16 bytes of fp16 or bf16
SPECIALIZED = 16  # Triton's own divisibility specialization of an integer argument
BUILTINS = ("sum", "enumerate", "type", "int")  # what the host's test of the bits calls
EFFECTS = (cst.NamedExpr, cst.Await, cst.Yield)
# expressions that evaluate a part of themselves only on some runs
CONDITIONAL = (cst.IfExp, cst.BooleanOperation, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _useful(value: int | str) -> bool:
    """Whether a launch's value may be a multiple of D that Triton does not specialize (not 1, not of 16)."""
    return not isinstance(value, int) or (value % D == 0 and value % SPECIALIZED != 0)


def _statement(ms: ModuleSource, launch: Launch) -> cst.SimpleStatementLine | None:
    """The line in a function whose every run makes the launch (`k[grid](...)`, `h = k[grid](...)`, `return
    k[grid](...)`): its values can be read once just before it. None where the launch sits in a branch of an
    expression or a lambda, whose values may not be there to read, or at module level."""
    node = ms.parents.get(id(launch.call))
    while node is not None and not isinstance(node, cst.SimpleStatementLine):
        if isinstance(node, (*CONDITIONAL, cst.BaseCompoundStatement)):
            return None
        node = ms.parents.get(id(node))
    if node is None or len(node.body) != 1 or launch.scope.name == "<module>":
        return None
    return node


def _values(ms: ModuleSource, launch: Launch, params: list[str]) -> dict[str, cst.BaseExpression] | str:
    """What the launch passes for each parameter (a number as its default where it passes none); or why the
    host cannot read them once before the launch."""
    kernel = launch.kernel
    if _statement(ms, launch) is None:
        return (f"the {launch.where} runs only on some evaluations of its line (a branch of an expression, a "
                "lambda), or outside a function: its values cannot be read before it")
    if launch.unmapped is not None:
        return f"{launch.unmapped} ({launch.where})"
    if any(subnodes(launch.call, kind) for kind in EFFECTS):
        return f"the {launch.where} binds names as it evaluates its arguments: they cannot be read before it"
    found = {}
    for name in params:
        given = launch.value(name)
        value = given if given is not None else kernel.param(name).default
        if value is None or given is None and int_value(value) is None:
            return f"the {launch.where} does not pass {name}, and its default is not a number"
        if launch.arg(name) is None and given is not None and not rereadable(given):
            return f"the {launch.where} passes {name} in `{code(given).strip()}`, which cannot be read again before it"
        found[name] = value
    return found


def _hinted(kernel: Kernel, params: list[str]) -> tuple[cst.FunctionDef, str]:
    """The kernel with a constexpr bit mask (0 by default: the kernel as it was) that states which parameters
    are multiples of D, and their rebindings at the top of its body."""
    flag = fresh_name("ALIGNED", set(kernel.names))
    bits = cst.Param(cst.Name(flag), annotation=cst.Annotation(cst.parse_expression(f"{kernel.tl_name}.constexpr")),
                     default=cst.Integer("0"), equal=cst.AssignEqual())
    node = kernel.node.with_changes(params=kernel.node.params.with_changes(
        params=appended(kernel.node.params.params, bits)))
    rebinds = statements("".join(f"if {flag} & {1 << i}:\n    {p} = {p} // {D} * {D}\n" for i, p in enumerate(params)))
    why = (f"# The host sets bit i of {flag} only where the i-th of these parameters is a multiple of {D}: each",
           "# rebinding is then an identity, from whose product Triton's axis analysis knows the value is one.")
    rebinds[0] = rebinds[0].with_changes(leading_lines=[cst.EmptyLine(comment=cst.Comment(c)) for c in why])
    body = list(node.body.body)
    doc = 1 if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
        and isinstance(body[0].body[0].value, cst.SimpleString | cst.ConcatenatedString) else 0
    return node.with_changes(body=node.body.with_changes(body=[*body[:doc], *rebinds, *body[doc:]])), flag


def _launch(ms: ModuleSource, launch: Launch, values: dict[str, cst.BaseExpression], flag: str):
    """The launch's edit: its values read once, the bits of those that are multiples of D (and not of 16), then
    the launch with them; None where the launch's numbers are certain to give no bit."""
    if not any(_useful(launch_value(ms, launch, v)) for v in values.values()):
        return None
    call = launch.call
    bound = [p for p, v in values.items() if launch.arg(p) is not None and not isinstance(v, cst.Name | cst.Integer)]
    mask = "aligned" if "aligned" not in bound else "aligned_bits"
    names = host_names(launch, *bound, mask)
    setup = "".join(f"{names[p]} = {code(values[p])}\n" for p in bound)
    tested = [names[p] if p in bound else code(v) for p, v in values.items()]
    setup += (f"{names[mask]} = sum(1 << i for i, v in enumerate(({', '.join(tested)}{',' * (len(tested) == 1)})) "
              f"if type(v) is int and v % {D} == 0 and v % {SPECIALIZED})\n")
    args = list(call.args)
    for p in bound:
        index = launch.args[p]
        args[index] = args[index].with_changes(value=cst.Name(names[p]))
    hinted = call.with_changes(args=appended(args, keyword_arg(flag, cst.Name(names[mask]))))
    line = _statement(ms, launch)
    launched = code(line.with_changes(leading_lines=[]).deep_replace(call, hinted))
    return branched(line, setup, None, [launched.rstrip("\n")])


def divisibility_hints(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        stated = _stated(kernel)
        params = [p for p in facts_of(kernel).alignment.params if p not in stated]
        if stated and not params:
            reasons.append(f"{kernel.name} states the divisibility of {', '.join(sorted(stated))} already")
            continue
        if not params:
            reasons.append(f"{kernel.name}'s loads and stores use no integer parameter in their offsets or masks")
            continue
        launches = ms.launches_of(kernel)
        if not launches:
            reasons.append(f"{kernel.name} is launched nowhere in this module (a helper, run by the kernels that call it)")
            continue
        found = _variant(ms, kernel, params, launches)
        (reasons if isinstance(found, str) else variants).append(found)
    return Found(variants, reasons)


def aligned(rewrite: Callable[[ModuleSource], Found]) -> Callable[[ModuleSource], Found]:
    """`rewrite`, each of its variants carrying these hints wherever they apply to the module it makes (one
    kernel a round, and a rewrite may add a kernel, as split_k's twin).

    Why: a tl.dot kernel's large tiles pay only where their loads are 16-byte vectors (and cp.async), and on
    strides and sizes that are multiples of 8 and not 16 they are not unless the kernel states it. Drawn as a
    separate arm, the hints land on whichever branch the search picks, rarely the one that holds the tile
    configs. With no bit set the kernel compiles as before, so the hints cost the shapes Triton specializes
    itself nothing."""
    return carried(rewrite, divisibility_hints, lambda rationale: rationale.split(" where ")[0],
                   lambda ms: len(ms.kernels) + 2)


def _stated(kernel: Kernel) -> set[str]:
    """The parameters whose divisibility the kernel states already (`syntax.restated`)."""
    constexprs = {p.name for p in kernel.params if p.constexpr}
    return {name for statement in kernel.node.body.body if (name := restated(statement, constexprs))}


def _variant(ms: ModuleSource, kernel: Kernel, params: list[str], launches: list[Launch]) -> Variant | str:
    if not plain_signature(kernel.node.params):
        return f"{kernel.name} has *args, **kwargs or keyword-only parameters"
    given = [_values(ms, launch, params) for launch in launches]
    if why := next((g for g in given if isinstance(g, str)), None):
        return why
    kept = [p for p in params if any(_useful(launch_value(ms, launch, g[p])) for launch, g in zip(launches, given))]
    if not kept:
        return (f"every launch of {kernel.name} passes {', '.join(params)} as numbers that Triton specializes "
                f"already (1 or multiples of 16) or that are not multiples of {D}")
    for launch in launches:
        bound = set(launch.scope.assigns) | set(launch.scope.params) | set(ms.module_scope.assigns)
        if shadowed := [name for name in BUILTINS if name in bound]:
            return (f"the {launch.where} sees {', '.join(shadowed)} bound to its own values: the host's test of the "
                    "bits calls the builtins")
    node, flag = _hinted(kernel, kept)
    edits = [e for launch, g in zip(launches, given) if (e := _launch(ms, launch, {p: g[p] for p in kept}, flag))
             is not None]
    if not edits:
        return f"no launch of {kernel.name} passes a value of {', '.join(kept)} that may be a multiple of {D}"
    touched = frozenset({kernel.name} | {launch.scope.top for launch in launches})
    return Variant("divisibility_hints", f"{kernel.name} states {', '.join(kept)} multiples of {D} where its "
                   f"launch's values are (a bit each of a constexpr {flag}; Triton specializes only multiples of 16)",
                   touched, ((kernel.node, lambda _: node), *edits))
