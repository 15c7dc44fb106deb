"""The C source lezero-compile generates around a compiled model's kernels.

``runtime.c`` (beside this file) is the fixed part: the thread pool, the run loop, the C API
and, for executables, a ``main`` reading and writing ``.npy`` files. It includes two generated
headers, rendered here from a ``NativeProgram`` (``lezero/runtime/native/program.py``):

- ``lz_model_api.h``: the public API, also installed beside a shared library as ``<name>.h``;
  its comment lists the model's inputs and outputs;
- ``lz_model_tables.h``: the schedule as static tables (tensors, the kernels, the loop program
  with its relocations, where each output comes from), which the run loop hands to the walker.
"""
from __future__ import annotations

import pathlib

from lezero.codegen.index_checks import NO_INDEX, SLOTS_PER_CHECK, initial_status
from lezero.ir.dialect.control_flow import exceeded_bound_message

RUNTIME_SOURCE = pathlib.Path(__file__).with_name("runtime.c")

# lz_dtype values; the order matches lz_dtypes[] in runtime.c.
DTYPE_ENUM = {"f32": "LZ_FLOAT32", "f64": "LZ_FLOAT64", "f16": "LZ_FLOAT16", "bf16": "LZ_BFLOAT16",
              "i1": "LZ_BOOL", "i8": "LZ_INT8", "i16": "LZ_INT16", "i32": "LZ_INT32", "i64": "LZ_INT64",
              "ui8": "LZ_UINT8"}
NUMPY_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16 (stored as float32)",
               "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "ui8": "uint8"}

_REF_KIND = {"input": "LZ_FROM_INPUT", "output": "LZ_FROM_OUTPUT", "arena": "LZ_FROM_ARENA",
             "weights": "LZ_FROM_WEIGHTS"}
_RELOCATION = {"kernel": "LZ_RELOCATE_KERNEL", "arena": "LZ_RELOCATE_ARENA", "weights": "LZ_RELOCATE_WEIGHTS",
               "status": "LZ_RELOCATE_STATUS"}


def c_string(text: str) -> str:
    """``text`` as a C string literal (UTF-8, escaped byte by byte)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F and ch != "?":  # '?' could start a trigraph
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _comment_safe(text: str) -> str:
    return text.replace("*/", "* /")


def describe_tensor(name: str, t) -> str:
    shape = "x".join(str(d) for d in t.shape) if t.shape else "() (a scalar)"
    return f"'{name}': {NUMPY_NAMES[t.element_type.name]} {shape}"


def render_api_header(program) -> str:
    inputs = "\n".join(f" *   {i}  {_comment_safe(describe_tensor(x.name, x.type))}"
                       for i, x in enumerate(program.inputs)) or " *   (none)"
    outputs = "\n".join(f" *   {i}  {_comment_safe(describe_tensor(x.name, x.type))}"
                        for i, x in enumerate(program.outputs)) or " *   (none)"
    example_in = _comment_safe(", ".join(c_string(x.name) for x in program.inputs))
    example_out = _comment_safe(", ".join(c_string(x.name) for x in program.outputs))
    return f"""\
/* {_comment_safe(program.name)}.h: the C API of a model compiled by lezero-compile from {_comment_safe(program.source)}.
 *
 * Inputs:
{inputs}
 * Outputs:
{outputs}
 *
 * Buffers are C-contiguous (row-major), aligned to their element size, and hold exactly the
 * listed shape; bfloat16 tensors are stored as float32 holding bfloat16 values. Output buffers
 * must not overlap the inputs.
 *
 *     lz_model *m = lz_model_create(0);            // 0 threads: $LEZERO_NUM_THREADS, else all CPUs
 *     if (!m) fprintf(stderr, "%s\\n", lz_model_last_error(NULL));
 *     const char *in_names[] = {{{example_in}}};  const void *in[] = {{...}};
 *     const char *out_names[] = {{{example_out}}}; void *out[] = {{...}};
 *     if (lz_model_run(m, in_names, in, {len(program.inputs)}, out_names, out, {len(program.outputs)}) != 0)
 *         fprintf(stderr, "%s\\n", lz_model_last_error(m));
 *     lz_model_destroy(m);
 */
