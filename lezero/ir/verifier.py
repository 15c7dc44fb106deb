"""The verifier: is this IR well formed?

Checks definition before use (SSA dominance in single-block regions), that a function's body
agrees with its signature, that ``func.return`` terminates it, and, for every registered op, its
operand count, attributes and result types against the op's own inference (``OpDef``).
Every error carries the offending op's location.
"""
from __future__ import annotations

from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import Diagnostic, VerifyError
from lezero.ir.opdef import TERMINATOR, OpError
from lezero.ir.types import FunctionType, TensorType, format_shape

# Ops the verifier knows structurally (they have no OpDef).
_STRUCTURAL = {"builtin.module", "func.func", "func.return", "func.call"}


def types_compatible(declared, inferred) -> bool:
    """Equal, except that a dynamic dimension on either side matches any size."""
    if isinstance(declared, TensorType) and isinstance(inferred, TensorType):
        return (declared.element_type == inferred.element_type and declared.rank == inferred.rank
                and all(a is None or b is None or a == b for a, b in zip(declared.shape, inferred.shape)))
    return declared == inferred


def verify(op: Operation, allow_unregistered: bool = False) -> None:
    """Raise ``VerifyError`` (with the first problem's location; all of them in ``.diagnostics``)."""
    diagnostics = collect_diagnostics(op, allow_unregistered)
    if diagnostics:
        first = diagnostics[0]
        error = VerifyError(first.message, first.location)
        error.diagnostics = diagnostics
        raise error


def collect_diagnostics(op: Operation, allow_unregistered: bool = False) -> list[Diagnostic]:
    checker = _Verifier(allow_unregistered)
    checker.verify_op(op, visible=set())
    return checker.diagnostics


class _Verifier:
    def __init__(self, allow_unregistered: bool):
        self.allow_unregistered = allow_unregistered
        self.diagnostics: list[Diagnostic] = []

    def error(self, op: Operation, message: str) -> None:
        self.diagnostics.append(Diagnostic("error", f"'{op.name}' op {message}", op.location))

    def verify_op(self, op: Operation, visible: set) -> None:
        for i, v in enumerate(op.operands):
            if id(v) not in visible:
                self.error(op, f"operand #{i} does not dominate this use (it is not defined before it)")
        if isinstance(op, ModuleOp):
            self.verify_module(op)
        elif isinstance(op, FuncOp):
            self.verify_func(op)
            visible = set()  # functions are isolated from above
        elif op.name == "func.return":
            self.verify_return(op)
        elif op.name == "func.call":
            self.verify_call(op)
        else:
            self.verify_registered(op)
        for region in op.regions:
            for block in region.blocks:
                self.verify_block(block, set(visible))

    def verify_block(self, block, visible: set) -> None:
        visible.update(id(a) for a in block.args)
        for index, op in enumerate(block.ops):
            if op.parent is not block:
                self.error(op, "has a wrong parent block")
            definition = op.definition
            is_terminator = op.name == "func.return" or (definition is not None and definition.has_trait(TERMINATOR))
            if is_terminator and index != len(block.ops) - 1:
                self.error(op, "must be the last operation in its block")
            self.verify_op(op, visible)
            visible.update(id(r) for r in op.results)

    # --- structural ops -----------------------------------------------------------------------
    def verify_module(self, module: ModuleOp) -> None:
        seen = {}
        for f in module.functions:
            if f.sym_name in seen:
                self.error(f, f"redefinition of symbol '@{f.sym_name}'")
            seen[f.sym_name] = f

    def verify_func(self, func: FuncOp) -> None:
        ftype = func.attributes.get("function_type")
        if ftype is None or not isinstance(getattr(ftype, "type", None), FunctionType):
            self.error(func, "requires a 'function_type' attribute holding a function type")
            return
        if len(func.regions) != 1 or len(func.regions[0].blocks) != 1:
            self.error(func, "must have a body of exactly one block")
            return
        ft = func.function_type
        args = func.arguments
        if [a.type for a in args] != list(ft.inputs):
            self.error(func, f"entry block arguments ({', '.join(str(a.type) for a in args)}) do not match "
                             f"the signature's inputs ({', '.join(map(str, ft.inputs))})")
        terminator = func.entry_block.terminator
        if terminator is None or terminator.name != "func.return":
            self.error(terminator or func, "function body must end with 'func.return'")

    def verify_return(self, op: Operation) -> None:
        func = op.parent_op
        if not isinstance(func, FuncOp):
            self.error(op, "expects its parent to be a 'func.func'")
            return
        results = list(func.function_type.results)
        if len(op.operands) != len(results):
            self.error(op, f"has {len(op.operands)} operands, but the enclosing function (@{func.sym_name}) "
                           f"returns {len(results)}")
            return
        for i, (v, t) in enumerate(zip(op.operands, results)):
            if v.type != t:
                self.error(op, f"type of return operand {i} ({v.type}) does not match the function's result "
                               f"type ({t}) in @{func.sym_name}")

    def verify_call(self, op: Operation) -> None:
        callee = op.attributes.get("callee")
        module = op
        while module is not None and not isinstance(module, ModuleOp):
            module = module.parent_op
        if callee is None or module is None:
            self.error(op, "requires a 'callee' symbol inside a module")
            return
        if callee.name not in module:
            self.error(op, f"calls '@{callee.name}', which is not defined in the module")
            return
        ft = module.lookup(callee.name).function_type
        if op.operand_types != list(ft.inputs) or op.result_types != list(ft.results):
            self.error(op, f"types do not match the signature of '@{callee.name}' ({ft})")

    # --- registered ops -----------------------------------------------------------------------
    def verify_registered(self, op: Operation) -> None:
        definition = op.definition
        if definition is None:
            if not self.allow_unregistered:
                self.error(op, "is unregistered (no dialect defines it)")
            return
        unknown = [k for k in op.attributes if k not in definition.attributes and "." not in k]
        if unknown:
            valid = ", ".join(definition.attributes) or "none"
            self.error(op, f"has unknown attribute '{unknown[0]}' (valid: {valid})")
            return
        if definition.num_results is not None and len(op.results) != definition.num_results:
            self.error(op, f"expects {definition.num_results} result(s), got {len(op.results)}")
            return
        try:
            attrs = definition.attrs(op)
            inferred = definition.infer_for_op(op)
            definition.verify_extra(op, attrs)
        except OpError as e:
            self.error(op, str(e))
            return
        for i, (declared, want) in enumerate(zip(op.result_types, inferred)):
            if not types_compatible(declared, want):
                what = "result type" if len(op.results) == 1 else f"result #{i} type"
                if isinstance(declared, TensorType) and isinstance(want, TensorType) \
                        and declared.element_type == want.element_type:
                    self.error(op, f"{what} {declared} has shape {format_shape(declared.shape)}, but the operands "
                                   f"give {format_shape(want.shape)}")
                else:
                    self.error(op, f"{what} {declared} does not match the inferred type {want}")
