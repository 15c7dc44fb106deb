"""lezero demo: what the compiler does today, end to end on the seed's MLP.

1. parse the MLP from MLIR text (examples/mlp.mlir) and verify it;
2. run a pass pipeline (decompose the softmax, canonicalize, CSE, DCE, shape inference);
3. run the optimized IR in the reference interpreter and check it against plain numpy;
4. compile it for the CPU (partition, fuse, memory plan, LLVM) and run it at two batch sizes;
5. show what a user's mistake looks like: an error that points at the source.

Run with `make demo`.
"""
import pathlib
import sys
import time

import numpy as np

import lezero
import lezero.ir as ir
from lezero.passes import run_pipeline

HERE = pathlib.Path(__file__).parent


def numpy_mlp(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def main() -> int:
    path = HERE / "mlp.mlir"
    module = ir.parse_module(path.read_text(), filename=str(path))
    ir.verify(module)
    print(f"== parsed {path.name}: {len(module.lookup('mlp').entry_block.ops)} ops")

    pipeline = "decompose,canonicalize,cse,dce,shape-infer"
    module = run_pipeline(module, pipeline)
    print(f"== after -p {pipeline}:")
    print(module)

    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((784, 256), np.float32) * 0.05, np.zeros(256, np.float32),
               rng.standard_normal((256, 10), np.float32) * 0.05, np.zeros(10, np.float32)]
    for batch in (1, 64):
        x = rng.standard_normal((batch, 784), np.float32)
        got = ir.interpret(module, "mlp", x, *weights)
        want = numpy_mlp(x, *weights)
        err = float(np.max(np.abs(got - want)))
        print(f"== interpreter, batch {batch}: output {got.shape}, max |lezero - numpy| = {err:.2e}")
        if err > 1e-5:
            print("mismatch against numpy", file=sys.stderr)
            return 1

    compiled = lezero.compile(module, entry="mlp")
    for batch in (64, 256):
        x = rng.standard_normal((batch, 784), np.float32)
        compiled(x, *weights)  # the first call at a shape specializes and compiles it
        start = time.perf_counter()
        got = compiled(x, *weights)
        took = time.perf_counter() - start
        err = float(np.max(np.abs(got - numpy_mlp(x, *weights))))
        print(f"== compiled for the CPU, batch {batch}: {took * 1e3:.3f} ms, max |lezero - numpy| = {err:.2e}")
        if err > 1e-5:
            print("mismatch against numpy", file=sys.stderr)
            return 1
    plan = compiled.plan_for([(256, 784), (784, 256), (256,), (256, 10), (10,)])
    kernels = [op.attributes["name"].value for op in plan.func.entry_block.ops if op.name == "lz.kernel"]
    print(f"== kernels: {', '.join(kernels)}; arena {plan.func.attributes['lz.arena_size'].value} bytes")

    bad = ('func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {\n'
           '  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>\n'
           '  func.return %0 : tensor<2x3xf32>\n}\n')
    sources = ir.SourceManager()
    sources.add("bad.mlir", bad)
    try:
        ir.verify(ir.parse_module(bad, filename="bad.mlir"))
    except ir.VerifyError as e:
        print("== a mistake, as lezero reports it:")
        print(sources.render(e.diagnostic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
