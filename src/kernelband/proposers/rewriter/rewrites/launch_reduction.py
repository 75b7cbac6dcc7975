"""launch_fusion's last-program form: a second kernel that reads what the first one's programs wrote (a
two-stage reduction: partials per program, then a kernel combining them) run by the last program of the first
kernel to finish:

    max_kernel_1[(mid_size, 1, 1)](inp, mid, M, bs)      if 0 < (mid_size) * (1) * (1):
    max_kernel_2[(1, 1, 1)](mid, out, mid_size, bm)          max_kernel_1_max_kernel_2_last[(mid_size, 1, 1)](
                                                             inp=inp, mid=mid, ..., done=_programs_done(mid.device))
                                                         else:
                                                             <the two launches as they were>

    <max_kernel_1's body>
    tl.debug_barrier()                                   every thread of the program has stored its part
    if tl.atomic_add(done, 1, sem="acq_rel") == tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2) - 1:
        tl.atomic_xchg(done, 0)                          ready for the next launch
        <max_kernel_2's body, its program ids 0 and counts 1, its loads of mid volatile>

The counter counts the programs that are done: the one that finds all the others done runs the second kernel,
after every partial is written (the atomic's acquire and release order the stores before it, and its volatile
loads read them past the caches). That is what the second launch did, after the first one's end. A second
launch of several programs (a column sum of per-program partials, say) has them run one after another in a
loop over its grid, each with the program ids and counts it had:

    dx_fused[(M,)](dx, dy, _dw, _db, ...)                if 0 < M and triton.cdiv(N, 128) <= 64:
    dwdb[lambda meta: [triton.cdiv(N, meta["BN"])]](         dx_fused_dwdb_last[(M,)](..., grid_0=triton.cdiv(N, 128))
        _dw, _db, dw, db, M, N, BM=32, BN=128)           else:
                                                             <the two launches as they were>
    ... the last program:
        for pid in range(0, grid_0):
            <dwdb's body, tl.program_id(0) as pid, tl.num_programs(0) as grid_0>

Programs of one launch may run in any order, so running them in turn computes what the launch did, where none
waits on another (the second kernel uses no atomics) and none returns early (a return would end the loop). The
loop is worth it only where the second kernel has few programs: the host runs the fused launch where its grid
has at most FEW_PROGRAMS programs, the two launches as they were otherwise.

In either form the fused launch runs only where the first kernel's grid has a program (`if 0 < (blocks):`): on
an empty one no program would be last, and the second kernel, which the original launched all the same, would
not run.

Since the second kernel runs after every program of the first, it may also write what the first one reads or
writes (a second pass that adds to the first one's outputs). Certain where: the first kernel returns nowhere
early (a program that returns would not count itself); neither kernel is autotuned or has heuristics (an
autotuner's timing runs would count too); the second hands no @triton.jit helper a buffer the first writes (its
loads there could not be made volatile). The counter is one int32 per device, made zero once and set back to
zero by the last program; launches of the function on two streams of one device at once would share it.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.facts import facts_of
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import arg_of, code, dotted, fresh_name, subnodes
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    branch_body,
    flat_ids,
    globals_clash,
    joined_params,
    launch_args,
    one_program,
    options_of,
    program_ids,
    renames_of,
)
from kernelband.proposers.rewriter.rewrites.launch_sites import Moved

COUNTER = '''

def {name}(device):
    """A zeroed int32 on the device that counts the programs of a fused two-stage reduction that are done (the
    last one sets it back to zero)."""
    import torch

    counter = {cache}.get(device)
    if counter is None:
        counter = {cache}[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return counter
'''


FEW_PROGRAMS = 16  # above this, the second kernel's programs in turn on one SM cost more than a launch saves


def reduction(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, used: set[str]) -> Variant:
    k1, k2 = a.kernel, b.kernel
    for kernel in (k1, k2):
        if kernel.autotune is not None or kernel.heuristics:
            raise NotCertain(f"{kernel.name} is autotuned or has heuristics: its timing runs would count as "
                             "programs done")
    if code(k1.jit) != code(k2.jit):
        raise NotCertain(f"{k1.name} and {k2.name} are compiled with different @triton.jit options")
    if subnodes(k1.node.body, cst.Return):
        raise NotCertain(f"{k1.name} returns early: a program that returns would not count itself as done")
    dims_a = [code(d).strip() for d in moved.dims()]  # the first launch's grid is known where it launches
    dims_b = [] if one_program(host, b) else _programs(host, b)
    renames = renames_of(k1, k2, used)
    globals_clash(k1, k2, renames)
    name = fresh_name(f"{k1.name}_{k2.name}_last", used)
    done = fresh_name("done", used)
    counter = fresh_name("_programs_done", used)
    cache = fresh_name("_PROGRAMS_DONE", used)
    volatile = {id(c): {"volatile": "True"} for c in _partial_loads(host, a, b)}
    sizes = [fresh_name(f"grid_{i}", used) for i in range(len(dims_b))]
    pid = fresh_name("pid", used)
    ids = flat_ids(pid, sizes) if sizes else []
    body2 = branch_body(k2, renames, program_ids(k2, ids, sizes), used, volatile)
    if sizes:
        body2 = [cst.For(target=cst.Name(pid), iter=cst.parse_expression(f"range(0, {' * '.join(sizes)})"),
                         body=cst.IndentedBlock(body=body2))]
    tl = k1.tl_name
    count = " * ".join(f"{tl}.num_programs({axis})" for axis in range(3))
    last = cst.If(test=cst.parse_expression(f'{tl}.atomic_add({done}, 1, sem="acq_rel") == {count} - 1'),
                  body=cst.IndentedBlock(body=[cst.parse_statement(f"{tl}.atomic_xchg({done}, 0)\n"), *body2]))
    barrier = cst.parse_statement(f"{tl}.debug_barrier()\n")
    extra = [cst.Param(cst.Name(done)), *(cst.Param(cst.Name(s)) for s in sizes)]
    kernel = k1.node.with_changes(name=cst.Name(name), params=joined_params(k1, k2, renames, extra),
                                  body=k1.node.body.with_changes(body=[*k1.node.body.body, barrier, last]),
                                  leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    read = sorted({w for w in a.writes for r in b.reads if host.may_alias(w, r, (a, b))} - {None})
    device = f"{(read or _written(a))[0]}.device"
    args = launch_args(a, {}, {p.name: moved.arg(p.name) for p in k1.params if moved.arg(p.name) is not None})
    args += launch_args(b, renames)
    args.append(keyword_arg(done, cst.parse_expression(f"{counter}({device})")))
    args += [keyword_arg(s, cst.parse_expression(d)) for s, d in zip(sizes, dims_b)]
    args += [keyword_arg(k, v) for k, v in options_of(a).items()]
    call = a.launch.call.with_changes(func=a.launch.subscript.with_changes(
        value=cst.Name(name), slice=[cst.SubscriptElement(cst.Index(cst.Tuple(
            [cst.Element(d) for d in moved.dims()])))]), args=args)
    guard = f"0 < {_product(dims_a)}"  # with no program of the first kernel, none would run the second
    if sizes:
        guard += f" and {_product(dims_b)} <= {FEW_PROGRAMS}"
    helper = cst.parse_module(f"{cache} = {{}}\n" + COUNTER.format(name=counter, cache=cache)).body
    helper = [helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]), *helper[1:]]
    end = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call, guard),
             (end, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel, *helper])))
    if sizes:
        reading = f" ({k2.name} reads {', '.join(read)})" if read else ""
        how = (f"as one launch of {name}: the last program of {k1.name} to finish runs {k2.name}'s programs in "
               f"turn{reading}, where they are at most {FEW_PROGRAMS}")
    else:
        how = (f"(partials in {', '.join(read)}, combined by one program) as one launch of {name}: the last "
               f"program of {k1.name} to finish combines")
    return Variant("launch_fusion", f"the launches of {k1.name} and {k2.name} in {host.name} {how}",
                   frozenset({k1.name, k2.name, name, a.launch.scope.top}), edits)


def _programs(host: HostFunction, b: Site) -> list[str]:
    """The second launch's grid, where one program may run its programs in turn."""
    k2 = b.kernel
    dims, why = host.grid(b)
    if dims is None:
        raise NotCertain(why)
    if subnodes(k2.node.body, cst.Return):
        raise NotCertain(f"{k2.name} returns early: in one program running its programs in turn, a return "
                         "would end the rest")
    if k2.atomics:
        raise NotCertain(f"{k2.name} uses atomics: its programs may wait on each other, which one program "
                         "running them in turn cannot")
    return dims