#ifndef LZ_MODEL_API_H
#define LZ_MODEL_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

typedef enum {{
    LZ_FLOAT32 = 1, LZ_FLOAT64, LZ_FLOAT16, LZ_BFLOAT16, LZ_BOOL,
    LZ_INT8, LZ_INT16, LZ_INT32, LZ_INT64, LZ_UINT8
}} lz_dtype;

typedef struct {{
    const char *name;
    lz_dtype dtype;
    int rank;
    const int64_t *shape;
    size_t nbytes;
}} lz_tensor_desc;

typedef struct lz_model lz_model;

/* A model instance: owns its arena (the intermediate buffers) and its threads. num_threads <= 0:
 * $LEZERO_NUM_THREADS, else the CPUs this process may run on. NULL on failure (see
 * lz_model_last_error(NULL)). */
lz_model *lz_model_create(int num_threads);
void lz_model_destroy(lz_model *model);

/* Run the model. Inputs are all required, matched by name (input_names NULL: in declaration
 * order). Outputs may be any subset (output_names NULL: the first n_outputs in order); the others
 * are computed into buffers the model owns. Returns 0, or -1 with lz_model_last_error(model) set.
 * Calls on one model are serialized; use one model per thread to run in parallel. */
int lz_model_run(lz_model *model, const char *const *input_names, const void *const *inputs, int n_inputs,
                 const char *const *output_names, void *const *outputs, int n_outputs);

/* Why the last call on `model` failed; with NULL, why this thread's last lz_model_create failed. */
const char *lz_model_last_error(const lz_model *model);

int lz_model_num_inputs(void);
int lz_model_num_outputs(void);
const lz_tensor_desc *lz_model_input(int index);   /* NULL when out of range */
const lz_tensor_desc *lz_model_output(int index);
int lz_model_input_index(const char *name);         /* -1 when there is none */
int lz_model_output_index(const char *name);
int lz_model_num_threads(const lz_model *model);
const char *lz_dtype_name(lz_dtype dtype);
size_t lz_dtype_size(lz_dtype dtype);

#ifdef __cplusplus
}}
#endif

