"""Where a row held in one block takes the chunked twin (online_rows.py): rows whose block is longer than
LONG elements (LONG >= CHUNK, both powers of two, as the block is); shorter rows keep the original kernel.

Where every launch passes the block size, or the source fixes it (`tl.arange(0, 1024)`, a module constant:
analysis/row_extent.py), the launch chooses, on the host:

    if BLOCK_SIZE > (8192 if y.device.type == "cuda" else 32):
        softmax_kernel_online[grid](..., BLOCK_SIZE=BLOCK_SIZE, CHUNK=(4096 if y.device.type == "cuda" else 16))
    else:
        softmax_kernel[grid](..., BLOCK_SIZE=BLOCK_SIZE)

Where the block size is the autotuner's or a heuristic's (not a launch argument), the kernel chooses, at
compile time, between its own body and the twin's (`if BLOCK_N > LONG:`), and each launch passes LONG and
CHUNK. On the CPU (the Triton interpreter) both are small, so that small rows take the twin's path there.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.host_values import plain
from kernelband.proposers.rewriter.analysis.source import Kernel, Launch, ModuleSource, launch_statement
from kernelband.proposers.rewriter.analysis.syntax import code, docstring, dotted, fresh_name, subnodes
from kernelband.proposers.rewriter.edits import set_kwarg
from kernelband.proposers.rewriter.rewrites.coarsen import separator
from kernelband.proposers.rewriter.rewrites.online_rows import Plan, twin_body

LONG, CHUNK = 8192, 4096  # on a GPU: rows of more than LONG elements, walked CHUNK at a time
CPU_LONG, CPU_CHUNK = 32, 16  # in the interpreter


def with_params(node: cst.FunctionDef, tl: str, **defaults: int) -> cst.Parameters:
    """The parameters with `name: tl.constexpr = value` added last (a default, so that they may follow
    parameters that have one), laid out like the ones before them."""
    params = list(node.params.params)
    comma = separator(params)
    added = [cst.Param(cst.Name(name), annotation=cst.Annotation(cst.parse_expression(f"{tl}.constexpr")),
                       default=cst.Integer(str(value)), comma=comma, equal=cst.AssignEqual(
                           whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")))
             for name, value in defaults.items()]
    if params:
        added[-1] = added[-1].with_changes(comma=params[-1].comma)
        params[-1] = params[-1].with_changes(comma=comma)
    else:
        added[-1] = added[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.params.with_changes(params=[*params, *added])


class _Region(cst.CSTTransformer):
    """The kernel with the statements of its row block (its body or a loop's) replaced."""

    def __init__(self, region: cst.IndentedBlock, body) -> None:
        self.region, self.body = region, body

    def leave_IndentedBlock(self, original_node, updated_node):
        return updated_node.with_changes(body=self.body(updated_node)) if original_node is self.region \
            else updated_node


def device_tensor(ms: ModuleSource, launch: Launch) -> str | None:
    """Code of a tensor the launch passes for a pointer parameter, as a name (reading it twice is the same)."""
    kernel = launch.kernel
    for param in kernel.params:
        arg = launch.arg(param.name)
        if param.name in kernel.pointers and arg is not None and not arg.star and plain(arg.value):
            return code(arg.value)
    return None


def device_test(ms: ModuleSource, launch: Launch) -> str | None:
    """Code that says whether the launch runs on a GPU: the device of a tensor it passes, else whether CUDA is
    there."""
    tensor = device_tensor(ms, launch)
    if tensor is not None:
        return f'{tensor}.device.type == "cuda"'
    return "torch.cuda.is_available()" if "torch" in ms.imported else None


def on_host(ms: ModuleSource, plan: Plan, twin: str, chunk: str) -> list | str:
    """The edits of the launches and the twin kernel, where the host knows the block size: every launch passes
    it, or the source fixes it."""
    kernel, block = plan.kernel, plan.block
    edits = []
    for launch in ms.launches_of(kernel):
        line = launch_statement(ms, launch)
        given = launch.arg(block) if plan.extent.param is not None else None
        gpu = device_test(ms, launch)
        if line is None or gpu is None or plan.extent.param is not None and (given is None or given.star):
            return f"the {launch.where} is not a statement of its own passing {block} and a tensor"
        edits.append((line, _branch(ms, launch, plan, twin, chunk, gpu)))
    made = twin_def(plan, twin, chunk)
    edits.append((kernel.node, lambda node: cst.FlattenSentinel([node, made])))
    return edits


def twin_def(plan: Plan, twin: str, chunk: str) -> cst.FunctionDef:
    """The chunked twin: the kernel under another name, its row block walked in chunks of CHUNK."""
    kernel = plan.kernel
    body = twin_body(plan, chunk)
    return kernel.node.visit(_Region(plan.region, lambda _: body)).with_changes(
        name=cst.Name(twin), params=with_params(kernel.node, kernel.tl_name, **{chunk: CHUNK}))


def prepared(ms: ModuleSource, launch: Launch, plan: Plan, call: cst.Call) -> tuple[list, str, cst.Call]:
    """(statements before the launch, code of the block size it passes, the call reading it): a block size
    that is not a name or a number is computed once, before; one the source fixes is that integer (no launch
    passes it)."""
    if plan.extent.fixed is not None:
        return [], plan.size, call
    block = plan.block
    given = launch.arg(block)
    if plain(given.value) or isinstance(given.value, cst.Integer):
        return [], code(given.value), call
    used = {n for s in ms.scopes for n in s.assigns} | set(ms.kernels)
    size = fresh_name("row_block", used)
    args = list(call.args)
    index = launch.args[block]
    args[index] = args[index].with_changes(value=cst.Name(size))
    return [cst.parse_statement(f"{size} = {code(given.value)}\n")], size, call.with_changes(args=args)


def relaunched(call: cst.Call, kernel: str, **kwargs: str) -> cst.Call:
    """The launch of another kernel with the same grid and arguments, and these keywords."""
    call = call.with_changes(func=call.func.with_changes(value=cst.Name(kernel)))
    for name, value in kwargs.items():
        call = set_kwarg(name, value)(call)
    return call


def long_branch(line: cst.SimpleStatementLine, call: cst.Call, size: str, twin: str, chunk: str, gpu: str,
                long: int = LONG) -> cst.If:
    """`if size > long: twin[grid](..., CHUNK=..) else: kernel[grid](...)`."""
    long_call = relaunched(call, twin, **{chunk: f"({CHUNK} if {gpu} else {CPU_CHUNK})"})
    branch = cst.parse_statement(f"if {size} > ({long} if {gpu} else {CPU_LONG}):\n    pass\nelse:\n    pass\n")
    return branch.with_changes(
        body=branch.body.with_changes(body=[line.with_changes(body=[cst.Expr(long_call)], leading_lines=[])]),
        orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(
            body=[line.with_changes(body=[cst.Expr(call)], leading_lines=[])])))


