"""The IR's data structures: SSA values with use lists, operations, blocks and regions.

Operations are generic (a name, operands, results, attributes, regions, a location), as in MLIR.
What an op *means* (its verifier, shape inference, reference semantics, ...) lives in its
``OpDef`` (see ``opdef.py``), looked up by name.  ``builtin.module`` and ``func.func`` get thin
subclasses for convenient access to their structure.
"""
from __future__ import annotations

from typing import Iterator, Sequence

from lezero.ir.attributes import Attribute, StringAttr, TypeAttr
from lezero.ir.location import UNKNOWN, Location
from lezero.ir.types import FunctionType, Type


class Use:
    __slots__ = ("op", "index")

    def __init__(self, op: "Operation", index: int):
        self.op = op
        self.index = index

    def __repr__(self) -> str:
        return f"Use({self.op.name}, {self.index})"


class Value:
    """An SSA value: defined once (op result or block argument), used by any number of ops."""

    __slots__ = ("type", "uses", "name_hint")

    def __init__(self, type_: Type, name_hint: str | None = None):
        self.type = type_
        self.uses: list[Use] = []
        self.name_hint = name_hint

    @property
    def owner(self):
        raise NotImplementedError

    @property
    def has_uses(self) -> bool:
        return bool(self.uses)

    @property
    def users(self) -> list["Operation"]:
        seen, out = set(), []
        for u in self.uses:
            if id(u.op) not in seen:
                seen.add(id(u.op))
                out.append(u.op)
        return out

    def replace_all_uses_with(self, new: "Value") -> None:
        if new is self:
            return
        for use in list(self.uses):
            use.op.set_operand(use.index, new)

    def replace_uses_if(self, new: "Value", predicate) -> None:
        for use in list(self.uses):
            if predicate(use):
                use.op.set_operand(use.index, new)


class OpResult(Value):
    __slots__ = ("op", "index")

    def __init__(self, type_: Type, op: "Operation", index: int):
        super().__init__(type_)
        self.op = op
        self.index = index

    @property
    def owner(self) -> "Operation":
        return self.op

    def __repr__(self) -> str:
        return f"<result {self.index} of {self.op.name}: {self.type}>"


class BlockArgument(Value):
    __slots__ = ("block", "index", "location")

    def __init__(self, type_: Type, block: "Block", index: int, name_hint: str | None = None,
                 location: Location = UNKNOWN):
        super().__init__(type_, name_hint)
        self.block = block
        self.index = index
        self.location = location  # printed as ``%arg0: T loc(...)`` with debuginfo, as MLIR does

    @property
    def owner(self) -> "Block":
        return self.block

    def __repr__(self) -> str:
        return f"<block argument {self.index}: {self.type}>"


