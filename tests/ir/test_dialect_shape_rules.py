"""The shared shape rules: broadcasting with dynamic dims, axes, window sizes."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import numpy as np

from lezero.ir import OpError
from lezero.ir.dialect.axes import normalize_axes, normalize_axis, reduction_axes
from lezero.ir.dialect.broadcasting import broadcast_shapes, broadcasts_to
from lezero.ir.dialect.windows import window_output_size


@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, min_side=0, max_side=4))
def test_static_broadcast_is_numpy(case):
    assert broadcast_shapes(*case.input_shapes) == np.broadcast_shapes(*case.input_shapes)


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=4),
       st.data())
def test_dynamic_broadcast_is_sound(case, data):
    # Hiding dims (None) never contradicts the static result: each output dim is either the static
    # one or None, and None only when every input dim there is hidden or 1.
    shapes = [tuple(None if data.draw(st.booleans()) else d for d in s) for s in case.input_shapes]
    out = broadcast_shapes(*shapes)
    assert len(out) == len(case.result_shape)
    for i, (got, want) in enumerate(zip(out, case.result_shape)):
        assert got == want or got is None


@pytest.mark.parametrize("a, b, out", [
    ((None,), (1,), (None,)), ((None,), (5,), (5,)), ((None,), (None,), (None,)), ((None,), (0,), (0,)),
    ((3, 1), (None,), (3, None)),
])
def test_dynamic_broadcast_rules(a, b, out):
    assert broadcast_shapes(a, b) == out


def test_broadcast_error_lists_the_shapes():
    with pytest.raises(OpError, match="^operand shapes 2x3 and 4x3 are not broadcast-compatible$"):
        broadcast_shapes((2, 3), (4, 3))
    with pytest.raises(OpError, match="^operand shapes scalar, 2 and 3 are not broadcast-compatible$"):
        broadcast_shapes((), (2,), (3,))


def test_broadcasts_to():
    assert broadcasts_to((1, 3), (2, 3)) and broadcasts_to((None, 3), (2, 3)) and broadcasts_to((), (0,))
    assert not broadcasts_to((2, 3), (3,)) and not broadcasts_to((2,), (3,))


def test_axes():
    assert normalize_axis(-1, 3) == 2
    assert normalize_axes([-1, 0], 3) == (2, 0)
    assert reduction_axes(None, 3) == reduction_axes([], 3) == (0, 1, 2)
    assert reduction_axes([-1, 0], 3) == (0, 2)
    with pytest.raises(OpError, match=r"axis 3 is out of range for rank 3 \(valid: \[-3, 2\]\)"):
        normalize_axis(3, 3)
    with pytest.raises(OpError, match=r"axis 0 is out of range for rank 0 \(valid: none"):
        normalize_axis(0, 0)


@given(size=st.integers(1, 12), kernel=st.integers(1, 4), stride=st.integers(1, 3), pad=st.integers(0, 2),
       dilation=st.integers(1, 2), ceil_mode=st.booleans())
def test_window_output_size_matches_torch(size, kernel, stride, pad, dilation, ceil_mode):
    if pad > kernel // 2 or size + 2 * pad < dilation * (kernel - 1) + 1:
        return  # torch refuses these
    x = torch.zeros(1, 1, size)
    expected = torch.nn.functional.max_pool1d(x, kernel, stride, pad, dilation, ceil_mode=ceil_mode).shape[-1]
    assert window_output_size(size, kernel, stride, pad, pad, dilation, ceil_mode) == expected


def test_window_output_size_dynamic_and_error():
    assert window_output_size(None, 3) is None
    with pytest.raises(OpError, match="window of size 5 is larger than the padded input size 4 in dim 2"):
        window_output_size(2, 3, 1, 1, 1, dilation=2, dim=2)
