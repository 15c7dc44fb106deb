"""A builder creates ops at an insertion point, inferring result types from each op's definition."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from lezero.ir.attributes import Attribute, DenseElementsAttr
from lezero.ir.core import Block, Operation, Value
from lezero.ir.location import UNKNOWN, Location
from lezero.ir.opdef import OpError, lookup
from lezero.ir.types import TensorType, Type, element_type_of


class Builder:
    def __init__(self, block: Block | None = None, index: int | None = None, location: Location = UNKNOWN):
        self.block = block
        self.index = index  # None: append at the end
        self.location = location

    @classmethod
    def at_end(cls, block: Block, location: Location = UNKNOWN) -> "Builder":
        return cls(block, None, location)

    @classmethod
    def before(cls, op: Operation, location: Location | None = None) -> "Builder":
        return cls(op.parent, op.parent.index_of(op), op.location if location is None else location)

    def insert(self, op: Operation) -> Operation:
        if self.block is None:
            return op
        if self.index is None:
            self.block.append(op)
        else:
            self.block.insert(self.index, op)
            self.index += 1
        return op

    def create(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
               result_types: Sequence[Type] | None = None, location: Location | None = None) -> Operation:
        """Create and insert an op; result types are inferred when not given."""
        definition = lookup(name)
        attributes = dict(attributes or {})
        if definition is not None:
            attributes = definition.make_attributes(attributes)
        elif any(not isinstance(v, Attribute) for v in attributes.values()):
            raise TypeError(f"unregistered op {name} needs Attribute values")
        if result_types is None:
            if definition is None:
                raise ValueError(f"cannot infer the result types of unregistered op {name}")
            try:
                result_types = definition.infer_op([v.type for v in operands], definition.attrs(attributes))
            except OpError as e:
                raise OpError(f"'{name}' op {e}") from None
        op = Operation(name, operands, result_types, attributes, location=location or self.location)
        return self.insert(op)

    def op(self, name: str, *operands: Value, location: Location | None = None, **attributes) -> Value:
        """Create a one-result op and return its result: ``b.op("lz.add", x, y)``."""
        return self.create(name, operands, attributes, location=location).result

    def constant(self, value, type_: TensorType | None = None, location: Location | None = None) -> Value:
        """An ``lz.constant`` holding ``value`` (a numpy array or scalar)."""
        if isinstance(value, DenseElementsAttr):
            attr = value
        else:
            array = np.asarray(value)
            if type_ is None:
                type_ = TensorType(array.shape, element_type_of(array.dtype))
            attr = DenseElementsAttr(type_, array)
        return self.create("lz.constant", (), {"value": attr}, [attr.type], location).result
