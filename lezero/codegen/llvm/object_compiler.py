"""LLVM IR text to object code with nothing but llvmlite: what the JIT (``jit.py``) and the kernel
cache's compiler processes share.

This file imports no part of lezero, so that a compiler process runs it as a script
(``python object_compiler.py``) in ~0.1 s of CPU instead of the ~1.3 s that importing lezero
costs.  It needs processes because llvmlite serializes every call into LLVM behind one global
lock: threads cannot compile two kernels at once, processes can.

The protocol of the script (``serve``): stdin holds one JSON line naming the target machine
(``triple``, ``cpu``, ``features``, ``jit``), then jobs, each a frame (8-byte little-endian
length, then the bytes) holding a JSON header line (``{"opt_level": 2}``) and the LLVM IR text;
for each job stdout gets a frame holding the object file, or, when LLVM fails, a frame whose
first byte is NUL followed by the error text.  The process ends at the end of its stdin.
"""
from __future__ import annotations

import json
import struct
import sys

import llvmlite.binding as llvm

# The optimization level kernels are compiled at.  O3 never paid on the models measured (resnet18,
# mobilenet_v2, efficientnet_b0 at batch 1, kernels' CPU time on one thread, O2/O3: 1.00, 0.98,
# 0.94; O1: 1.04, 0.95, 0.93) and costs ~1.5x O2's LLVM time (its extra unrolling of the GEMM's
# already unrolled micro-kernels makes instruction selection slower).
OPT_LEVEL = 2


def codegen_options(triple: str) -> tuple[str, ...]:
    """The LLVM options code for ``triple`` is generated under (``apply_codegen_options``).

    x86: no Loop Strength Reduction.  It was ~22% of LLVM's CPU time on ResNet-50's kernels (the
    largest pass: the GEMM micro-kernels' unrolled k loops hold dozens of addresses off one
    induction variable) and bought nothing measurable there: x86 addressing modes take base +
    index * scale + offset.  Kernels' time, 1 thread, LSR off / on, per-kernel medians (AMD EPYC
    Zen 4, load 6-7): resnet50 0.992, mobilenet_v2 1.003, efficientnet_b0 0.984, BERT 0.988,
    GPT-2 1.002 (an identical rebuild measured 0.98-1.08); outputs bit-identical.  Other
    architectures (AArch64, whose loads have no scaled index + offset form) keep it."""
    return (f"-disable-lsr={'true' if triple.split('-')[0] == 'x86_64' else 'false'}",)


def apply_codegen_options(triple: str) -> None:
    """Set ``codegen_options(triple)``: LLVM's options are process-wide, so every emission of
    machine code (an object, assembly, an MCJIT engine's finalize) sets them first, under the
    compile lock that serializes LLVM in a process."""
    for option in codegen_options(triple):
        llvm.set_option("lezero", option)


_FRAME_LENGTH = struct.Struct("<Q")
ERROR_PREFIX = b"\0"


def create_target_machine(triple: str, cpu: str, features: str, jit: bool) -> llvm.TargetMachine:
    """A fresh LLVM target machine (``jit=False``: position-independent, for object files)."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_asmparser()  # inline assembly in a module is parsed when it is emitted
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="default" if jit else "pic",
        codemodel="jitdefault" if jit else "default", jit=jit)


def parse_module(text, target_machine: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parse and verify LLVM IR ``text`` (or an llvmlite ``ir.Module``: its ``str``), stamped with
    the machine's triple and layout."""
    parsed = llvm.parse_assembly(str(text))
    parsed.triple = target_machine.triple
    parsed.data_layout = str(target_machine.target_data)
    parsed.verify()
    return parsed


def optimize_module(parsed: llvm.ModuleRef, target_machine: llvm.TargetMachine, speed_level: int = OPT_LEVEL) -> None:
    """Run LLVM's default O<speed_level> pipeline (new pass manager) over ``parsed`` in place,
    loops and straight-line code vectorized and loops unrolled at every level."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    pass_builder = llvm.create_pass_builder(target_machine, tuning)
    pass_builder.getModulePassManager().run(parsed, pass_builder)


def compile_object(text: str, target_machine: llvm.TargetMachine, speed_level: int) -> bytes:
    """The object file of LLVM IR ``text`` optimized at O<speed_level>."""
    parsed = parse_module(text, target_machine)
    optimize_module(parsed, target_machine, speed_level)
    apply_codegen_options(target_machine.triple)
    return target_machine.emit_object(parsed)


def write_frame(stream, payload: bytes) -> None:
    stream.write(_FRAME_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def read_frame(stream) -> bytes | None:
    """The next frame's bytes, or None at the end of the stream (a cut frame raises EOFError)."""
    head = stream.read(_FRAME_LENGTH.size)
    if not head:
        return None
    if len(head) < _FRAME_LENGTH.size:
        raise EOFError("a frame's length was cut short")
    (length,) = _FRAME_LENGTH.unpack(head)
    payload = stream.read(length)
    if len(payload) < length:
        raise EOFError(f"a frame of {length} bytes was cut short at {len(payload)}")
    return payload


def serve(stdin, stdout) -> None:
    """Compile the jobs on ``stdin`` (see the module docstring) until it ends."""
    machine = json.loads(stdin.readline())
    target_machine = create_target_machine(machine["triple"], machine["cpu"], machine["features"], machine["jit"])
    while True:
        job = read_frame(stdin)
        if job is None:
            return
        header, text = job.split(b"\n", 1)
        try:
            obj = compile_object(text.decode(), target_machine, json.loads(header)["opt_level"])
        except Exception as e:  # noqa: BLE001 - handed back to the caller, which raises it
            write_frame(stdout, ERROR_PREFIX + f"{type(e).__name__}: {e}".encode())
        else:
            write_frame(stdout, obj)


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
