"""lezero's typed SSA IR: types, attributes, ops, the text format, the verifier and the interpreter."""
from lezero.ir.attributes import *  # noqa: F401,F403
from lezero.ir.builder import Builder
from lezero.ir.core import Block, BlockArgument, FuncOp, ModuleOp, Operation, OpResult, Region, Use, Value
from lezero.ir.diagnostics import (Diagnostic, InputError, InterpretError, IRError, ParseError, SourceManager,
                                   VerifyError)
from lezero.ir.location import UNKNOWN, FileLineColLoc, FusedLoc, Location, NameLoc, UnknownLoc
from lezero.ir.opdef import AttrSpec, OpDef, OpError, lookup, register, registered_ops
from lezero.ir.types import (BF16, ELEMENT_TYPES, F16, F32, F64, I1, I8, I16, I32, I64, UI8, UI16, UI32, UI64,
                             ElementType, FunctionType, TensorType, Type, element_type_of, tensor, tensor_type_of)
import lezero.ir.dialect  # noqa: E402,F401  (registers every lz op)
from lezero.ir.interpreter import interpret  # noqa: E402
from lezero.ir.parser import parse_module, split_input_file  # noqa: E402
from lezero.ir.printer import print_module, print_op  # noqa: E402
from lezero.ir.verifier import collect_diagnostics, verify  # noqa: E402
