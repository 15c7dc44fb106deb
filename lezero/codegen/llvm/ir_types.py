"""The LLVM types the emitters name, defined once (llvmlite types compare by value: these
constants are for brevity, not identity)."""
from __future__ import annotations

import llvmlite.ir as ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
HALF = ir.HalfType()
FLOAT = ir.FloatType()
DOUBLE = ir.DoubleType()
