"""The ``lz`` dialect: every op lezero knows, each defined once.

Importing this package registers them all.  One module per family:

- ``elementwise``: unary math (a table), ``cast``, ``gelu``, broadcasting binary ops (a table),
  ``cmp``, ``select``
- ``contraction``: ``matmul``, ``conv2d``; ``pooling``: ``max_pool2d``, ``avg_pool2d``,
  ``max_pool2d_grad``
- ``reduction``: ``reduce_*`` (a table), ``argmax``
- ``data_movement``: ``reshape``, ``transpose``, ``broadcast_to``, ``slice``, ``concat``, ``pad``,
  ``gather``; ``constant``: ``constant``
- ``kernel``: ``kernel``, ``yield`` (a fused group, made by the fuse pass); ``device``:
  ``transfer`` (a copy to another device's memory, made by ``partition{target=cuda}``)
- ``attention``: ``attention`` (formed by the fuse-attention pass, one kernel on the CPU)
- ``blocked``: ``conv2d_blocked`` (channel-blocked activations, formed by the blocked-layout pass)
- ``control_flow``: ``for``, ``while``, ``if`` (loops and a condition with regions ending in ``yield``)
- ``composite``: ``softmax``, ``log_softmax``, ``layer_norm``, ``batch_norm`` (with decompositions)
- ``random``: ``random_uniform`` (counter-based Philox4x32-10: the state is an operand)

Shared rules live in one helper each: ``broadcasting`` (shapes), ``axes`` (axis attributes),
``windows`` (conv and pool geometry), ``constraints`` (element types), ``numerics`` (numpy
storage of element types).
"""
from lezero.ir.dialect import (attention, composite, constant, contraction, data_movement, device, elementwise,  # noqa: F401
                               kernel, pooling, random, reduction)
from lezero.ir.dialect import control_flow  # noqa: F401  (issue 17's lz.for, lz.while, lz.if)
from lezero.ir.dialect import quantization  # noqa: F401  (issue 12's lz.quantize, lz.dequantize, lz.dynamic_quantize, lz.matmul_integer)
from lezero.ir.dialect import collective  # noqa: F401  (issue 14's lz.all_reduce, lz.all_reduce_start, lz.all_reduce_wait)
from lezero.ir.dialect import blocked  # noqa: F401  (issue 11's lz.conv2d_blocked)
