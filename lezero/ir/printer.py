"""The IR as text, in MLIR's syntax.

``module``, ``func.func`` and ``func.return`` print in their usual custom forms; every other op
prints in MLIR's generic form::

    %0 = "lz.add"(%arg0, %arg1) {alpha = 1 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>

``generic=True`` (``--print-op-generic``) prints the structural ops generically too, their inherent
attributes in MLIR's properties syntax ``<{...}>``.  ``debuginfo=True`` (``--print-debuginfo``)
adds ``loc(...)`` after every op and every block argument.

Choices, all MLIR's own:

- Values are numbered as mlir-opt numbers them: entry-block arguments ``%argN``, op results and
  other block arguments ``%N``, one number per op (``%0:2 = ...``, used as ``%0#1``).  Counters
  run through a region and continue into the regions nested in it, which start from where their
  parent region ended (so sibling regions may reuse numbers).  Blocks are ``^bbN`` by position in
  their region.
- Attribute dictionaries print sorted by name (MLIR keeps them sorted), so output is deterministic
  whatever order attributes were added in; unit attributes print as their bare name.
- Locations print inline (``loc("f.py":3:7)``), never as ``#loc`` aliases.
- The text has no trailing newline.
- An op that the custom form cannot show faithfully (a ``func.func`` whose entry-block argument
  types disagree with its ``function_type``, a ``func.return`` with attributes, or one without
  operands that is not last in its block) prints generically, so the printed text always reads
  back as the IR it came from, valid or not.

Printing any op nested in a function numbers values as printing the whole function would, so
error messages name values consistently.
"""
from __future__ import annotations

from lezero.ir.attributes import (ArrayAttr, DictionaryAttr, StringAttr, SymbolRefAttr, TypeAttr,
                                  escape_string, format_attr_dict)
from lezero.ir.core import Block, BlockArgument, FuncOp, ModuleOp, Operation, OpResult, Region, Value
from lezero.ir.location import UNKNOWN
from lezero.ir.types import FunctionType

# Attributes MLIR stores as properties (inherent attributes) of the structural ops; the generic
# form prints them inside ``<{...}>`` and the rest in the trailing ``{...}``.
_INHERENT = {
    "func.func": frozenset({"sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs",
                            "no_inline"}),
    "builtin.module": frozenset({"sym_name", "sym_visibility"}),
}
_FUNC_SIGNATURE_ATTRS = frozenset({"sym_name", "function_type", "sym_visibility", "arg_attrs", "res_attrs"})
_STRUCTURAL = (ModuleOp, FuncOp)


def print_module(op: Operation, *, generic: bool = False, debuginfo: bool = False) -> str:
    """The text of ``op`` (a ``ModuleOp`` prints as ``module {...}``) and everything nested in it."""
    printer = _Printer(generic, debuginfo)
    printer.names.number_from(_naming_root(op))
    printer.op(op, 0)
    return "".join(printer.out)


print_op = print_module


def _naming_root(op: Operation) -> Operation:
    """The op whose numbering ``op`` shares: itself if structural, else its nearest structural
    ancestor (or its outermost one)."""
    root = op
    while not isinstance(root, _STRUCTURAL):
        parent = root.parent_op
        if parent is None:
            break
        root = parent
    return root


