"""Index forms (lezero/codegen/affine.py): a floordiv and mod pair laid out row-major again is the
form it was split from, where the layout allows it and not elsewhere."""
from __future__ import annotations

from lezero.codegen.affine import Affine, Var, linear_index, unravel


def test_split_pixels_laid_out_again_are_one_run():
    pixel, channel = Affine.of(Var("pixel", 49)), Affine.of(Var("channel", 8))
    index = [Affine(), channel, pixel.floordiv(7), pixel.mod(7)]
    assert linear_index(index, (1, 8, 7, 7)) == channel * 49 + pixel
    assert unravel(linear_index(index, (1, 8, 7, 7)), (8, 49)) == (channel, pixel)


def test_pairs_that_do_not_match_stay_split():
    pixel = Affine.of(Var("pixel", 49))
    transposed = pixel.floordiv(7) + pixel.mod(7) * 7  # the (ow, oh) layout: not pixel
    assert transposed.recombined() == transposed
    other = pixel.floordiv(7) * 7 + pixel.mod(5)
    assert other.recombined() == other
    doubled = (pixel.floordiv(7) * 7 + pixel.mod(7)) * 2 + 3
    assert doubled.recombined() == pixel * 2 + 3
