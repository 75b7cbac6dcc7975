"""Every name a module defines replaced by an opaque one (`n0`, `n1`, ...): kernels, their parameters and locals,
host functions' parameters and locals, module constants; keywords at call sites follow the parameters they
name, and meta["KEY"] follows a constexpr KEY. The entry function keeps its name (the harness calls it), and
imported modules and attribute names (tl.load, x.shape) keep theirs. A rewrite that fires on a spelling and
not on its renamed copy matches by name."""

from __future__ import annotations

import builtins

import libcst as cst

KEEP = set(dir(builtins)) | {"tl", "triton", "torch", "math", "np", "self", "meta", "META"}


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.defined: list[str] = []
        self.imported: set[str] = set()

    def _add(self, name: str) -> None:
        if name not in self.defined:
            self.defined.append(name)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._add(node.name.value)
        for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params):
            self._add(p.name.value)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        for p in node.params.params:
            self._add(p.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        for name in _target_names(node.target):
            self._add(name)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for name in _target_names(node.target):
            self._add(name)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        for name in _target_names(node.target):
            self._add(name)

    def visit_For(self, node: cst.For) -> None:
        for name in _target_names(node.target):
            self._add(name)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            self.imported.add(alias.asname.name.value if alias.asname else cst.helpers.get_full_name_for_node(
                alias.name).split(".")[0])

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            self.imported.add(alias.asname.name.value if alias.asname else alias.name.value)


def _target_names(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, cst.Tuple | cst.List):
        return [n for e in target.elements for n in _target_names(e.value)]
    return []


class _Rename(cst.CSTTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.mapping.get(updated_node.value, updated_node.value))

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Call(self, original_node, updated_node):
        """Keywords name parameters of the function called: those of tl.load (mask=), torch.empty (dtype=) and
        other imported functions keep their names; those of `dict(BLOCK=...)` are keys, renamed as the string keys
        of a dict literal are."""
        func = original_node.func.value if isinstance(original_node.func, cst.Subscript) else original_node.func
        if isinstance(func, cst.Name) and (func.value in self.mapping or func.value == "dict"):
            return updated_node
        return updated_node.with_changes(args=[
            new.with_changes(keyword=old.keyword) for old, new in zip(original_node.args, updated_node.args)])

    def leave_SimpleString(self, original_node, updated_node):
        text = updated_node.evaluated_value if isinstance(updated_node.evaluated_value, str) else None
        if text in self.mapping:  # meta["BLOCK_M"], triton.Config({"BLOCK_M": ...}), key=["M"]
            return updated_node.with_changes(value=repr(self.mapping[text]))
        return updated_node


def renamed(source: str, entry: str) -> str:
    module = cst.parse_module(source)
    names = _Names()
    module.visit(names)
    keep = KEEP | names.imported | {entry}
    mapping = {name: f"n{i}" for i, name in enumerate(n for n in names.defined if n not in keep)}
    return module.visit(_Rename(mapping)).code
