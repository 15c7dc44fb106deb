"""``lz.einsum``: Einstein summation composed from tensor methods (no op of its own), so its
gradient is theirs.

The operands are reduced one at a time, left to right, as ``torch.einsum`` does without
``opt_einsum``: a subscript repeated in one operand takes the diagonal (a product with the
identity, summed), a subscript no other operand nor the output has is summed away, and two
operands contract as one batched ``matmul`` (the subscripts both keep are batch dims, those
both drop the contracted dim, the rest the rows and columns).  ``...`` stands for the same
trailing dims in every operand (broadcast, right-aligned); without ``->`` the output is the
ellipsis dims and then the subscripts that appear once, in alphabetical order.
"""
from __future__ import annotations

import math

from lezero.eager.core import Tensor
from lezero.eager.creation import eye

__all__ = ["einsum"]


def _parse(equation: str, operands) -> tuple:
    """``equation`` as one list of labels per operand and one for the output (ellipsis dims are
    the labels ``"...0"``, ``"...1"``, ...)."""
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        more = "more" if len(operands) > len(terms) else "fewer"
        raise ValueError(f"einsum(): {more} operands were provided than specified in the equation")
    for position, c in enumerate(equation):
        if not (c.isascii() and c.isalpha()) and c not in ".,->":
            raise ValueError(f"einsum(): invalid subscript given at index {position} in the equation string, "
                             f"subscripts must be in [a-zA-Z]")
    ellipsis_rank = 0
    for i, (term, x) in enumerate(zip(terms, operands)):
        letters = term.replace("...", "")
        if "..." in term:
            ellipsis_rank = max(ellipsis_rank, x.ndim - len(letters))
            if x.ndim < len(letters):
                raise ValueError(f"einsum(): the number of subscripts in the equation ({len(letters)}) is more than "
                                 f"the number of dimensions ({x.ndim}) for operand {i}")
        elif len(letters) != x.ndim:
            raise ValueError(f"einsum(): the number of subscripts in the equation ({len(letters)}) does not match the "
                             f"number of dimensions ({x.ndim}) for operand {i} and no ellipsis was given")

    def labels(term: str, rank: int) -> list:
        head, dots, tail = term.partition("...")
        if not dots:
            return list(term)
        k = rank - len(head) - len(tail)
        return list(head) + [f"...{j}" for j in range(ellipsis_rank - k, ellipsis_rank)] + list(tail)

    lists = [labels(t, x.ndim) for t, x in zip(terms, operands)]
    ellipsis = [f"...{j}" for j in range(ellipsis_rank)]
    if arrow:
        out = labels(output, len(output.replace("...", "")) + ellipsis_rank)
        for label in out:
            if out.count(label) > 1:
                raise ValueError(f"einsum(): output subscript {label} appears more than once in the output")
            if not any(label in ls for ls in lists):
                raise ValueError(f"einsum(): output subscript {label} does not appear in the equation for any input "
                                 f"operand")
    else:
        counts = [label for ls in lists for label in ls if not label.startswith("...")]
        out = ellipsis + sorted(c for c in set(counts) if counts.count(c) == 1)
    return lists, out


def _diagonals(x: Tensor, labels: list) -> tuple:
    """``x`` with each repeated label's dims reduced to their diagonal."""
    while True:
        repeated = next((label for label in labels if labels.count(label) > 1), None)
        if repeated is None:
            return x, labels
        a = labels.index(repeated)
        b = labels.index(repeated, a + 1)
        n = x.shape[a]
        if x.shape[b] != n:
            raise RuntimeError(f"einsum(): subscript {repeated} is repeated for operand but the sizes don't match, "
                               f"{x.shape[b]} != {n}")
        identity = eye(n, dtype=x.dtype, device=x.device).reshape([n if d in (a, b) else 1 for d in range(x.ndim)])
        x = (x * identity).sum(b)
        labels = labels[:b] + labels[b + 1:]


def _sum_unneeded(x: Tensor, labels: list, needed: set) -> tuple:
    drop = [d for d, label in enumerate(labels) if label not in needed]
    if drop:
        x = x.sum(drop)
        labels = [label for label in labels if label in needed]
    return x, labels


def _contract(a: Tensor, la: list, b: Tensor, lb: list, needed: set) -> tuple:
    """``a`` and ``b`` as one batched matmul: (batch, rows, contracted) @ (batch, contracted, columns)."""
    batch = [label for label in la if label in lb and label in needed]
    summed = [label for label in la if label in lb and label not in needed]
    rows = [label for label in la if label not in lb]
    columns = [label for label in lb if label not in la]

    def sizes(x, lx, group):
        return [x.shape[lx.index(label)] for label in group]

    for label in summed:
        if a.shape[la.index(label)] != b.shape[lb.index(label)]:
            raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes (original->remapped): "
                               f"{list(a.shape)} and {list(b.shape)} at subscript {label}")
    a = a.permute(*[la.index(label) for label in batch + rows + summed])
    b = b.permute(*[lb.index(label) for label in batch + summed + columns])
    a_batch, b_batch = sizes(a, batch + rows + summed, batch), sizes(b, batch + summed + columns, batch)
    k = math.prod(sizes(a, batch + rows + summed, summed))
    a_rows, b_columns = sizes(a, batch + rows + summed, rows), sizes(b, batch + summed + columns, columns)
    product = a.reshape(a_batch + [math.prod(a_rows), k]) @ b.reshape(b_batch + [k, math.prod(b_columns)])
    out_batch = list(product.shape[:len(batch)])
    return product.reshape(out_batch + a_rows + b_columns), batch + rows + columns


def einsum(equation: str, *operands) -> Tensor:
    """``torch.einsum(equation, *operands)`` (or one list of operands)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError("einsum(): must provide at least one operand")
    lists, out = _parse(equation, operands)
    x, lx = None, None
    for i, (t, labels) in enumerate(zip(operands, lists)):
        needed = set(out).union(*lists[i + 1:])
        t, labels = _diagonals(t, labels)
        t, labels = _sum_unneeded(t, labels, needed | (set(lx) if lx is not None else set()))
        if x is None:
            x, lx = t, labels
            continue
        x, lx = _sum_unneeded(x, lx, needed | set(labels))
        x, lx = _contract(x, lx, t, labels, needed)
    x, lx = _sum_unneeded(x, lx, set(out))
    return x.permute(*[lx.index(label) for label in out]) if lx else x