def _branch(ms: ModuleSource, launch: Launch, plan: Plan, twin: str, chunk: str, gpu: str):
    def edit(line: cst.SimpleStatementLine) -> cst.FlattenSentinel:
        before, size, call = prepared(ms, launch, plan, line.body[0].value)
        statements_ = [*before, long_branch(line, call, size, twin, chunk, gpu)]
        statements_[0] = statements_[0].with_changes(leading_lines=line.leading_lines)
        return cst.FlattenSentinel(statements_)
    return edit


def in_kernel(ms: ModuleSource, plan: Plan, long_: str, chunk: str) -> list | str:
    """The edits where the autotuner or a heuristic sets the block size: the kernel branches on it at compile
    time, and each launch passes LONG and CHUNK."""
    kernel, size, tl = plan.kernel, plan.size, plan.kernel.tl_name
    edits = []
    for launch in ms.launches_of(kernel):
        gpu = device_test(ms, launch)
        if gpu is None:
            return f"the {launch.where} passes no tensor that says its device"
        edit = set_kwarg(long_, f"({LONG} if {gpu} else {CPU_LONG})")
        edits.append((launch.call, lambda call, edit=edit, gpu=gpu: set_kwarg(
            chunk, f"({CHUNK} if {gpu} else {CPU_CHUNK})")(edit(call))))
    body = twin_body(plan, chunk)

    def both(block_node: cst.IndentedBlock) -> list:
        original = list(block_node.body)
        while original and isinstance(original[-1], cst.SimpleStatementLine) and all(
                isinstance(s, cst.Return) and s.value is None for s in original[-1].body):
            original.pop()
        doc = original[:1] if original and docstring(original[0]) and region is kernel.node.body else []
        branch = cst.parse_statement(f"if {size} > {long_}:\n    pass\nelse:\n    pass\n")
        twin_part = body[1:] if doc and body and docstring(body[0]) else body
        return [*doc, branch.with_changes(body=branch.body.with_changes(body=twin_part),
                                          orelse=branch.orelse.with_changes(body=branch.orelse.body.with_changes(
                                              body=original[len(doc):] or [cst.SimpleStatementLine([cst.Pass()])])))]

    region = plan.region

    def edit(node: cst.FunctionDef) -> cst.FunctionDef:
        return node.with_changes(params=with_params(node, tl, **{long_: LONG, chunk: CHUNK}))
    edits.append((region, lambda node: node.with_changes(body=both(node))))
    edits.append((kernel.node, edit))
    return edits