def _partial_loads(host: HostFunction, a: Site, b: Site) -> list[cst.Call]:
    """The second kernel's loads of memory the first kernel may write: made volatile. Refuses a helper handed
    such a pointer."""
    k2 = b.kernel
    partial = frozenset(p.param for p in b.passed.values()
                        if p.read and any(host.may_alias(w, p.root, (a, b)) for w in a.writes))
    accesses = facts_of(k2).accesses
    helpers = {n for n in k2.ms.kernels if n != k2.name}
    for call in subnodes(k2.node.body, cst.Call):
        if (dotted(call.func) or "") in helpers and any(
                accesses.bases_of(arg.value) & partial for arg in call.args):
            raise NotCertain(f"{k2.name} hands {dotted(call.func)} a buffer {a.kernel.name} writes: its loads there "
                             "could not be made volatile")
    return [access.call for access in accesses.loads
            if access.bases & partial and arg_of(access.call, 7, "volatile") is None]


def _written(a: Site) -> list[str]:
    """The tensors the first launch writes: the counter lives on their device."""
    roots = sorted(r for r in a.writes if r is not None)
    if not roots:
        raise NotCertain(f"the {a.where} writes no tensor known here: the counter's device is not known")
    return roots


def _product(dims: list[str]) -> str:
    return " * ".join(f"({d})" for d in dims) if len(dims) > 1 else f"({dims[0]})"