class _Names:
    """SSA value and block names, numbered as mlir-opt numbers them."""

    def __init__(self):
        self.values: dict[Value, str] = {}
        self.blocks: dict[Block, str] = {}

    def number_from(self, root: Operation) -> None:
        next_value = 0
        if root.results:
            self.values[root.results[0]] = "%0"
            next_value = 1
        work = [(region, next_value, 0) for region in root.regions]
        while work:
            region, next_value, next_arg = work.pop()
            for i, block in enumerate(region.blocks):
                self.blocks[block] = f"^bb{i}"
                if i == 0:
                    for arg in block.args:
                        self.values[arg] = f"%arg{next_arg}"
                        next_arg += 1
                else:
                    for arg in block.args:
                        self.values[arg] = f"%{next_value}"
                        next_value += 1
                for op in block.ops:
                    if op.results:
                        self.values[op.results[0]] = f"%{next_value}"
                        next_value += 1
            for block in region.blocks:
                for op in block.ops:
                    for nested in op.regions:
                        work.append((nested, next_value, next_arg))

    def use(self, value: Value) -> str:
        """A value as an operand: ``%3``, ``%arg0``, ``%2#1`` for a result of a multi-result op."""
        if isinstance(value, OpResult) and len(value.op.results) > 1:
            head = self.values.get(value.op.results[0])
            return "<<UNKNOWN SSA VALUE>>" if head is None else f"{head}#{value.index}"
        return self.values.get(value, "<<UNKNOWN SSA VALUE>>")

    def result_list(self, op: Operation) -> str:
        head = self.values.get(op.results[0], "<<UNKNOWN SSA VALUE>>")
        return head if len(op.results) == 1 else f"{head}:{len(op.results)}"


