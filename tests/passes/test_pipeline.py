"""Pipeline text (mlir-opt's syntax), pass options, the registry and --list-passes."""
from __future__ import annotations

import pytest

from lezero.passes import (Pass, PipelineError, format_pass_list, format_pipeline, get_pass, list_passes, option,
                           parse_pipeline, pass_names, register_pass)
from lezero.passes.registry import _PASSES


@pytest.fixture
def toy_passes():
    """Two passes with every option type, registered for the test only."""

    @register_pass
    class ToyFuse(Pass):
        name = "toy-fuse"
        summary = "A fusion stand-in"
        max_ops: int = option(16, "largest group")
        debug: bool = False
        ratio: float = 0.5
        label: str = "x"

        def run(self, module):
            pass

    @register_pass
    class ToyAutodiff(Pass):
        name = "toy-autodiff"
        summary = "An autodiff stand-in"
        wrt: list[int] = option([0], "arguments to differentiate")
        names: list[str] = option([])

        def run(self, module):
            pass

    yield ToyFuse, ToyAutodiff
    del _PASSES["toy-fuse"], _PASSES["toy-autodiff"]


def test_the_first_passes_are_registered():
    assert {"canonicalize", "cse", "dce", "constant-fold", "decompose", "shape-infer"} <= set(pass_names())
    assert get_pass("cse").name == "cse"


def test_parse_a_plain_pipeline():
    passes = parse_pipeline("canonicalize,cse,dce")
    assert [p.name for p in passes] == ["canonicalize", "cse", "dce"]
    assert parse_pipeline("") == [] and parse_pipeline("   ") == []


def test_spaces_and_the_builtin_module_wrapper_are_accepted():
    passes = parse_pipeline(" builtin.module( canonicalize , cse ) ")
    assert [p.name for p in passes] == ["canonicalize", "cse"]
    assert [p.name for p in parse_pipeline("builtin.module(builtin.module(dce))")] == ["dce"]


def test_options_of_every_type(toy_passes):
    fuse, autodiff = parse_pipeline('toy-fuse{max-ops=8 debug=true ratio=0.25 label="a b"},toy-autodiff{wrt=0,1}')
    assert (fuse.max_ops, fuse.debug, fuse.ratio, fuse.label) == (8, True, 0.25, "a b")
    assert autodiff.wrt == [0, 1]
    (a,) = parse_pipeline("toy-autodiff{wrt=2 names=x,y}")
    assert a.wrt == [2] and a.names == ["x", "y"]


def test_defaults_and_fresh_lists(toy_passes):
    a, b = parse_pipeline("toy-autodiff,toy-autodiff")
    assert a.wrt == [0] and a.wrt is not b.wrt
    (fuse,) = parse_pipeline("toy-fuse")
    assert (fuse.max_ops, fuse.debug, fuse.ratio, fuse.label) == (16, False, 0.5, "x")


def test_a_bare_option_means_true_and_underscores_are_accepted(toy_passes):
    (fuse,) = parse_pipeline("toy-fuse{debug max_ops=3}")
    assert fuse.debug is True and fuse.max_ops == 3


def test_comma_lists_may_have_spaces_after_commas(toy_passes):
    (a,) = parse_pipeline("toy-autodiff{wrt=0, 1, 2}")
    assert a.wrt == [0, 1, 2]


def test_round_trip_through_text(toy_passes):
    text = 'toy-fuse{max-ops=8 debug=true label="a b"},cse,toy-autodiff{wrt=0,1}'
    assert format_pipeline(parse_pipeline(text)) == text
    assert format_pipeline(parse_pipeline("constant-fold{max-elements=1048576}")) == "constant-fold"


def test_options_round_trip_through_the_class(toy_passes):
    fuse_cls, _ = toy_passes
    p = fuse_cls(max_ops=4)
    assert p.pipeline_text() == "toy-fuse{max-ops=4}"
    assert p.option_values() == {"max-ops": 4, "debug": False, "ratio": 0.5, "label": "x"}


