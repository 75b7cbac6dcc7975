"""launch_fusion's independent form: two launches of which neither touches what the other writes (no buffer one
writes is read or written by the other, nor may be the same memory as one) as one launch, whose programs run one
kernel's body or the other's by program id. The two grids are flattened one after the other:

    q_kernel[(nq, B)](q, q_int8, ...)        q_kernel_k_kernel_horizontal[(nq * B + nk * B,)](
    k_kernel[(nk, B)](k, k_int8, ...)            X=q, X_int8=q_int8, ..., X_1=k, X_int8_1=k_int8, ...,
                                                 grid_0=nq, grid_1=B, grid_0_1=nk, grid_1_1=B)

    pid = tl.program_id(0)
    if pid < grid_0 * grid_1:
        <q_kernel's body, tl.program_id(0) as pid % grid_0, tl.program_id(1) as pid // grid_0 % grid_1>
    else:
        pid_1 = pid - grid_0 * grid_1
        <k_kernel's body, the same of pid_1>

Every program of the original launches runs once, with the program ids and counts it had. Since neither
kernel reads what the other writes, the order in which they run does not matter. What it saves is a launch,
and a tail of one grid overlaps the other's. Both kernels are plain @triton.jit, or autotuned over the same
launch options only (num_warps, num_stages: no block sizes): then the fused kernel is autotuned over them, on
both kernels' keys. Its tuning runs run both bodies, the untuned kernel's too, so it restores between them every
buffer either kernel reads and writes, adds into atomically, or writes where its launch passes the same memory to
read (`restore_value`): a second run would otherwise start from the first one's output. Names of the second
kernel that the first uses are renamed.
"""

from __future__ import annotations

import libcst as cst

from kernelband.proposers.rewriter.analysis.buffers import HostFunction, Site
from kernelband.proposers.rewriter.analysis.source import Kernel, ModuleSource
from kernelband.proposers.rewriter.analysis.syntax import code, fresh_name, literal_config
from kernelband.proposers.rewriter.edits import Variant, keyword_arg
from kernelband.proposers.rewriter.rewrites.launch_reading import (
    LAUNCH_SPEED,
    NotCertain,
    branch_body,
    flat_ids,
    globals_clash,
    joined_params,
    launch_args,
    options_of,
    program_ids,
    renames_of,
)
from kernelband.proposers.rewriter.rewrites.launch_sites import Moved

AUTOTUNE_ARGS = frozenset({"configs", "key", "warmup", "rep"})  # others (hooks, restore_value) act on buffers


def _options_only(kernel: Kernel) -> tuple[list, list[str]] | None:
    """(each config's launch options, the key) of an autotune over launch options only; None where the kernel is
    not autotuned. Refuses an autotune that tunes anything else."""
    decorator = kernel.autotune
    if decorator is None:
        return None
    call = decorator.decorator
    given = {a.keyword.value: a.value for a in call.args if a.keyword is not None} \
        if isinstance(call, cst.Call) else {}
    configs, key = given.get("configs"), given.get("key")
    if set(given) - AUTOTUNE_ARGS or not isinstance(configs, cst.List) or not isinstance(key, cst.List) \
            or len(call.args) != len(given):
        raise NotCertain(f"{kernel.name} is autotuned with more than configs and a key")
    options = []
    for element in configs.elements:
        parsed = literal_config(element.value)
        if parsed is None or parsed[0]:
            raise NotCertain(f"{kernel.name} is autotuned over block sizes: the fused kernel would have one "
                             "config for both")
        options.append(sorted(parsed[1].items()))
    keys = [e.value.evaluated_value for e in key.elements if isinstance(e.value, cst.SimpleString)]
    if len(keys) != len(key.elements):
        raise NotCertain(f"{kernel.name}'s autotune key is not a list of names")
    return options, keys


