"""The attention kernel (``lezero/codegen/llvm/attention.py``) on every CPU of the cross-target
matrix against ``lz.attention``'s numpy reference: head dims 32, 64, 80 (not a multiple of the
key tile), sequence lengths 1, 7, 64, 197 (a partial key tile) and 513 (three key blocks: the
online softmax rescales), with an additive mask of each broadcast (hidden keys at the lowest
float; a fully hidden row at -inf, which gives nan as the reference does) and without; q and k read through the
exports' transposes; the work split in any order."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, reference, run_kernel

# the mask's shape, broadcast to the scores [HEADS, s, s]: one per score, one per key (BERT's
# padding), one per query row (a stride-0 read along the keys)
MASKS = {"plain": None, "scores": lambda sq, s: (HEADS, sq, s), "keys": lambda sq, s: (1, 1, s),
         "rows": lambda sq, s: (HEADS, sq, 1)}
CASES = {f"d{d}_s{s}_{mask}": (d, s, s, mask) for d in (32, 64, 80) for s in (1, 7, 64, 197, 513) for mask in MASKS}
# decode shapes: a few queries against many keys (fewer query rows than the register tile)
CASES.update({f"d{d}_q{sq}_k{sk}_{mask}": (d, sq, sk, mask) for d, sq, sk in ((64, 1, 197), (80, 3, 513))
              for mask in ("plain", "scores")})
HEADS = 2


def attention_through_transposes(b, q, k, v, *mask):
    """q, k, v stored [s, heads, d] (the projections' layout), read as [heads, s, d]."""
    views = [b.op("lz.transpose", x, perm=[1, 0, 2]) for x in (q, k, v)]
    return b.op("lz.attention", *views, *mask, scale=0.125)


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_attention_matches_the_reference_on_every_cpu(cpu, case):
    d, sq, s, mask_kind = case
    rng = np.random.default_rng(d * 1000 + s)
    q, k, v = (rng.standard_normal((n, HEADS, d)).astype(np.float32) * 2 for n in (sq, s, s))
    inputs, types = [q, k, v], [((sq, HEADS, d), "f32"), ((s, HEADS, d), "f32"), ((s, HEADS, d), "f32")]
    if mask_kind != "plain":
        shape = MASKS[mask_kind](sq, s)
        mask = np.where(rng.random(shape) < 0.3, np.float32(-3.4028235e38), rng.standard_normal(shape).astype(np.float32))
        mask[..., 0, 0] = 0  # every row keeps a key ...
        if mask_kind == "scores":
            mask[1, sq // 2] = -np.inf  # ... but one, all -inf: nan, as the reference's softmax gives
        inputs.append(mask)
        types.append((shape, "f32"))
    module, kernel = make_kernel(types, attention_through_transposes, kind="attention")
    got = run_kernel(kernel, inputs, 3, cpu=cpu)
    (want,) = reference(module, inputs)
    assert np.isnan(want).any() == (mask_kind == "scores")
    # the online softmax sums in another order than the reference: error relative to the output's scale
    assert_matches(got[0], want, rtol=1e-5, atol=2e-6 * float(np.nanmax(np.abs(want))))