@pytest.mark.parametrize("text, message, column", [
    ("canonicalise", "unknown pass 'canonicalise'; did you mean 'canonicalize'?", 0),
    ("cse,constnat-fold", "did you mean 'constant-fold'?", 4),
    ("qqqq", "unknown pass 'qqqq' (registered passes: ", 0),
    ("cse,", "expected a pass name after ','", 4),
    (",cse", "expected a pass name, got ','", 0),
    ("cse{", "unterminated options of pass 'cse'", 3),
    ("cse dce", "unexpected 'd' in pass pipeline", 4),
    ("builtin.module(cse", "expected ')' to close 'builtin.module('", 18),
    ("func.func(cse)", "unsupported nested pipeline 'func.func(...)'", 0),
])
def test_syntax_errors_point_at_the_text(text, message, column):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    e = info.value
    assert message in e.message
    assert e.text == text and e.position == column
    assert str(e).splitlines()[-1] == "  " + " " * column + "^"


def test_unknown_option_lists_the_valid_ones(toy_passes):
    with pytest.raises(PipelineError) as info:
        parse_pipeline("cse,toy-fuse{max-op=3}")
    assert info.value.message == ("unknown option 'max-op' for pass 'toy-fuse'; did you mean 'max-ops'? "
                                  "(valid options: max-ops (int), debug (bool), ratio (float), label (str))")
    assert info.value.position == len("cse,toy-fuse{")
    with pytest.raises(PipelineError, match=r"unknown option 'x' for pass 'cse' \(valid options: none\)"):
        parse_pipeline("cse{x=1}")


@pytest.mark.parametrize("text, message", [
    ("toy-fuse{max-ops=many}", "option 'max-ops' of pass 'toy-fuse' expects an int, got 'many'"),
    ("toy-fuse{debug=maybe}", "option 'debug' of pass 'toy-fuse' expects a bool (true or false), got 'maybe'"),
    ("toy-fuse{ratio=x}", "option 'ratio' of pass 'toy-fuse' expects a float, got 'x'"),
    ("toy-autodiff{wrt=0,a}", "option 'wrt' of pass 'toy-autodiff' expects a comma-separated list[int], got '0,a'"),
    ("toy-fuse{max-ops=1 max-ops=2}", "option 'max-ops' of pass 'toy-fuse' is given twice"),
    ("toy-fuse{max-ops=}", "expected a value for option 'max-ops' of pass 'toy-fuse'"),
])
def test_bad_values(toy_passes, text, message):
    with pytest.raises(PipelineError) as info:
        parse_pipeline(text)
    assert info.value.message == message
    assert text in str(info.value)


def test_pipeline_error_is_a_value_error():
    assert issubclass(PipelineError, ValueError)


def test_get_pass_suggests():
    with pytest.raises(PipelineError, match="did you mean 'dce'"):
        get_pass("dcee")


def test_list_passes_describes_options(toy_passes):
    infos = {i.name: i for i in list_passes()}
    fuse = infos["toy-fuse"]
    assert fuse.summary == "A fusion stand-in"
    assert [(o.name, o.type_name, o.default, o.help) for o in fuse.options] == [
        ("max-ops", "int", 16, "largest group"), ("debug", "bool", False, ""),
        ("ratio", "float", 0.5, ""), ("label", "str", "x", "")]
    assert [(o.name, o.type_name, o.default) for o in infos["toy-autodiff"].options] == [
        ("wrt", "list[int]", [0]), ("names", "list[str]", [])]
    assert list(infos) == sorted(infos)


def test_format_pass_list(toy_passes):
    text = format_pass_list()
    assert text.startswith("Available passes:\n")
    assert "  constant-fold        Evaluate ops whose operands are all constants" in text
    assert "      max-ops: int = 16  largest group" in text
    assert "      wrt: list[int] = 0  arguments to differentiate" in text
    assert "      names: list[str] = (none)" in text


def test_a_bad_option_type_fails_at_declaration():
    with pytest.raises(TypeError, match="option 'shape' of pass 'bad-pass' has type tuple"):
        @register_pass
        class Bad(Pass):
            name = "bad-pass"
            shape: tuple = (1, 2)
    assert "bad-pass" not in pass_names()


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="registered twice"):
        @register_pass
        class AnotherCSE(Pass):
            name = "cse"
