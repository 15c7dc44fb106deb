"""Any text either parses or raises ParseError, never another exception; whatever parses prints
and round-trips.  Property tests over random text, token soup, mutated valid modules, and random
attribute values."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lezero.ir.attributes import DenseArrayAttr, DenseElementsAttr, FloatAttr, IntegerAttr, StringAttr
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import ParseError
from lezero.ir.lexer import tokenize
from lezero.ir.parser import parse_module
from lezero.ir.printer import print_module
from lezero.ir.types import ELEMENT_TYPES, tensor

from support.ir_text_samples import SAMPLES, T2, function, op

SEEDS = [print_module(SAMPLES[name](), generic=g, debuginfo=d)
         for name in ("mlp", "every_attribute", "regions", "structure", "locations", "edge_floats")
         for g in (False, True) for d in (False, True)]
SEEDS.append('#loc = loc("x":1:1)\n#loc1 = loc(fused[#loc, "n"])\n!t = tensor<2xf32>\n'
             '%0 = "t.a"() {v = dense<"0x0000803F"> : tensor<1xf32>, w = array<i1: true>} : () -> !t loc(#loc1)')

TOKENS = ['"', "%0", "%arg0", "%0#1", "%0:2", "#1", "#loc", "^bb0", "^bb1", ":", ",", "(", ")", "{", "}", "[", "]",
          "<", ">", "<{", "}>", "->", "=", "?", "x", "0x", "0x7F800000", "loc(", "@", "@f", "dense<", "array<",
          "tensor<", "f32", "i1", "bf16", "-", "1.0e", "1.5", "0", "99999999999999999999", "\\", "\n", " ", "//",
          "func.func", "module", "return", "func.return", "unit", "true", "fused[", "unknown", '"lz.add"', "$", "\x00",
          "é", "\t", "// -----"]

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_error(text: str):
    """Parse; on success check the module prints and round-trips in every mode."""
    try:
        module = parse_module(text)
    except ParseError as e:
        assert e.location.file_line_col() is not None
        return None
    assert isinstance(module, ModuleOp)
    for generic in (False, True):
        for debuginfo in (False, True):
            printed = print_module(module, generic=generic, debuginfo=debuginfo)
            assert print_module(parse_module(printed), generic=generic, debuginfo=debuginfo) == printed
    return module


@PROFILE
@given(st.text(max_size=200))
def test_random_text(text):
    parse_or_error(text)


@PROFILE
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup(tokens):
    parse_or_error("".join(tokens))


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["delete", "insert", "copy", "replace"]))
        if kind == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 12)):]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind == "copy":
            j = draw(st.integers(0, len(text)))
            text = text[:i] + text[j:j + draw(st.integers(1, 30))] + text[i:]
        else:
            text = text[:i] + draw(st.characters(min_codepoint=32, max_codepoint=126)) + text[i + 1:]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_modules(text):
    parse_or_error(text)


_SEED_TOKENS = [tokenize(seed)[1][:-1] for seed in SEEDS]
_VOCABULARY = sorted({t for tokens in _SEED_TOKENS for t in tokens})


@st.composite
def token_mutated(draw):
    """A valid module with a token or two deleted, inserted or replaced: near-valid text that
    often still parses (into unusual IR that must still print and round-trip)."""
    tokens = list(draw(st.sampled_from(_SEED_TOKENS)))
    for _ in range(draw(st.integers(1, 2))):
        i = draw(st.integers(0, len(tokens) - 1))
        kind = draw(st.sampled_from(["delete", "insert", "replace"]))
        if kind == "delete":
            del tokens[i]
        elif kind == "insert":
            tokens.insert(i, draw(st.sampled_from(_VOCABULARY)))
        else:
            tokens[i] = draw(st.sampled_from(_VOCABULARY))
    return " ".join(tokens)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(token_mutated())
def test_token_mutated_modules(text):
    parse_or_error(text)


# --- attribute values ------------------------------------------------------------------------------

def _roundtrip_attr(attr):
    f = function("f", [T2], lambda block, x: [op(block, "test.op", [x], [T2], {"a": attr}).result])
    text = print_module(ModuleOp([f]))
    back = parse_module(text).functions[0].entry_block.ops[0].attributes["a"]
    assert print_module(parse_module(text)) == text
    return back


FLOAT_TYPES = st.sampled_from([ELEMENT_TYPES[n] for n in ("f16", "bf16", "f32", "f64")])


@PROFILE
@given(FLOAT_TYPES, st.floats(allow_nan=True, allow_infinity=True))
def test_float_attributes(t, value):
    assert _roundtrip_attr(FloatAttr(value, t)) == FloatAttr(value, t) or (
        math.isnan(value) and math.isnan(_roundtrip_attr(FloatAttr(value, t)).value))


@PROFILE
@given(st.sampled_from([ELEMENT_TYPES[n] for n in ("i8", "i16", "i32", "i64", "ui8")]), st.data())
def test_integer_attributes(t, data):
    lo = 0 if t.name.startswith("ui") else -(1 << (t.bitwidth - 1))
    value = data.draw(st.integers(lo, (1 << t.bitwidth) - 1))
    assert _roundtrip_attr(IntegerAttr(value, t)) == IntegerAttr(value, t)


@PROFILE
@given(st.text())
def test_string_attributes(value):
    assert _roundtrip_attr(StringAttr(value)) == StringAttr(value)


@PROFILE
@given(FLOAT_TYPES, st.lists(st.floats(allow_nan=False, width=32), max_size=8))
def test_float_arrays(t, values):
    with np.errstate(over="ignore"):
        values = [float(v) for v in np.array(values, np.float64)]
    assert _roundtrip_attr(DenseArrayAttr(t, tuple(values))) == DenseArrayAttr(t, tuple(values))


DENSE_TYPES = st.sampled_from([ELEMENT_TYPES[n] for n in ("f16", "bf16", "f32", "f64", "i1", "i8", "i32", "i64", "ui8")])


@PROFILE
@given(DENSE_TYPES, st.lists(st.integers(0, 4), min_size=0, max_size=3),
       st.sampled_from([1, 300]), st.integers(0, 2**32 - 1))
def test_dense_attributes(et, shape, scale, seed):
    """Random dense attributes, small (nested lists) and large (hex), keep every bit."""
    shape = tuple(shape) + ((scale,) if scale > 1 else ())
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if et.is_bool:
        data = rng.random(n) < 0.5
    elif et.is_float:
        bits = rng.integers(0, 2**16 if et.bitwidth == 16 else 2**32, size=n, dtype=np.uint64)
        if et.name == "f16":
            data = bits.astype(np.uint16).view(np.float16)
        elif et.name == "bf16":
            data = (bits.astype(np.uint32) << 16).view(np.float32)
        elif et.name == "f32":
            data = bits.astype(np.uint32).view(np.float32)
        else:
            data = rng.standard_normal(n) * 10.0 ** rng.integers(-300, 300, size=n)
    else:
        info = np.iinfo(et.numpy_dtype)
        data = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=et.numpy_dtype)
    t = tensor(shape, et.name)
    attr = DenseElementsAttr(t, np.asarray(data).reshape(shape))
    back = _roundtrip_attr(attr)
    assert back.type == t and back.array.tobytes() == attr.array.tobytes()