class Operation:
    """A generic operation.  Subclasses exist only for structural ops (module, func)."""

    def __init__(self, name: str, operands: Sequence[Value] = (), result_types: Sequence[Type] = (),
                 attributes: dict[str, Attribute] | None = None, regions: Sequence["Region"] = (),
                 location: Location = UNKNOWN):
        self.name = name
        self._operands: list[Value] = []
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.attributes: dict[str, Attribute] = dict(attributes or {})
        self.regions: list[Region] = []
        self.location = location
        self.parent: Block | None = None
        for v in operands:
            self._append_operand(v)
        for r in regions:
            self.add_region(r)

    # --- operands -------------------------------------------------------------------------
    def _append_operand(self, v: Value) -> None:
        if not isinstance(v, Value):
            raise TypeError(f"operand of {self.name} must be a Value, got {type(v).__name__}")
        v.uses.append(Use(self, len(self._operands)))
        self._operands.append(v)

    @property
    def operands(self) -> tuple[Value, ...]:
        return tuple(self._operands)

    def set_operand(self, index: int, new: Value) -> None:
        old = self._operands[index]
        for i, u in enumerate(old.uses):
            if u.op is self and u.index == index:
                del old.uses[i]
                break
        self._operands[index] = new
        new.uses.append(Use(self, index))

    def set_operands(self, values: Sequence[Value]) -> None:
        self.drop_operands()
        for v in values:
            self._append_operand(v)

    def drop_operands(self) -> None:
        for i, v in enumerate(self._operands):
            v.uses = [u for u in v.uses if not (u.op is self and u.index == i)]
        self._operands = []

    # --- results --------------------------------------------------------------------------
    @property
    def result(self) -> OpResult:
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    def add_result(self, type_: Type) -> OpResult:
        """A new last result (an op whose results are variadic growing one: the gradient of
        ``lz.for`` makes the forward loop also stack its carried values)."""
        result = OpResult(type_, self, len(self.results))
        self.results.append(result)
        return result

    @property
    def result_types(self) -> list[Type]:
        return [r.type for r in self.results]

    @property
    def operand_types(self) -> list[Type]:
        return [v.type for v in self._operands]

    # --- structure --------------------------------------------------------------------------
    def add_region(self, region: "Region | None" = None) -> "Region":
        region = region if region is not None else Region()
        region.parent = self
        self.regions.append(region)
        return region

    @property
    def parent_op(self) -> "Operation | None":
        if self.parent is None or self.parent.parent is None:
            return None
        return self.parent.parent.parent

    @property
    def definition(self):
        """This op's ``OpDef``, or None for an op no dialect registers."""
        from lezero.ir.opdef import lookup

        return lookup(self.name)

    def walk(self) -> Iterator["Operation"]:
        """This op and every op nested in it, parents before children."""
        yield self
        for region in self.regions:
            for block in region.blocks:
                for op in list(block.ops):
                    yield from op.walk()

    def is_ancestor_of(self, other: "Operation") -> bool:
        while other is not None:
            if other is self:
                return True
            other = other.parent_op
        return False

    def erase(self) -> None:
        """Remove this op; its results must have no uses left."""
        for r in self.results:
            if r.uses:
                users = ", ".join(sorted({u.op.name for u in r.uses}))
                raise ValueError(f"cannot erase {self.name}: its result is still used by {users}")
        for region in self.regions:
            for block in region.blocks:
                for op in reversed(list(block.ops)):
                    op.drop_all_references()
        self.drop_operands()
        if self.parent is not None:
            self.parent.remove(self)

    def drop_all_references(self) -> None:
        self.drop_operands()
        for region in self.regions:
            for block in region.blocks:
                for op in block.ops:
                    op.drop_all_references()

    def clone(self, value_map: dict | None = None) -> "Operation":
        """A deep copy; operands are looked up in (and results added to) ``value_map``."""
        value_map = {} if value_map is None else value_map
        new = Operation.__new__(type(self))
        Operation.__init__(new, self.name, [value_map.get(v, v) for v in self._operands],
                           self.result_types, self.attributes, (), self.location)
        for old_r, new_r in zip(self.results, new.results):
            value_map[old_r] = new_r
        for region in self.regions:
            new.add_region(region.clone(value_map))
        return new

    def get_attr(self, name: str, default=None):
        return self.attributes.get(name, default)

    def __repr__(self) -> str:
        return f"<op {self.name} at {self.location.describe()}>"

    def __str__(self) -> str:
        from lezero.ir.printer import print_op

        return print_op(self)


class Block:
    def __init__(self, arg_types: Sequence[Type] = ()):
        self.args: list[BlockArgument] = []
        self.ops: list[Operation] = []
        self.parent: Region | None = None
        for t in arg_types:
            self.add_argument(t)

    def add_argument(self, type_: Type, name_hint: str | None = None,
                     location: Location = UNKNOWN) -> BlockArgument:
        arg = BlockArgument(type_, self, len(self.args), name_hint, location)
        self.args.append(arg)
        return arg

    def insert_argument(self, index: int, type_: Type, name_hint: str | None = None) -> BlockArgument:
        """A new argument at ``index`` (the ones after it shift up)."""
        arg = BlockArgument(type_, self, index, name_hint)
        self.args.insert(index, arg)
        for i, a in enumerate(self.args):
            a.index = i
        return arg

    def erase_argument(self, index: int) -> None:
        arg = self.args[index]
        if arg.uses:
            raise ValueError("cannot erase a block argument that is still used")
        del self.args[index]
        for i, a in enumerate(self.args):
            a.index = i

    def append(self, op: Operation) -> Operation:
        return self.insert(len(self.ops), op)

    def insert(self, index: int, op: Operation) -> Operation:
        if op.parent is not None:
            raise ValueError(f"{op.name} is already in a block")
        op.parent = self
        self.ops.insert(index, op)
        return op

    def insert_before(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self.index_of(anchor), op)

    def insert_after(self, anchor: Operation, op: Operation) -> Operation:
        return self.insert(self.index_of(anchor) + 1, op)

    def index_of(self, op: Operation) -> int:
        for i, o in enumerate(self.ops):
            if o is op:
                return i
        raise ValueError(f"{op.name} is not in this block")

    def remove(self, op: Operation) -> None:
        # from the end: what is removed is most often what was just built (an importer's folded op)
        for i in range(len(self.ops) - 1, -1, -1):
            if self.ops[i] is op:
                del self.ops[i]
                op.parent = None
                return
        raise ValueError(f"{op.name} is not in this block")

    @property
    def terminator(self) -> Operation | None:
        return self.ops[-1] if self.ops else None

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent is not None else None

    def clone_into(self, region: "Region", value_map: dict) -> "Block":
        new = Block()
        for a in self.args:
            value_map[a] = new.add_argument(a.type, a.name_hint, a.location)
        region.add_block(new)
        for op in self.ops:
            new.append(op.clone(value_map))
        return new


