"""One compiled model for every (batch, sequence): a transformer block made here with dynamic batch
and sequence (an embedding lookup, layer norms, projections, attention over two heads, a GELU MLP,
residuals) runs 20 shapes, each against ONNX Runtime to 1e-5.  Its kernels are row-generic
(``lezero/codegen/row_generic.py``), the embedding's bounds-checked gather too, probed at the first
shape (the model is imported per shape, so it serves many): after it no shape lowers or compiles
a kernel, a new sequence length included (the attention kernel's code takes the length at run
time: ``row_generic.sequence_form``).  A new size of one dim is served by substitution into a
schedule it ran (``lezero/runtime/shape_substitution.py``): the substituted schedule prints
exactly as the full path's, for sizes equal to a static dim of the model by chance too."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lezero.onnx
from lezero.ir.printer import print_module
from lezero.runtime import kernel_cache
from lezero.runtime.kernel_cache import KernelCache
from lezero.runtime.plan import build_plan, specialize
from lezero.runtime.shape_substitution import SizeFit

WIDTH, HEADS, HIDDEN, VOCAB = 32, 2, 64, 50
# (batch, sequence): new batches at a known length, new lengths, both, and back again
SHAPES = [(2, 8), (3, 5), (1, 8), (4, 8), (7, 8), (1, 5), (5, 5), (2, 13), (6, 13), (1, 1), (3, 1),
          (2, 31), (4, 31), (1, 64), (2, 64), (3, 8), (8, 5), (5, 13), (9, 1), (1, 31)]


def transformer_block(positions: bool = False, token_types: bool = False):
    """The block; ``positions``: with position rows added to the embedding, ``Gather(table,
    Range(0, Shape(ids)[1]))`` as the exports build them: a constant that follows the sequence length;
    ``token_types``: with BERT's token-type rows, ``Gather(types, ConstantOfShape(Shape(ids), 0))``."""
    rng = np.random.default_rng(0)

    def weight(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    weights = [weight(n, WIDTH, WIDTH) for n in ("wq", "wk", "wv", "wo")] + \
        [weight(n, WIDTH) for n in ("bq", "bk", "bv", "bo", "g1", "b1", "g2", "b2")] + \
        [weight("w_up", WIDTH, HIDDEN), weight("b_up", HIDDEN), weight("w_down", HIDDEN, WIDTH), weight("b_down", WIDTH),
         numpy_helper.from_array(np.array([0, 0, HEADS, WIDTH // HEADS], np.int64), "heads_shape"),
         numpy_helper.from_array(np.array([0, 0, WIDTH], np.int64), "merged_shape"),
         numpy_helper.from_array(np.array(1 / np.sqrt(WIDTH // HEADS), np.float32), "scale"),
         numpy_helper.from_array(np.array(np.sqrt(0.5), np.float32), "sqrt_half"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half"), weight("table", VOCAB, WIDTH, scale=1.0)]
    node = helper.make_node
    nodes = [node("Gather", ["table", "ids"], ["x"] if not positions else ["tokens"], axis=0),
             node("LayerNormalization", ["x", "g1", "b1"], ["h"], axis=-1, epsilon=1e-5)]
    if positions:
        weights += [weight("position_table", 64, WIDTH), numpy_helper.from_array(np.array(1, np.int64), "one_i"),
                    numpy_helper.from_array(np.array(0, np.int64), "zero_i")]
        nodes = nodes[:1] + [node("Shape", ["ids"], ["ids_shape"]),
                             node("Gather", ["ids_shape", "one_i"], ["length"], axis=0),
                             node("Range", ["zero_i", "length", "one_i"], ["position_ids"]),
                             node("Gather", ["position_table", "position_ids"], ["position_rows"], axis=0),
                             node("Add", ["tokens", "position_rows"], ["x"])] + nodes[1:]
    if token_types:
        weights.append(weight("type_table", 2, WIDTH))
        at = next(i for i, n in enumerate(nodes) if list(n.output) == ["x"])
        nodes[at].output[0] = "untyped"
        nodes[at + 1:at + 1] = [
            node("Shape", ["ids"], ["type_shape"]),
            node("ConstantOfShape", ["type_shape"], ["type_ids"],
                 value=numpy_helper.from_array(np.zeros(1, np.int64))),
            node("Gather", ["type_table", "type_ids"], ["type_rows"], axis=0),
            node("Add", ["untyped", "type_rows"], ["x"])]
    for p in "qkv":
        nodes += [node("MatMul", ["h", f"w{p}"], [f"{p}0"]), node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
                  node("Reshape", [f"{p}1", "heads_shape"], [f"{p}2"])]
    nodes += [node("Transpose", ["q2"], ["qh"], perm=[0, 2, 1, 3]), node("Transpose", ["k2"], ["kt"], perm=[0, 2, 3, 1]),
              node("Transpose", ["v2"], ["vh"], perm=[0, 2, 1, 3]),
              node("MatMul", ["qh", "kt"], ["scores"]), node("Mul", ["scores", "scale"], ["scaled"]),
              node("Softmax", ["scaled"], ["p"], axis=-1), node("MatMul", ["p", "vh"], ["ctx"]),
              node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              node("Reshape", ["ctx_t", "merged_shape"], ["merged"]),
              node("MatMul", ["merged", "wo"], ["o0"]), node("Add", ["o0", "bo"], ["o1"]), node("Add", ["o1", "x"], ["r1"]),
              node("LayerNormalization", ["r1", "g2", "b2"], ["h2"], axis=-1, epsilon=1e-5),
              node("MatMul", ["h2", "w_up"], ["u0"]), node("Add", ["u0", "b_up"], ["u1"]),
              # GELU as the exports spell it: 0.5 * u * (1 + erf(u / sqrt(2)))
              node("Mul", ["u1", "sqrt_half"], ["u2"]), node("Erf", ["u2"], ["u3"]), node("Add", ["u3", "one"], ["u4"]),
              node("Mul", ["u1", "u4"], ["u5"]), node("Mul", ["u5", "half"], ["u6"]),
              node("MatMul", ["u6", "w_down"], ["d0"]), node("Add", ["d0", "b_down"], ["d1"]),
              node("Add", ["d1", "r1"], ["y"])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "sequence"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", WIDTH])],
                              initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.slow  # 20 imports and schedules of the block (~10 s on 2 idle cores)
def test_twenty_shapes_after_one_compile_match_onnx_runtime(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    monkeypatch.setattr(kernel_cache, "_DEFAULT", cache)
    model = transformer_block()
    compiled = lezero.onnx.compile(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options)
    rng = np.random.default_rng(1)
    for i, (batch, seq) in enumerate(SHAPES):
        ids = rng.integers(-VOCAB, VOCAB, (batch, seq))  # negative ids count from the end, as in ORT
        before = (cache.stats.lowerings, cache.stats.compiles)
        got = compiled.run({"ids": ids})["y"]
        np.testing.assert_allclose(got, session.run(None, {"ids": ids})[0], rtol=1e-5, atol=1e-5)
        lowered, compiled_now = (now - was for now, was in zip((cache.stats.lowerings, cache.stats.compiles), before))
        if i >= 1:  # the first shape lowers (and probes) every kernel
            plan = compiled._programs[(((batch, seq),),)].compiled.plan_for([(batch, seq)]).plan
            generic = sum(launch.kernel.row_generic is not None for launch in plan.launches)
            assert generic >= 8, (batch, seq)  # the embedding, layer norms, projections (q, k, v one), attention, MLP, residuals
            assert (lowered, compiled_now) == (0, 0), (batch, seq)
    assert len(set(SHAPES)) == 20
    # shapes one size apart from two known ones were substituted, not imported again
    substituted = [shape for shape in SHAPES if compiled._programs[(((shape),),)].substituted]
    assert len(substituted) >= 8, substituted
    bad = np.zeros((3, 8), np.int64)
    bad[2, 7] = VOCAB  # the embedding's bounds check, in the row-generic code
    with pytest.raises(IndexError, match=f"index {VOCAB} is out of range for axis 0 of size {VOCAB}"):
        compiled.run({"ids": bad})
    # What is left: the head split (Reshape to [0, 0, heads, d]) copies two dynamic dims, which
    # lz.reshape cannot say, so the graph is imported and scheduled again per shape.
    assert compiled.shape_specialized


def _full_schedule(compiled, shapes: tuple):
    """The full path's schedule of ``compiled`` at input ``shapes``: imported at them, then the pipeline."""
    feeds = {name: np.zeros(shape, np.int64) for name, shape in zip(compiled.input_names, shapes)}
    return specialize(compiled._imported(feeds), "main", list(shapes))


@pytest.mark.parametrize("positions", [False, True])
def test_substituted_schedules_print_as_the_full_paths(positions, tmp_path):
    """Fitted at batch x sequence 2 x 8 against 3 x 8 and 2 x 9, a schedule substituted to other
    sizes prints exactly as the full path's there, and plans the same launches.  The position
    rows (``positions``) follow the sequence: the first rows of their table."""
    compiled = lezero.onnx.compile(transformer_block(positions))
    assert compiled.shape_specialized
    source = _full_schedule(compiled, ((2, 8),))
    fit = SizeFit.between(source, (2, 8), [(_full_schedule(compiled, ((3, 8),)), 3),
                                           (_full_schedule(compiled, ((2, 9),)), 9)], compiled._tables())
    assert fit is not None
    cache = KernelCache(tmp_path)
    source_kernels = [launch.kernel for launch in build_plan(source, "main", cache=cache).launches]
    # at the source 2 is also the head count; 32 is the width, 64 the MLP's hidden size: a dim
    # equal to a dynamic one by chance stays as it is
    for sizes in [(4, 5), (5, 32), (32, 13), (64, 64), (9, 2), (2, 17), (3, 8)]:
        substitution, full = fit.substitute(sizes), _full_schedule(compiled, (sizes,))
        assert print_module(substitution.module) == print_module(full), sizes
        if sizes in [(5, 32), (64, 64)]:  # the plan: the same launches of the same kernels, shared ones included
            planned = substitution.planned_kernels(source_kernels, cache, None)
            assert _launches(build_plan(substitution.module, "main", cache=cache, planned=planned)) == \
                _launches(build_plan(full, "main", cache=cache)), sizes
    assert fit.substitute((1, 8)) is None and fit.substitute((2, 1)) is None  # a dim of 1 schedules differently
    if positions:
        assert fit.substitute((2, 65)) is None  # past the position table's 64 rows


def _launches(plan) -> list:
    return [(launch.name, launch.kernel.content_key, launch.kernel.work_items, launch.kernel.flops,
             launch.kernel.row_generic, launch.kernel.sizes, launch.operands, launch.results, launch.sizes,
             launch.split_over_threads) for launch in plan.launches] + [plan.outputs, plan.arena_sizes]


def test_a_constant_that_follows_a_dim_by_no_rule_is_not_substituted():
    """Without the model's tables the position rows follow the sequence by no rule: no fit, the
    full path.  (A constant is rewritten only by a rule both schedules show.)"""
    compiled = lezero.onnx.compile(transformer_block(positions=True))
    source, partner = _full_schedule(compiled, ((2, 8),)), _full_schedule(compiled, ((2, 9),))
    assert SizeFit.between(source, (8,), [(partner, 9)]) is None


def test_new_shapes_served_by_substitution_match_onnx_runtime():
    """Once the model ran at 2 x 8, 3 x 8 and 2 x 9, every new (batch, sequence) with both at least
    2 is substituted, a new sequence length included; outputs equal ORT's."""
    model = transformer_block(positions=True)
    compiled = lezero.onnx.compile(model)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(2)
    served = []
    for batch, seq in [(2, 8), (3, 8), (2, 9), (5, 8), (4, 12), (7, 30), (3, 64), (2, 2), (1, 8)]:
        ids = rng.integers(0, VOCAB, (batch, seq))
        got = compiled.run({"ids": ids})["y"]
        np.testing.assert_allclose(got, session.run(None, {"ids": ids})[0], rtol=1e-5, atol=1e-5)
        served.append(compiled._programs[(((batch, seq),),)].substituted)
    assert served == [False, False, False, True, True, True, True, True, False]


def test_a_new_shape_is_substituted_with_the_collector_paused(monkeypatch):
    """A new shape's substitution runs with the garbage collector off (a full collection of the
    model's heap there cost a GPT-2 new shape ~70 ms on top of its 20-30) and leaves it on."""
    import gc

    import lezero.onnx.compiled_model as compiled_model

    seen = []

    class Watched(compiled_model._Program):
        def __init__(self, module, substituted=False):
            seen.append((substituted, gc.isenabled()))
            super().__init__(module, substituted)

    monkeypatch.setattr(compiled_model, "_Program", Watched)
    compiled = lezero.onnx.compile(transformer_block(positions=True))
    for batch, seq in [(2, 8), (3, 8), (2, 9), (5, 8)]:
        compiled.run({"ids": np.ones((batch, seq), np.int64)})
    assert compiled._programs[(((5, 8),),)].substituted
    assert [enabled for substituted, enabled in seen if substituted] == [False] and gc.isenabled()
    assert all(enabled for substituted, enabled in seen if not substituted)


def test_new_sequence_lengths_compile_no_kernel(tmp_path, monkeypatch):
    """After the first shape (which probes every kernel) a new sequence length lowers and compiles
    nothing: the embedding with its position rows, its layer norm and the attention read the length
    at run time (``row_generic.sequence_form``; elementwise and reduction kernels through
    ``affine.RunTimeSize``).  Each shape matches ONNX Runtime to 1e-5."""
    cache = KernelCache(tmp_path)
    monkeypatch.setattr(kernel_cache, "_DEFAULT", cache)
    model = transformer_block(positions=True)
    compiled = lezero.onnx.compile(model)
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    # short, odd, past a vector of 16, the position table's 64 rows
    # and the heads' width 16 and the model's 32 (dims equal to the length by chance)
    for i, (batch, seq) in enumerate([(2, 8), (2, 5), (3, 13), (2, 21), (4, 9), (3, 64), (2, 37), (3, 16), (2, 32)]):
        ids = rng.integers(0, VOCAB, (batch, seq))
        before = (cache.stats.lowerings, cache.stats.compiles)
        got = compiled.run({"ids": ids})["y"]
        np.testing.assert_allclose(got, session.run(None, {"ids": ids})[0], rtol=1e-5, atol=1e-5)
        now = (cache.stats.lowerings - before[0], cache.stats.compiles - before[1])
        if i == 0:
            assert now[1] > 0
            continue
        assert now == (0, 0), (batch, seq)
        plan = compiled._programs[(((batch, seq),),)].compiled.plan_for([(batch, seq)]).plan
        with_length = [launch.kernel.name for launch in plan.launches if launch.kernel.sizes == (seq,)]
        assert len(with_length) >= 2, (batch, seq, with_length)  # the embedding, the attention


def test_token_type_rows_schedule_alike_at_every_size():
    """BERT's token-type rows, a gather at ids that are all one index, import as that row broadcast
    (``Importer._fold_gather_of_one_index``) and stay a broadcast in the kernel that adds them
    (constant-fold keeps a broadcast its elementwise users read): no ``[b, s, h]`` constant that the
    full path folds only up to 65536 elements.  So one fit at 2 x 8 substitutes past that size
    (64 x 64 x 32 = 131072) exactly as the full path schedules there, and one compiled model serves
    both sides, matching ONNX Runtime."""
    model = transformer_block(positions=True, token_types=True)
    compiled = lezero.onnx.compile(model)
    assert compiled.shape_specialized
    fit = SizeFit.between(_full_schedule(compiled, ((2, 8),)), (2, 8),
                          [(_full_schedule(compiled, ((3, 8),)), 3), (_full_schedule(compiled, ((2, 9),)), 9)],
                          compiled._tables())
    assert fit is not None
    for sizes in [(64, 64), (40, 60), (3, 5)]:
        full = _full_schedule(compiled, (sizes,))
        constants = [tuple(op.results[0].type.shape) for op in full.walk() if op.name == "lz.constant"]
        assert sizes + (WIDTH,) not in constants and (1, 1, WIDTH) in constants, sizes
        assert print_module(fit.substitute(sizes).module) == print_module(full), sizes
    session = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(2)
    for batch, seq in [(2, 8), (3, 8), (2, 9), (64, 64), (3, 5)]:
        ids = rng.integers(0, VOCAB, (batch, seq))
        np.testing.assert_allclose(compiled.run({"ids": ids})["y"], session.run(None, {"ids": ids})[0],
                                   rtol=1e-5, atol=1e-5)
    assert compiled._programs[(((64, 64),),)].substituted