def _decorators(a: Kernel, b: Kernel, renames: dict[str, str], restore: list[str]) -> list[cst.Decorator]:
    tuned = [(k, _options_only(k)) for k in (a, b)]
    found = [(k, t) for k, t in tuned if t is not None]
    if len(found) == 2 and sorted(map(str, found[0][1][0])) != sorted(map(str, found[1][1][0])):
        raise NotCertain(f"{a.name} and {b.name} are autotuned over different launch options")
    if not found:
        return [a.jit]
    keys = list(tuned[0][1][1]) if tuned[0][1] else []
    keys += [renames.get(k, k) for k in (tuned[1][1][1] if tuned[1][1] else [])]
    owner, _ = found[0]
    call = owner.autotune.decorator
    args = [arg.with_changes(value=cst.parse_expression(repr(list(dict.fromkeys(keys)))))
            if arg.keyword.value == "key" else arg for arg in call.args]
    if restore:  # each tuning run of the fused kernel runs both bodies: each starts from the same data
        args.append(keyword_arg("restore_value", cst.parse_expression(repr(restore))))
    return [owner.autotune.with_changes(decorator=call.with_changes(args=args)), a.jit]


def horizontal(ms: ModuleSource, host: HostFunction, a: Site, b: Site, moved: Moved, used: set[str]) -> Variant:
    k1, k2 = a.kernel, b.kernel
    for kernel in (k1, k2):
        if kernel.heuristics:
            raise NotCertain(f"{kernel.name} has heuristics: the fused kernel would have one set for both")
    if code(k1.jit) != code(k2.jit):
        raise NotCertain(f"{k1.name} and {k2.name} are compiled with different @triton.jit options")
    dims_b, why = host.grid(b)
    if dims_b is None:
        raise NotCertain(why)
    dims_a = [code(d).strip() for d in moved.dims()]
    renames = renames_of(k1, k2, used)
    globals_clash(k1, k2, renames)
    decorators = _decorators(k1, k2, renames, host.restored(a) + [renames.get(p, p) for p in host.restored(b)])
    name = fresh_name(f"{k1.name}_{k2.name}_horizontal", used)
    pid = fresh_name("pid", used)
    sizes = [[fresh_name(f"grid_{i}", used) for i in range(len(dims))] for dims in (dims_a, dims_b)]
    start = fresh_name("pid", used)
    bodies = []
    for kernel, names, own, index in ((k1, {}, sizes[0], pid), (k2, renames, sizes[1], start)):
        bodies.append(branch_body(kernel, names, program_ids(kernel, flat_ids(index, own), own), used))
    tl = k1.tl_name
    first = " * ".join(sizes[0])
    head = cst.parse_statement(f"{pid} = {tl}.program_id(0)\n")
    rest = cst.parse_statement(f"{start} = {pid} - {first}\n")
    branch = cst.If(test=cst.parse_expression(f"{pid} < {first}"), body=cst.IndentedBlock(body=bodies[0]),
                    orelse=cst.Else(body=cst.IndentedBlock(body=[rest, *bodies[1]])))
    extra = [cst.Param(cst.Name(n)) for n in sizes[0] + sizes[1]]
    kernel = k1.node.with_changes(name=cst.Name(name), decorators=decorators,
                                  params=joined_params(k1, k2, renames, extra),
                                  body=k1.node.body.with_changes(body=[head, branch]),
                                  leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    args = launch_args(a, {}, {p.name: moved.arg(p.name) for p in k1.params if moved.arg(p.name) is not None})
    args += launch_args(b, renames)
    args += [keyword_arg(s, cst.parse_expression(d)) for s, d in zip(sizes[0] + sizes[1], dims_a + dims_b)]
    options = {**options_of(a), **options_of(b)}
    if len(decorators) > 1:  # the autotuner sets them
        options = {k: v for k, v in options.items() if k not in LAUNCH_SPEED}
    args += [keyword_arg(k, v) for k, v in options.items()]
    total = " + ".join(f"({' * '.join(f'({d})' for d in dims)})" for dims in (dims_a, dims_b))
    grid = cst.parse_expression(f"({total},)")
    call = b.launch.call.with_changes(func=b.launch.subscript.with_changes(
        value=cst.Name(name), slice=[cst.SubscriptElement(cst.Index(grid))]), args=args)
    last = max((k1.node, k2.node), key=lambda node: ms.module.body.index(node))
    edits = (*moved.edits(call), (last, lambda node, kernel=kernel: cst.FlattenSentinel([node, kernel])))
    return Variant("launch_fusion", f"the launches of {k1.name} and {k2.name} in {host.name}, which touch none of "
                   f"each other's outputs, as one launch of {name}: its first programs run {k1.name}, the rest "
                   f"{k2.name}", frozenset({k1.name, k2.name, name, a.launch.scope.top}), edits)