class Region:
    def __init__(self, blocks: Sequence[Block] = ()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for b in blocks:
            self.add_block(b)

    def add_block(self, block: Block) -> Block:
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def block(self) -> Block:
        """The only block (every region in lezero so far has exactly one)."""
        if len(self.blocks) != 1:
            raise ValueError(f"region has {len(self.blocks)} blocks, not one")
        return self.blocks[0]

    def clone(self, value_map: dict) -> "Region":
        new = Region()
        for b in self.blocks:
            b.clone_into(new, value_map)
        return new


# --- structural ops ------------------------------------------------------------------------------

class ModuleOp(Operation):
    """``builtin.module``: holds functions in one block."""

    def __init__(self, ops: Sequence[Operation] = (), location: Location = UNKNOWN, attributes=None):
        super().__init__("builtin.module", attributes=attributes, regions=[Region([Block()])],
                         location=location)
        for op in ops:
            self.body.append(op)

    @property
    def body(self) -> Block:
        return self.regions[0].block

    @property
    def functions(self) -> list["FuncOp"]:
        return [op for op in self.body.ops if isinstance(op, FuncOp)]

    @property
    def sym_name(self) -> str | None:
        a = self.attributes.get("sym_name")
        return a.value if a is not None else None

    def lookup(self, name: str) -> "FuncOp":
        for f in self.functions:
            if f.sym_name == name:
                return f
        names = ", ".join("@" + f.sym_name for f in self.functions) or "none"
        raise KeyError(f"no function @{name} in the module (functions: {names})")

    def __contains__(self, name: str) -> bool:
        return any(f.sym_name == name for f in self.functions)


# Optional attributes of a func.func naming its arguments and results (arrays of strings): set
# by a frontend (the ONNX importer: the graph's input and output names), read where a user meets
# them (a native executable's --input and .npy files, CompiledModel's feeds).
INPUT_NAMES_ATTR = "lz.input_names"
OUTPUT_NAMES_ATTR = "lz.output_names"


class FuncOp(Operation):
    """``func.func @name(%arg0: T) -> R { ... }``."""

    def __init__(self, name: str, function_type: FunctionType, location: Location = UNKNOWN,
                 attributes=None, body: Region | None = None):
        attrs = {"sym_name": StringAttr(name), "function_type": TypeAttr(function_type)}
        attrs.update(attributes or {})
        if body is None:
            body = Region([Block(function_type.inputs)])
        super().__init__("func.func", attributes=attrs, regions=[body], location=location)

    @property
    def sym_name(self) -> str:
        return self.attributes["sym_name"].value

    @property
    def function_type(self) -> FunctionType:
        return self.attributes["function_type"].type

    @function_type.setter
    def function_type(self, t: FunctionType) -> None:
        self.attributes["function_type"] = TypeAttr(t)

    @property
    def entry_block(self) -> Block:
        return self.regions[0].blocks[0]

    @property
    def arguments(self) -> list[BlockArgument]:
        return self.entry_block.args

    @property
    def return_op(self) -> Operation:
        return self.entry_block.terminator

    def update_function_type(self) -> None:
        """Recompute the signature from the entry block's arguments and return op."""
        ret = self.return_op
        results = ret.operand_types if ret is not None else list(self.function_type.results)
        self.function_type = FunctionType([a.type for a in self.arguments], results)


STRUCTURAL_OPS = {"builtin.module": ModuleOp, "func.func": FuncOp}
