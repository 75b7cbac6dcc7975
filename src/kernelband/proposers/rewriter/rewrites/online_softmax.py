"""online_softmax: the two passes over a row that find its maximum and then the sum of exp(x - max) (softmax,
logsumexp, cross-entropy) as one pass that keeps a running maximum and rescales the sum as it grows, per lane:

    for start in range(0, n, BLOCK):            for start in range(0, n, BLOCK):
        x = LOAD                                    x = LOAD
        acc_max = tl.maximum(acc_max, x)            acc_max_new = tl.maximum(acc_max, x)
    m = tl.max(acc_max, axis=0)          ->         acc_sum = acc_sum * e(acc_max - acc_max_new) + e(x - acc_max_new)
    acc_sum = tl.zeros([BLOCK], ...)                acc_max = acc_max_new
    for start in range(0, n, BLOCK):            m = tl.max(acc_max, axis=0)
        x = LOAD                                acc_sum = acc_sum * e(acc_max - m)
        acc_sum += tl.exp(x - m)

where e(d) is tl.exp(d), or 0 where the running maximum is still -inf (a lane that has seen only masked
elements: exp(-inf - -inf) would be NaN). Lane by lane, acc_max runs through the same values as before, and
the rescaled acc_sum ends as sum_k exp(x_k - m): the sum the second pass made (up to rounding), so all that
follows is unchanged. The row is read once for both instead of twice.

Matched only in that form, as consecutive statements of the kernel's body (the accumulator's initialisation may
sit between the passes or before them): the same loop header and the same load text in both passes, nothing
the load reads assigned in between, the loaded name not read after the passes except by a later loop that
assigns it first.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import assigned, code, fresh_name, int_value, loads
from kernelband.proposers.rewriter.edits import Found, Variant

NEG_INF_GUARD = '{tl}.where({new} == float("-inf"), 0.0, {tl}.exp({d}))'


def _assign(statement: cst.CSTNode) -> tuple[str, cst.BaseExpression] | None:
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        node = statement.body[0]
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            return node.targets[0].target.value, node.value
    return None


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in loads(node)}


def _max_pass(kernel: Kernel, loop: cst.CSTNode) -> tuple[str, str, cst.BaseExpression, cst.Call] | None:
    """(loaded name, max accumulator, load expression, the tl.maximum call) of `for ...: x = LOAD;
    acc = tl.maximum(acc, x)`."""
    if not (isinstance(loop, cst.For) and loop.orelse is None and len(loop.body.body) == 2):
        return None
    first, second = (_assign(s) for s in loop.body.body)
    if first is None or second is None or not kernel.calls("load"):
        return None
    (x, load), (acc, update) = first, second
    if not (isinstance(update, cst.Call) and kernel.is_tl(update.func, "maximum") and len(update.args) == 2
            and all(a.keyword is None for a in update.args)
            and {code(a.value) for a in update.args} == {x, acc} and x != acc):
        return None
    return x, acc, load, update


def _sum_pass(kernel: Kernel, loop: cst.CSTNode, m: str) -> tuple[str, str, cst.BaseExpression] | None:
    """(loaded name, sum accumulator, load expression) of `for ...: y = LOAD; acc += tl.exp(y - m)`."""
    if not (isinstance(loop, cst.For) and loop.orelse is None and len(loop.body.body) == 2):
        return None
    first = _assign(loop.body.body[0])
    second = loop.body.body[1]
    if first is None or not (isinstance(second, cst.SimpleStatementLine) and len(second.body) == 1):
        return None
    y, load = first
    node = second.body[0]
    if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) and isinstance(node.target,
                                                                                                     cst.Name):
        acc, term = node.target.value, node.value
    elif (pair := _assign(second)) is not None and isinstance(pair[1], cst.BinaryOperation) \
            and isinstance(pair[1].operator, cst.Add) and code(pair[1].left) == pair[0]:
        acc, term = pair[0], pair[1].right
    else:
        return None
    if not (isinstance(term, cst.Call) and kernel.is_tl(term.func, "exp") and len(term.args) == 1
            and code(term.args[0].value).replace(" ", "") == f"{y}-{m}"):
        return None
    return y, acc, load


def _max_statement(kernel: Kernel, statement: cst.CSTNode, acc: str) -> str | None:
    """m for `m = tl.max(acc, axis=0)` (or `tl.max(acc, 0)`)."""
    pair = _assign(statement)
    if pair is None or not (isinstance(pair[1], cst.Call) and kernel.is_tl(pair[1].func, "max")):
        return None
    args = pair[1].args
    if len(args) != 2 or code(args[0].value) != acc or int_value(args[1].value) != 0 \
            or (args[1].keyword is not None and args[1].keyword.value != "axis"):
        return None
    return pair[0]


def _zeros(kernel: Kernel, statement: cst.CSTNode, acc: str) -> bool:
    pair = _assign(statement)
    return pair is not None and pair[0] == acc and isinstance(pair[1], cst.Call) \
        and kernel.is_tl(pair[1].func, "zeros")


def _later_reads_ok(rest: list[cst.CSTNode], names: set[str]) -> bool:
    """Whether the statements after the passes read `names` only inside loops that assign them before reading
    them (the merged pass leaves other values in them)."""
    for statement in rest:
        if not (_names(statement) & names):
            continue
        if not isinstance(statement, cst.For) or _names(statement.iter) & names:
            return False
        pending = set(names)
        for inner in statement.body.body:
            pair = _assign(inner)
            if _names(inner) & pending - ({pair[0]} if pair and not _names(pair[1]) & pending else set()):
                return False
            if pair is not None and pair[0] in pending and not _names(pair[1]) & pending:
                pending.discard(pair[0])
    return True


def _match(kernel: Kernel, body: list[cst.CSTNode], i: int) -> dict | None:
    found = _max_pass(kernel, body[i])
    if found is None:
        return None
    x, acc_max, load, update = found
    between, j = [], i + 1
    while j < len(body) and not isinstance(body[j], cst.For) and len(between) < 2:
        between.append(body[j])
        j += 1
    if j >= len(body) or not between:
        return None
    m = _max_statement(kernel, between[0], acc_max)
    if m is None or (len(between) == 2 and _assign(between[1]) is None):
        return None
    second = _sum_pass(kernel, body[j], m)
    if second is None:
        return None
    y, acc_sum, load2 = second
    first_loop, second_loop = body[i], body[j]
    if code(first_loop.iter) != code(second_loop.iter) or code(first_loop.target) != code(second_loop.target) \
            or code(load) != code(load2) or acc_sum in (acc_max, x, m) or acc_max == m:
        return None
    init = [s for s in between[1:] if _zeros(kernel, s, acc_sum)]
    if len(between) == 2 and not init:
        return None
    if not init and not any(_zeros(kernel, s, acc_sum) for s in body[:i]):
        return None
    if sum(acc_sum in assigned(s) for s in body[:j]) != 1 or acc_max in assigned(*between):
        return None  # the sum starts from its zeros, the maximum is not touched between the passes
    # Nothing the load or the loop header reads may change between the passes.
    changed = assigned(*between) | {x, y, acc_max, acc_sum}
    if (_names(load) | _names(first_loop.iter)) & changed or _names(load) & {m}:
        return None
    if not _later_reads_ok(body[j + 1:], {x, y} - {acc_max, acc_sum, m}):
        return None
    return {"first": first_loop, "second": second_loop, "between": between, "m": m, "x": x, "y": y,
            "acc_max": acc_max, "acc_sum": acc_sum, "update": update, "init": init}


def _merged(kernel: Kernel, found: dict) -> tuple[cst.CSTNode, ...]:
    tl = kernel.tl_name
    acc_max, acc_sum, x, m = found["acc_max"], found["acc_sum"], found["x"], found["m"]
    new = fresh_name(f"{acc_max}_new", set(kernel.names))
    update = code(found["update"])
    scale = NEG_INF_GUARD.format(tl=tl, new=new, d=f"{acc_max} - {new}")
    term = NEG_INF_GUARD.format(tl=tl, new=new, d=f"{x} - {new}")
    loop = found["first"]
    body = loop.body.body
    lines = [cst.parse_statement(f"{new} = {update}\n"),
             cst.parse_statement(f"{acc_sum} = {acc_sum} * {scale} + {term}\n"),
             cst.parse_statement(f"{acc_max} = {new}\n")]
    merged = loop.with_changes(body=loop.body.with_changes(body=[body[0], *lines]))
    fix = cst.parse_statement(f"{acc_sum} = {acc_sum} * "
                              f"{NEG_INF_GUARD.format(tl=tl, new=acc_max, d=f'{acc_max} - {m}')}\n")
    return (*found["init"], merged, found["between"][0], fix)


def online_softmax(ms: ModuleSource) -> Found:
    variants, reasons = [], []
    for kernel in ms.kernels.values():
        body = list(kernel.node.body.body)
        for i in range(len(body)):
            found = _match(kernel, body, i)
            if found is None:
                continue
            replaced = _merged(kernel, found)
            j = body.index(found["second"])
            new_body = [*body[:i], *replaced, *body[j + 1:]]
            edit = (kernel.node, lambda node, new_body=new_body: node.with_changes(
                body=node.body.with_changes(body=new_body)))
            variants.append(Variant("online_softmax", f"{kernel.name}'s max pass and exp-sum pass over its row as "
                                    f"one pass with a running max ({found['acc_max']}) and a rescaled sum "
                                    f"({found['acc_sum']})", frozenset({kernel.name}), (edit,)))
            break
        else:
            reasons.append(f"{kernel.name} has no max pass followed by an exp(x - max) sum pass over the same loads")
    return Found(variants, reasons)
