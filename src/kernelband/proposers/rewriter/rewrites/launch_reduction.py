"""launch_fusion's two-stage form: a kernel whose programs each write a partial result, then a kernel of one
program that combines them (a two-stage reduction), as one launch in which the last program to finish combines:

    max_kernel_1[(mid_size, 1, 1)](inp, mid, M, bs)      max_kernel_1_max_kernel_2_last[(mid_size, 1, 1)](
    max_kernel_2[(1, 1, 1)](mid, out, mid_size, bm)           inp=inp, mid=mid, ..., done=_programs_done(mid.device))

    <max_kernel_1's body>
    tl.debug_barrier()                                   every thread of the program has stored its part
    if tl.atomic_add(done, 1, sem="acq_rel") == tl.num_programs(0) * tl.num_programs(1) * tl.num_programs(2) - 1:
        tl.atomic_xchg(done, 0)                          ready for the next launch
        <max_kernel_2's body, its program ids 0 and counts 1, its loads of mid volatile>

The counter counts the programs that are done: the one that finds all the others done runs the second kernel's
only program, after every partial is written (the atomic's acquire and release order the stores before it,
and its volatile loads read them past the caches). That is what the second launch did, after the first one's
end. Certain where: the second launch is one program (its grid all 1s); it writes nothing the first kernel
reads or writes; the first kernel returns nowhere early (a program that returns would not count itself); neither
kernel is autotuned or has heuristics (an autotuner's timing runs would count too). The counter is one int32 per
device, made zero once and set back to zero by the last program; launches of the function on two streams of one
device at once would share it.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.source import ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, subnodes
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    NotCertain,
    branch_body,
    globals_clash,
    joined_params,
    launch_args,
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


def reduction(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, used: set[str],
              shared: list[str]) -> Variant:
    k1, k2 = a.kernel, b.kernel
    for kernel in (k1, k2):
        if kernel.autotune is not None or kernel.heuristics:
            raise NotCertain(f"{kernel.name} is autotuned or has heuristics: its timing runs would count as "
                             "programs done")
    if code(k1.jit) != code(k2.jit):
        raise NotCertain(f"{k1.name} and {k2.name} are compiled with different @triton.jit options")
    if subnodes(k1.node.body, cst.Return):
        raise NotCertain(f"{k1.name} returns early: a program that returns would not count itself as done")
    moved.dims()  # the first launch's grid is known where it launches
    renames = renames_of(k1, k2, used)
    globals_clash(k1, k2, renames)
    name = fresh_name(f"{k1.name}_{k2.name}_last", used)
    done = fresh_name("done", used)
    counter = fresh_name("_programs_done", used)
    cache = fresh_name("_PROGRAMS_DONE", used)
    partial = {p for buffer in shared for p in b.params_of(buffer)}
    volatile = {id(c): {"volatile": "True"} for c in k2.loads if k2.bases(k2.address(c)) & partial}
    body2 = branch_body(k2, renames, program_ids(k2, [], []), used, volatile)
    tl = k1.tl_name
    count = " * ".join(f"{tl}.num_programs({axis})" for axis in range(3))
    last = cst.If(test=cst.parse_expression(f'{tl}.atomic_add({done}, 1, sem="acq_rel") == {count} - 1'),
                  body=cst.IndentedBlock(body=[cst.parse_statement(f"{tl}.atomic_xchg({done}, 0)\n"), *body2]))
    barrier = cst.parse_statement(f"{tl}.debug_barrier()\n")
    kernel = k1.node.with_changes(name=cst.Name(name), params=joined_params(k1, k2, renames, [cst.Param(
        cst.Name(done))]), body=k1.node.body.with_changes(body=[*k1.node.body.body, barrier, last]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    device = f"{shared[0]}.device"
    args = launch_args(a, {}, {p.name: moved.arg(p.name) for p in k1.params if moved.arg(p.name) is not None})
    args += launch_args(b, renames)
    args.append(keyword_arg(done, cst.parse_expression(f"{counter}({device})")))
    args += [keyword_arg(k, v) for k, v in options_of(a).items()]
    call = a.launch.call.with_changes(func=a.launch.subscript.with_changes(
        value=cst.Name(name), slice=[cst.SubscriptElement(cst.Index(cst.Tuple(
            [cst.Element(d) for d in moved.dims()])))]), args=args)
    helper = cst.parse_module(f"{cache} = {{}}\n" + COUNTER.format(name=counter, cache=cache)).body
    helper = [helper[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]), *helper[1:]]
    end = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call), (end, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel, *helper])))
    return Variant("launch_fusion", f"the launches of {k1.name} and {k2.name} in {host.name} (partials in "
                   f"{', '.join(shared)}, combined by one program) as one launch of {name}: the last program of "
                   f"{k1.name} to finish combines", frozenset({k1.name, k2.name, name, a.launch.scope.top}), edits)