#endif /* LZ_MODEL_API_H */
"""


def _ref(ref) -> str:
    return f"{{{_REF_KIND[ref.kind]}, {ref.where}}}"


def _descs(array: str, tensors) -> list[str]:
    lines = []
    for i, t in enumerate(tensors):
        shape = ", ".join(str(d) for d in t.type.shape) or "0"
        lines.append(f"static const int64_t {array}_shape_{i}[] = {{{shape}}};")
    lines.append(f"static const lz_tensor_desc {array}[] = {{")
    for i, t in enumerate(tensors):
        lines.append(f"    {{{c_string(t.name)}, {DTYPE_ENUM[t.type.element_type.name]}, {t.type.rank}, "
                     f"{array}_shape_{i}, {t.type.nbytes}}},")
    lines += [_SENTINEL, "};"]
    return lines


# Every table ends with a zero entry: C has no empty arrays, and a model may have no kernels.
_SENTINEL = "    {0},"


def _rows(values, per_row: int = 16) -> list[str]:
    return ["    " + ", ".join(values[k:k + per_row]) + "," for k in range(0, len(values), per_row)]


def render_tables(program) -> str:
    """The schedule of ``program`` as C tables (``lz_model_tables.h``): the loop program the
    walker runs (``lezero.runtime.loop_driver``) with its relocations, the kernels by symbol, and
    per kernel entry what the threads, ``--profile`` and the bounds checks need."""
    lines = [f"/* The schedule of {_comment_safe(program.name)}, generated by lezero-compile from "
             f"{_comment_safe(program.source)}. */",
             f"#define LZ_NUM_INPUTS {len(program.inputs)}",
             f"#define LZ_NUM_OUTPUTS {len(program.outputs)}",
             f"#define LZ_NUM_LAUNCHES {len(program.launches)}",
             f"#define LZ_ARENA_SIZE {program.arena_size}",
             f"#define LZ_ANY_PARALLEL {int(any(k.parallel for k in program.launches))}",
             f"#define LZ_STATUS_SIZE {program.status_size}",
             f"#define LZ_FRAME_WORDS {program.frame_words}",
             f"#define LZ_PROGRAM_WORDS {len(program.words)}",
             f"#define LZ_NUM_RELOCATIONS {len(program.relocations)}",
             f"#define LZ_NUM_CHECKS {sum(len(k.checks) for k in program.launches)}",
             ""]
    lines += [f"extern void {symbol}(void **buffers, int64_t begin, int64_t end) "
              "__attribute__((visibility(\"hidden\")));" for symbol in program.kernels]
    lines.append("")
    lines += _descs("lz_inputs", program.inputs)
    lines += _descs("lz_outputs", program.outputs)
    lines.append("static const char *const lz_output_files[] = {")
    lines += [f"    {c_string(t.file_stem)}," for t in program.outputs]
    lines += ["    0,", "};"]

    lines.append("static const lz_kernel_fn lz_kernel_fns[] = {")
    lines += [f"    {symbol}," for symbol in program.symbols]
    lines += ["    0,", "};"]
    lines.append("/* the loop program: frame words (inputs, outputs, then other buffers), then code */")
    lines.append("static const int64_t lz_program_words[] = {")
    lines += _rows([f"{int(w)}LL" if abs(int(w)) > 2**31 else str(int(w)) for w in program.words]) or ["    0,"]
    lines.append("};")
    lines.append("static const lz_relocation lz_relocations[] = {")
    lines += _rows([f"{{{at}, {_RELOCATION[kind]}}}" for at, kind in program.relocations], 8)
    lines += [_SENTINEL, "};"]

    lines.append("static const lz_launch lz_launches[] = {")
    first_check = 0
    for launch in program.launches:
        lines.append(f"    {{{c_string(launch.name)}, {launch.code_at}, {launch.work_items}, {int(launch.parallel)}, "
                     f"{first_check}, {len(launch.checks)}, {launch.flops}, {launch.bytes}}},")
        first_check += len(launch.checks)
    lines += [_SENTINEL, "};"]

    # bounds checks: the slots of each in the status array, and its message around the index
    lines.append("static const lz_index_check lz_index_checks[] = {")
    for launch in program.launches:
        for k, check in enumerate(launch.checks):
            before, after = check.message_parts()
            lines.append(f"    {{{launch.status + SLOTS_PER_CHECK * k}, {c_string(before)}, {c_string(after)}}},")
    lines += [_SENTINEL, "};"]
    initial = ["INT64_MIN" if v == NO_INDEX else str(v) for launch in program.launches if launch.checks
               for v in initial_status(launch.checks)]
    lines.append("static const int64_t lz_status_initial[] = {" + ", ".join(initial + ["0"]) + "};")

    lines.append("/* each lz.while's code position (what the walker returns, less one) and its error */")
    lines.append("static const lz_while_error lz_while_errors[] = {")
    lines += [f"    {{{at}, {c_string(exceeded_bound_message(bound))}}}," for at, bound in program.whiles if bound >= 0]
    lines += [_SENTINEL, "};"]

    lines.append("static const lz_output_source lz_output_sources[] = {")
    lines += [f"    {{{int(s.written_by_kernel)}, {_ref(s.source) if s.source else '{0, 0}'}}},"
              for s in program.output_sources]
    lines += [_SENTINEL, "};"]
    return "\n".join(lines) + "\n"


def render_weights_assembly(blob_name: str, size: int) -> str:
    """An assembly file defining ``lz_weights`` as the bytes of ``blob_name`` in read-only data:
    the assembler copies the file, so 100 MB of weights cost a second, not a compiler's parse."""
    body = f'    .incbin "{blob_name}"\n' if size else "    .zero 64\n"
    return ("    .section .rodata.lz_weights,\"a\",@progbits\n"
            "    .balign 64\n"
            "    .globl lz_weights\n"
            "    .hidden lz_weights\n"
            "    .type lz_weights, @object\n"
            "lz_weights:\n"
            f"{body}"
            "    .size lz_weights, .-lz_weights\n"
            "    .section .note.GNU-stack,\"\",@progbits\n")