class _Printer:
    def __init__(self, generic: bool, debuginfo: bool):
        self.generic = generic
        self.debuginfo = debuginfo
        self.names = _Names()
        self.out: list[str] = []

    # --- ops ---------------------------------------------------------------------------------
    def op(self, op: Operation, level: int) -> None:
        out = self.out
        if op.results:
            out.append(self.names.result_list(op))
            out.append(" = ")
        if self.generic:
            self.generic_op(op, level)
        elif op.name == "func.return" and self._return_is_custom(op):
            self.return_op(op)
        elif isinstance(op, FuncOp) and self._func_is_custom(op):
            self.func_op(op, level)
        elif isinstance(op, ModuleOp) and self._module_is_custom(op):
            self.module_op(op, level)
        else:
            self.generic_op(op, level)
        if self.debuginfo:
            out.append(" ")
            out.append(str(op.location))

    def generic_op(self, op: Operation, level: int) -> None:
        out = self.out
        use = self.names.use
        out.append('"' + escape_string(op.name) + '"(')
        out.append(", ".join(use(v) for v in op.operands))
        out.append(")")
        inherent = _INHERENT.get(op.name)
        attrs = op.attributes
        if inherent is not None:
            props = [(k, v) for k, v in attrs.items() if k in inherent]
            if props:
                out.append(" <" + format_attr_dict(props) + ">")
            attrs = {k: v for k, v in attrs.items() if k not in inherent}
        if op.regions:
            out.append(" (")
            for i, region in enumerate(op.regions):
                if i:
                    out.append(", ")
                self.region(region, level, print_entry_header=True)
            out.append(")")
        if attrs:
            out.append(" " + format_attr_dict(attrs.items()))
        out.append(" : ")
        out.append(str(FunctionType(op.operand_types, op.result_types)))

    # --- func.return ---------------------------------------------------------------------------
    @staticmethod
    def _return_is_custom(op: Operation) -> bool:
        if op.results or op.regions or op.attributes:
            return False
        # a bare `func.return` followed by another op would read that op's results as operands
        return bool(op.operands) or op.parent is None or op.parent.ops[-1] is op

    def return_op(self, op: Operation) -> None:
        self.out.append("func.return")
        if op.operands:
            use = self.names.use
            self.out.append(" " + ", ".join(use(v) for v in op.operands) + " : "
                            + ", ".join(str(v.type) for v in op.operands))

    # --- func.func ----------------------------------------------------------------------------
    @staticmethod
    def _func_is_custom(op: FuncOp) -> bool:
        a = op.attributes
        if op.operands or op.results or len(op.regions) != 1:
            return False
        if not isinstance(a.get("sym_name"), StringAttr):
            return False
        ft = a.get("function_type")
        if not isinstance(ft, TypeAttr) or not isinstance(ft.type, FunctionType):
            return False
        vis = a.get("sym_visibility")
        if vis is not None and not (isinstance(vis, StringAttr) and vis.value in ("private", "public", "nested")):
            return False
        for key, count in (("arg_attrs", len(ft.type.inputs)), ("res_attrs", len(ft.type.results))):
            dicts = a.get(key)
            if dicts is not None and not (isinstance(dicts, ArrayAttr) and len(dicts.values) == count
                                          and all(isinstance(d, DictionaryAttr) for d in dicts.values)):
                return False
        blocks = op.regions[0].blocks
        return not blocks or [arg.type for arg in blocks[0].args] == list(ft.type.inputs)

    def func_op(self, op: FuncOp, level: int) -> None:
        out = self.out
        a = op.attributes
        ft: FunctionType = a["function_type"].type
        out.append("func.func ")
        vis = a.get("sym_visibility")
        if vis is not None:
            out.append(vis.value + " ")
        out.append(str(SymbolRefAttr(a["sym_name"].value)))
        arg_attrs = a.get("arg_attrs")
        blocks = op.regions[0].blocks
        args = []
        for i, t in enumerate(ft.inputs):
            text = str(t)
            if blocks:
                arg = blocks[0].args[i]
                text = f"{self.names.use(arg)}: {text}"
            if arg_attrs is not None and len(arg_attrs.values[i]):
                text += " " + str(arg_attrs.values[i])
            if blocks and self.debuginfo:
                text += " " + str(getattr(arg, "location", UNKNOWN))
            args.append(text)
        out.append("(" + ", ".join(args) + ")")
        res_attrs = a.get("res_attrs")
        results = []
        for i, t in enumerate(ft.results):
            text = str(t)
            if res_attrs is not None and len(res_attrs.values[i]):
                text += " " + str(res_attrs.values[i])
            results.append(text)
        if len(results) == 1 and not isinstance(ft.results[0], FunctionType) and \
                (res_attrs is None or not len(res_attrs.values[0])):
            out.append(" -> " + results[0])
        elif results:
            out.append(" -> (" + ", ".join(results) + ")")
        extra = [(k, v) for k, v in a.items() if k not in _FUNC_SIGNATURE_ATTRS]
        if extra:
            out.append(" attributes " + format_attr_dict(extra))
        if blocks:
            out.append(" ")
            self.region(op.regions[0], level, print_entry_header=False)

    # --- builtin.module ---------------------------------------------------------------------------
    @staticmethod
    def _module_is_custom(op: ModuleOp) -> bool:
        if op.operands or op.results or len(op.regions) != 1:
            return False
        blocks = op.regions[0].blocks
        name = op.attributes.get("sym_name")
        return (len(blocks) == 1 and not blocks[0].args and (name is None or isinstance(name, StringAttr))
                and "sym_visibility" not in op.attributes)

    def module_op(self, op: ModuleOp, level: int) -> None:
        out = self.out
        out.append("module")
        name = op.attributes.get("sym_name")
        if name is not None:
            out.append(" " + str(SymbolRefAttr(name.value)))
        extra = [(k, v) for k, v in op.attributes.items() if k != "sym_name"]
        if extra:
            out.append(" attributes " + format_attr_dict(extra))
        out.append(" ")
        self.region(op.regions[0], level, print_entry_header=False)

    # --- regions and blocks ------------------------------------------------------------------------
    def region(self, region: Region, level: int, print_entry_header: bool) -> None:
        """``{`` blocks ``}``; block labels at ``level``, ops one level deeper."""
        out = self.out
        out.append("{\n")
        indent = "  " * level
        for i, block in enumerate(region.blocks):
            if i or (print_entry_header and (block.args or not block.ops)):
                out.append(indent)
                self.block_header(block)
                out.append("\n")
            for op in block.ops:
                out.append(indent + "  ")
                self.op(op, level + 1)
                out.append("\n")
        out.append(indent + "}")

    def block_header(self, block: Block) -> None:
        out = self.out
        out.append(self.names.blocks.get(block, "^bb?"))
        if block.args:
            out.append("(" + ", ".join(self.block_arg(a) for a in block.args) + ")")
        out.append(":")

    def block_arg(self, arg: BlockArgument) -> str:
        text = f"{self.names.use(arg)}: {arg.type}"
        if self.debuginfo:
            text += " " + str(getattr(arg, "location", UNKNOWN))
        return text
