"""autodiff: reverse-mode differentiation as a graph transform, from each op's gradient rule.

For a function ``@f(args) -> results`` it builds ``@f_grad(args, cotangents) -> (results,
gradients)`` next to it (``@f`` is kept): one cotangent argument per result, and one gradient per
argument listed in ``wrt`` (default: every float argument), the vector-Jacobian product
``sum_i cotangent_i . d result_i / d arg``.  ``@f_grad`` is plain lz IR, so it verifies, prints,
interprets and compiles like any function, and differentiating it again gives second derivatives.

How it is built:

1. ``@f``'s body is copied into ``@f_grad`` and its composite ops are decomposed, in loop and
   branch bodies too (composites have no gradient rule of their own).
2. The *active* values are found, forward: the ``wrt`` arguments and every float result of an op
   with an active operand.  Only they get cotangents (nothing flows through integers, i1, or
   values the ``wrt`` arguments do not reach).
3. ``backpropagate`` (``lezero/ir/gradient.py``) walks the ops in reverse program order (a
   reverse topological order): for each op whose result has a cotangent, its definition's
   ``grad`` rule builds the operand gradients after the forward ops; contributions to one value are summed with
   ``lz.add``.  An op without a rule is a hard error naming it: ``no gradient rule for lz.foo``.
4. ``func.return`` gives the forward results, then the gradients; an argument no result depends on
   gets zeros.  Ops the rules built but nothing uses are erased.

Run ``canonicalize,cse,dce`` after it for the tidy form (tests/filecheck/autodiff shows it).
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.core import Block, FuncOp, ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.gradient import GradBuilder, backpropagate
from lezero.ir.opdef import COMPOSITE, OpError
from lezero.ir.types import FunctionType, TensorType
from lezero.passes.dce import erase_dead_ops
from lezero.passes.decompose import MAX_ROUNDS, decompose_op
from lezero.passes.pass_base import Pass, option

GRAD_SUFFIX = "_grad"


def differentiate(module_or_func: ModuleOp | FuncOp, name: str | None = None, wrt=None) -> FuncOp:
    """Build ``@<name>_grad`` for ``@name`` of a module (inserted right after it), or for a
    ``FuncOp`` (inserted after it when it sits in a module; ``name`` may then be None), and return
    it.  ``wrt``: indices of the arguments to differentiate (default: every float argument)."""
    if isinstance(module_or_func, ModuleOp):
        if name is None:
            raise ValueError("differentiate(module, name, wrt) needs the function's name")
        try:
            func = module_or_func.lookup(name)
        except KeyError as e:
            raise IRError(e.args[0], module_or_func.location) from None
    else:
        func = module_or_func
        if name is not None and name != func.sym_name:
            raise ValueError(f"differentiate was given @{func.sym_name} and the name {name!r}")
    grad_func = build_grad_function(func, default_wrt(func) if wrt is None else list(wrt))
    block = func.parent
    if block is not None:
        module = block.parent_op
        if isinstance(module, ModuleOp) and grad_func.sym_name in module:
            raise IRError(f"cannot differentiate @{func.sym_name}: @{grad_func.sym_name} exists already",
                          func.location)
        block.insert_after(func, grad_func)
    return grad_func


def default_wrt(func: FuncOp) -> list[int]:
    """Every argument with a float element type."""
    return [i for i, a in enumerate(func.arguments)
            if isinstance(a.type, TensorType) and a.type.element_type.is_float]


def build_grad_function(func: FuncOp, wrt: list[int]) -> FuncOp:
    """``@<func>_grad``, not inserted anywhere."""
    args = func.arguments
    for i in wrt:
        if not 0 <= i < len(args):
            raise IRError(f"cannot differentiate @{func.sym_name} with respect to argument #{i}: it has "
                          f"{len(args)} argument{'s' if len(args) != 1 else ''}", func.location)
        t = args[i].type
        if not (isinstance(t, TensorType) and t.element_type.is_float):
            raise IRError(f"cannot differentiate @{func.sym_name} with respect to argument #{i} of type {t}: "
                          "only float arguments have gradients", func.location)
    if len(set(wrt)) != len(wrt):
        raise IRError(f"argument indices {wrt} name an argument twice", func.location)
    result_types = list(func.function_type.results)
    grad_func = FuncOp(func.sym_name + GRAD_SUFFIX,
                       FunctionType(list(func.function_type.inputs) + result_types, []), func.location)
    block = grad_func.entry_block
    primals = block.args[:len(args)]
    cotangents = block.args[len(args):]
    for old, new in zip(args, primals):
        new.name_hint, new.location = old.name_hint, old.location

    # 1. the forward body, composites decomposed; the copied return holds its results meanwhile
    value_map = dict(zip(args, primals))
    for op in func.entry_block.ops:
        block.append(op.clone(value_map))
    forward_return = block.terminator
    _decompose_composites(block)
    results = list(forward_return.operands)
    forward_return.erase()
    forward_ops = list(block.ops)

    # 2. active values, 3. the reverse walk (lezero/ir/gradient.py)
    b = GradBuilder.at_end(block, func.location)
    gradients = backpropagate(b, forward_ops, results, list(cotangents), [primals[i] for i in wrt])

    # 4. results, then gradients (zeros where none flowed)
    outputs = list(results)
    for i in wrt:
        g = gradients.get(primals[i])
        if g is None:
            try:
                g = b.zeros(primals[i].type)
            except OpError as e:
                raise IRError(f"cannot differentiate @{func.sym_name}: {e}", func.location) from None
        outputs.append(g)
    b.create("func.return", outputs, result_types=[])
    grad_func.update_function_type()
    erase_dead_ops(grad_func)
    return grad_func


def _decompose_composites(block: Block) -> None:
    for _ in range(MAX_ROUNDS):
        todo = [op for top in block.ops for op in top.walk()  # loop bodies too: their rules differentiate them
                if op.definition is not None and op.definition.has_trait(COMPOSITE)]
        if not todo:
            return
        for op in todo:
            decompose_op(op)
    raise IRError("autodiff could not decompose the composite ops (they keep producing composites)",
                  todo[0].location)


@dataclass
class Autodiff(Pass):
    name = "autodiff"
    summary = "Add @f_grad(args, cotangents) -> (results, gradients) for each function (reverse mode)"
    wrt: list[int] = option([], "indices of the arguments to differentiate (default: every float argument)")
    func: str = option("", "only this function (default: every function of the module)")

    def run(self, module: ModuleOp) -> None:
        if self.func:
            targets = [self.func]
        else:
            targets = [f.sym_name for f in module.functions]
        for name in targets:
            differentiate(module, name, self.wrt or None)
