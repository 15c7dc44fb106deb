"""lezero demo: what the compiler does today, end to end on the seed's MLP.

1. compile an MLIR function (examples/mlp.mlir) for the CPU and check it against numpy;
2. train the seed's SimpleMLP on scikit-learn's digits with the compiled training step
   (forward, loss, autodiff and Adam in one compiled function), trace it with ``lz.jit.trace``
   and report its test accuracy;
3. show what a user's mistake looks like: an error that points at the source;
4. export the trained model to ONNX, build it with ``lezero-compile`` into a native executable
   (no Python inside) and run it on the test images.

Run with `make demo`.
"""
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE))

import lezero  # noqa: E402
import lezero.ir as ir  # noqa: E402
import train_mlp  # noqa: E402


def numpy_mlp(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def compile_mlir() -> bool:
    path = HERE / "mlp.mlir"
    module = ir.parse_module(path.read_text(), filename=str(path))
    ir.verify(module)
    compiled = lezero.compile(module, entry="mlp")
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((784, 256), np.float32) * 0.05, np.zeros(256, np.float32),
               rng.standard_normal((256, 10), np.float32) * 0.05, np.zeros(10, np.float32)]
    for batch in (64, 256):
        x = rng.standard_normal((batch, 784), np.float32)
        compiled(x, *weights)  # the first call at a shape specializes and compiles it
        start = time.perf_counter()
        got = compiled(x, *weights)
        took = time.perf_counter() - start
        err = float(np.max(np.abs(got - numpy_mlp(x, *weights))))
        print(f"   batch {batch}: {took * 1e3:.3f} ms, max |lezero - numpy| = {err:.2e}")
        if err > 1e-5:
            print("mismatch against numpy", file=sys.stderr)
            return False
    plan = compiled.plan_for([(256, 784), (784, 256), (256,), (256, 10), (10,)])
    kernels = [op.attributes["name"].value for op in plan.func.entry_block.ops if op.name == "lz.kernel"]
    print(f"   kernels: {', '.join(kernels)}; arena {plan.func.attributes['lz.arena_size'].value} bytes")
    return True


def main() -> int:
    print(f"== 1. compile {HERE.name}/mlp.mlir (parse, verify, fuse, plan memory, LLVM) and run it")
    if not compile_mlir():
        return 1

    print("== 2. train the seed's SimpleMLP on digits with lz.jit.compile_train_step")
    result = train_mlp.train("compiled", epochs=6, progress=sys.stdout.isatty())
    steps = len(result["losses"])
    print(f"   {steps} steps in {result['seconds']:.1f} s (compilation included), loss {result['losses'][0]:.3f} -> "
          f"{np.mean(result['losses'][-10:]):.3f}")
    print(f"   traced model (lz.jit.trace), test accuracy {result['accuracy']:.2%}; its graph:")
    for line in result["traced"].graph.splitlines()[1:4]:
        print("     " + (line if len(line) < 120 else line[:117] + "..."))
    print("     ...")
    if result["accuracy"] < 0.95:
        print("accuracy below 95%", file=sys.stderr)
        return 1

    print("== 3. a mistake, as lezero reports it:")
    bad = ('func.func @f(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x3xf32> {\n'
           '  %0 = "lz.add"(%a, %b) : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>\n'
           '  func.return %0 : tensor<2x3xf32>\n}\n')
    sources = ir.SourceManager()
    sources.add("bad.mlir", bad)
    try:
        ir.verify(ir.parse_module(bad, filename="bad.mlir"))
    except ir.VerifyError as e:
        print(sources.render(e.diagnostic))

    print("== 4. export the trained model to ONNX, compile it to a native executable, run it without Python")
    if not native_executable(result["traced"]):
        return 1
    return 0


def native_executable(traced) -> bool:
    import subprocess
    import tempfile

    import digits
    import lezero.onnx

    _, _, x_test, y_test = digits.load(28)
    x_test = np.ascontiguousarray(x_test.reshape(len(x_test), 784))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        lezero.onnx.export(traced, tmp / "mlp.onnx")
        start = time.perf_counter()
        build = subprocess.run([sys.executable, "-m", "lezero.cli.compile", str(tmp / "mlp.onnx"), "-o",
                                str(tmp / "mlp"), "--shape", f"input={len(x_test)}x784"], capture_output=True, text=True)
        if build.returncode != 0:
            print(build.stderr, file=sys.stderr)
            return False
        print(f"   lezero-compile mlp.onnx -o mlp: {time.perf_counter() - start:.1f} s")
        np.save(tmp / "x.npy", x_test)
        run = subprocess.run([str(tmp / "mlp"), "--input", f"input={tmp / 'x.npy'}", "--output-dir", str(tmp)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return False
        logits = np.load(tmp / "output.npy")
    accuracy = float(np.mean(logits.argmax(axis=1) == y_test))
    print(f"   ./mlp --input input=x.npy: {len(x_test)} test images, accuracy {accuracy:.2%}")
    return accuracy >= 0.95


if __name__ == "__main__":
    sys.exit(main())