def host_knows(ms: ModuleSource, plan: Plan) -> bool:
    """Whether the host knows the row block's size at every launch: the source fixes it, or every launch
    passes it (an expression of constexpr parameters is the kernel's to compute, not the host's)."""
    extent = plan.extent
    return bool(ms.launches_of(plan.kernel)) and (extent.fixed is not None or extent.param is not None
                                                  and passes_block(ms, plan.kernel, extent.param))


def passes_block(ms: ModuleSource, kernel: Kernel, block: str) -> bool:
    """Whether every launch of the kernel passes the block size (else the autotuner or a heuristic sets it)."""
    launches = ms.launches_of(kernel)
    return bool(launches) and all(launch.arg(block) is not None for launch in launches) \
        and not any(block in {n.value for n in subnodes(d, cst.Name)} for d in kernel.node.decorators)


def lifted_guards(ms: ModuleSource, plan: Plan) -> list:
    """The edits that let rows of any length reach the launch's new branches: where a launch of the one-block
    kernel sits alone in an `if` whose test bounds from above the length whose next power of two is the row
    block (single_pass's `if 0 < cols <= 16384:`, a hand-written `if n <= 4096 and ...:`), those bounds go.
    The bound keeps a row the one block cannot hold in registers away from the kernel; after the rewrite
    every row block over LONG takes the chunked twin or the split, so the one block never meets such a row,
    and longer rows read the row twice instead of going to the else branch's kernel. Only where the else
    branch is a launch of a kernel of this module over the same arguments (what single_pass leaves: the
    blocked kernel for longer rows): an else that raises, or computes otherwise, keeps its rows."""
    if plan.extent.param is None:
        return []
    edits = []
    for launch in ms.launches_of(plan.kernel):
        given, line = launch.arg(plan.block), launch_statement(ms, launch)
        block = ms.parents.get(id(line)) if line is not None else None
        guard = ms.parents.get(id(block)) if block is not None else None
        if given is None or given.star or not isinstance(guard, cst.If) or guard.body is not block \
                or len(block.body) != 1:
            continue
        if not _same_launch_else(ms, guard, launch):
            continue
        value = given.value
        if not (isinstance(value, cst.Call) and (dotted(value.func) or "").endswith("next_power_of_2")
                and len(value.args) == 1):
            continue
        test = _unbounded(guard.test, code(value.args[0].value))
        if test is guard.test:
            continue
        if test is None:  # the bound was the whole test: the branch always runs
            edits.append((guard, lambda node: cst.FlattenSentinel(node.body.body)))
        else:
            # the test's trailing comment spoke of the bound that goes
            edits.append((guard, lambda node, test=test: node.with_changes(
                test=test, body=node.body.with_changes(header=cst.TrailingWhitespace()))))
    return edits


def _same_launch_else(ms: ModuleSource, guard: cst.If, launch: Launch) -> bool:
    """Whether the `if`'s else is one launch of a kernel of this module passing the launch's positional
    arguments."""
    other = guard.orelse
    if not isinstance(other, cst.Else) or len(other.body.body) != 1:
        return False
    line = other.body.body[0]
    for kernel in ms.kernels.values():
        for theirs in ms.launches_of(kernel):
            if launch_statement(ms, theirs) is line:
                return _positional(theirs.call) == _positional(launch.call)
    return False


def _positional(call: cst.Call) -> list[str]:
    return [code(a.value).strip() for a in call.args if a.keyword is None]


def _unbounded(test: cst.BaseExpression, length: str) -> cst.BaseExpression | None:
    """`test` without its conjuncts that bound `length` from above (`length <= N`, `length < N`, `N >= length`,
    as a link of a comparison chain at either end, or a side of an `and`): the same node where there is none,
    None where nothing is left."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _unbounded(test.left, length), _unbounded(test.right, length)
        if left is test.left and right is test.right:
            return test
        if left is None or right is None:
            return right if left is None else left
        return test.with_changes(left=left, right=right)
    if not isinstance(test, cst.Comparison):
        return test
    operands = [test.left, *(t.comparator for t in test.comparisons)]
    links = list(test.comparisons)

    def bounds(i: int) -> bool:  # link i compares operands[i] with operands[i + 1]
        op = links[i].operator
        return (code(operands[i]).strip() == length and isinstance(op, cst.LessThan | cst.LessThanEqual)) or (
            code(operands[i + 1]).strip() == length and isinstance(op, cst.GreaterThan | cst.GreaterThanEqual))

    if len(links) == 1:
        return None if bounds(0) else test
    if bounds(len(links) - 1):  # `0 < n <= N`: the last link goes
        return test.with_changes(comparisons=links[:-1])
    if bounds(0):  # `N >= n > 0`: the first link goes
        return test.with_changes(left=links[0].comparator, comparisons=links[1:])
    return test
