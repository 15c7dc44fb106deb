"""Data-parallel training of the seed's SimpleMLP (784-256-10, SGD, batch 64 per rank) on 1, 2 and
4 ranks of this machine (loopback, torch.distributed's gloo under both): the step time and the
bytes each rank sends per step for lezero's DDP with each comm hook, against PyTorch's DDP with the
same hook where torch has one (fp16, PowerSGD), measured in the same processes, steps alternating;
then the ring all-reduce model's predicted scaling for ResNet-50 on 8 GPUs at 100 Gbit/s.

Run it as

    LEZERO_NUM_THREADS=1 .venv/bin/python benchmarks/distributed.py [--steps 40] [--ranks 1 2 4]

What is measured and what is modelled:
- measured: step times (median over the steps, rank 0's clock; lezero and torch steps alternate in
  the same rank processes, so load hits both alike) and the bytes each lezero rank hands to its
  collectives per step (``lz.distributed.bytes_sent``; torch has no such counter); ResNet-50's
  gradient bytes are counted from its structure (``resnet50_parameters``);
- modelled: ResNet-50's 8-GPU scaling, from the ring all-reduce cost 2 (p-1)/p x bytes / bandwidth
  + 2 (p-1) x latency per step, with a per-GPU step time given by ``--gpu-step-ms`` (an assumed
  V100-class figure, batch 32: not measured here, there is no GPU), without and with the backward
  pass (2/3 of the step) hiding the communication, for each hook's measured byte ratio.
The ranks share this machine's 2 cores, so more ranks here do not go faster: the step times show
the communication's cost and the hooks' compute, not a speedup.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cpu_model

# "compiled": lz.jit.compile_train_step of the DDP model (the all-reduce buckets are IR ops inside the
# step, overlapping its backward kernels), against torch's eager DDP
HOOKS = ("allreduce", "compiled", "fp16", "powersgd", "topk")


def lz_step(ddp, optimizer, x, y) -> None:
    from lezero import nn

    optimizer.zero_grad()
    nn.CrossEntropyLoss()(ddp(x), y).backward()
    optimizer.step()


def torch_step(ddp, optimizer, x, y) -> None:
    import torch

    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(ddp(x), y).backward()
    optimizer.step()


def worker(steps: int) -> None:
    """One rank: for each hook, lezero's and torch's DDP steps alternating; rank 0 prints a row each."""
    import numpy as np
    import torch
    import torch.distributed as tdist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    import lezero as lz
    import lezero.distributed as dist
    from lezero import nn
    from lezero.nn.parallel import comm_hooks

    torch.set_num_threads(1)
    dist.init_process_group(backend="gloo")  # torch's default group: torch's DDP runs on it too
    rank, world = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    for hook in HOOKS:
        lz.manual_seed(0)
        lz_model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        ddp = nn.parallel.DistributedDataParallel(lz_model)
        torch_model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        tddp = torch.nn.parallel.DistributedDataParallel(torch_model)
        torch_hook = None
        if hook == "fp16":
            ddp.register_comm_hook(None, comm_hooks.fp16_compress_hook)
            torch_hook = (None, default_hooks.fp16_compress_hook)
        elif hook == "powersgd":
            ddp.register_comm_hook(comm_hooks.PowerSGDState(matrix_approximation_rank=2, start_powerSGD_iter=2),
                                   comm_hooks.powerSGD_hook)
            torch_hook = (powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=2),
                          powerSGD_hook.powerSGD_hook)
        elif hook == "topk":
            ddp.register_comm_hook(comm_hooks.TopKState(ratio=0.01), comm_hooks.topk_hook)
        if torch_hook is not None:
            tddp.register_comm_hook(*torch_hook)
        lz_opt = lz.optim.SGD(ddp.parameters(), lr=0.01)
        torch_opt = torch.optim.SGD(tddp.parameters(), lr=0.01)
        lz_x, lz_y, t_x, t_y = lz.from_numpy(x), lz.from_numpy(y), torch.from_numpy(x), torch.from_numpy(y)
        run_lz = lz_step
        if hook == "compiled":
            compiled = lz.jit.compile_train_step(ddp, nn.CrossEntropyLoss(), lz_opt, lz_x, lz_y)
            run_lz = lambda _ddp, _opt, data, target, step=compiled: step(data, target)
        lz_times, torch_times, sent = [], [], []

        for i in range(steps + 5):  # 5 warm-up steps (compiles; PowerSGD starts compressing at step 3)
            dist.barrier()
            before, start = dist.bytes_sent(), time.perf_counter()
            run_lz(ddp, lz_opt, lz_x, lz_y)
            lz_time = time.perf_counter() - start
            step_bytes = dist.bytes_sent() - before
            tdist.barrier()
            start = time.perf_counter()
            torch_step(tddp, torch_opt, t_x, t_y)
            if i >= 5:
                lz_times.append(lz_time)
                torch_times.append(time.perf_counter() - start)
                sent.append(step_bytes)
        if rank == 0:
            lz_ms, torch_ms = 1e3 * float(np.median(lz_times)), 1e3 * float(np.median(torch_times))
            peer = f"{torch_ms:8.2f} ms  {lz_ms / torch_ms:5.2f}x" if torch_hook is not None or hook in ("allreduce", "compiled") \
                else "       (torch has no top-k hook)"
            print(f"ROW {world} {hook:9s} {lz_ms:8.2f} ms {int(np.median(sent)):10d} B/step   torch DDP {peer}",
                  flush=True)
    dist.destroy_process_group()


def resnet50_parameters() -> int:
    """torchvision's ResNet-50, counted from its structure (25,557,032): a 7x7 stem, bottleneck blocks
    [3, 4, 6, 3] of widths 64..512 (1x1, 3x3, 1x1 convolutions, each with BatchNorm's scale and
    shift; a 1x1 projection on each stage's first block), and the 2048 x 1000 classifier."""
    count, channels = 7 * 7 * 3 * 64 + 2 * 64, 64
    for blocks, width in zip((3, 4, 6, 3), (64, 128, 256, 512)):
        for b in range(blocks):
            count += channels * width + 9 * width * width + width * 4 * width + 2 * (width + width + 4 * width)
            if b == 0:
                count += channels * 4 * width + 2 * 4 * width
            channels = 4 * width
    return count + 2048 * 1000 + 1000


def digits_worker(epochs: int) -> None:
    """One rank of the accuracy check: the seed's MLP trained on scikit-learn's digits (28x28) with
    DistributedSampler and each hook; rank 0 prints the test accuracy."""
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    import digits

    import lezero as lz
    import lezero.distributed as dist
    from lezero import nn
    from lezero.nn.parallel import comm_hooks

    dist.init_process_group(backend="gloo")
    x_train, y_train, x_test, y_test = digits.load(28)
    x_train = x_train.reshape(len(x_train), 784).astype(np.float32)
    x_test = lz.from_numpy(np.ascontiguousarray(x_test.reshape(len(x_test), 784).astype(np.float32)))
    hooks = {"allreduce": None, "fp16": (None, comm_hooks.fp16_compress_hook),
             "powersgd": (comm_hooks.PowerSGDState(matrix_approximation_rank=2, start_powerSGD_iter=50),
                          comm_hooks.powerSGD_hook),
             "topk": (comm_hooks.TopKState(ratio=0.01), comm_hooks.topk_hook)}
    for name, hook in hooks.items():
        lz.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
        if hook is not None:
            ddp.register_comm_hook(*hook)
        optimizer = lz.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        sampler = lz.utils.data.DistributedSampler(list(range(len(x_train))), seed=0, drop_last=True)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            order = np.array(list(sampler))
            for start in range(0, len(order) - 31, 32):
                rows = order[start:start + 32]
                optimizer.zero_grad()
                nn.CrossEntropyLoss()(ddp(lz.from_numpy(x_train[rows])), lz.from_numpy(y_train[rows])).backward()
                optimizer.step()
        if dist.get_rank() == 0:
            with lz.no_grad():
                predicted = ddp(x_test).argmax(1).numpy()
            print(f"ACC {name} {float((predicted == y_test).mean()):.4f}", flush=True)
    dist.destroy_process_group()


def ring_allreduce_seconds(nbytes: float, ranks: int, bandwidth_bytes_s: float, latency_s: float) -> float:
    """The standard ring all-reduce: reduce-scatter then all-gather, 2 (p-1) steps of bytes/p each."""
    return 2 * (ranks - 1) / ranks * nbytes / bandwidth_bytes_s + 2 * (ranks - 1) * latency_s


def ring_allgather_seconds(nbytes_per_rank: float, ranks: int, bandwidth_bytes_s: float, latency_s: float) -> float:
    """A ring all-gather: p - 1 steps, each passing one rank's ``nbytes_per_rank`` on."""
    return (ranks - 1) * nbytes_per_rank / bandwidth_bytes_s + (ranks - 1) * latency_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--gpu-step-ms", type=float, default=89.0,
                        help="ResNet-50 per-GPU step time at batch 32 (ASSUMED, a V100's ~360 images/s; not measured)")
    parser.add_argument("--gbit", type=float, default=100.0, help="link bandwidth, Gbit/s")
    parser.add_argument("--latency-us", type=float, default=10.0, help="per-message latency, microseconds")
    parser.add_argument("--digits-epochs", type=int, default=30, help="epochs of the accuracy check (0: skip it)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--digits-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps)
        return
    if args.digits_worker:
        digits_worker(args.digits_epochs)
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores (shared); LEZERO_NUM_THREADS=1 per rank")
    print("ranks hook        lezero step  bytes/rank/step   torch DDP step  lezero/torch")
    rows = {}
    for ranks in args.ranks:
        done = subprocess.run([sys.executable, "-m", "lezero.cli.run", "--nproc-per-node", str(ranks), __file__,
                               "--worker", "--steps", str(args.steps)], capture_output=True, text=True,
                              env=dict(os.environ, LEZERO_NUM_THREADS="1"), timeout=1800, check=False)
        if done.returncode != 0:
            sys.exit(f"{ranks} ranks failed:\n{done.stderr[-3000:]}")
        for line in done.stdout.splitlines():
            if line.startswith("ROW "):
                print("  " + line[4:])
                _, world, hook, _, _, sent = line.split()[:6]
                rows[(int(world), hook)] = int(sent)
    resnet_bytes = resnet50_parameters() * 4
    print(f"\nmodel: ResNet-50 ({resnet_bytes / 1e6:.1f} MB of float32 gradients, counted), 8 GPUs, ring all-reduce at "
          f"{args.gbit:g} Gbit/s, {args.latency_us:g} us latency, {args.gpu_step_ms:g} ms per GPU step (assumed)")
    world = max(r for r, _ in rows) if rows else 2
    for hook in HOOKS:
        if (world, hook) not in rows or world == 1 or hook == "compiled":  # compiled: allreduce's bytes
            continue
        ratio = rows[(world, hook)] / rows[(world, "allreduce")]
        bandwidth, latency = args.gbit * 1e9 / 8, args.latency_us * 1e-6
        if hook == "topk":  # an all-gather: each rank receives the other 7 ranks' indices and values
            comm = ring_allgather_seconds(resnet_bytes * ratio, 8, bandwidth, latency)
        else:
            comm = ring_allreduce_seconds(resnet_bytes * ratio, 8, bandwidth, latency)
        compute = args.gpu_step_ms * 1e-3
        serial = 8 * compute / (compute + comm)
        hidden = 8 * compute / (compute + max(0.0, comm - 2 / 3 * compute))
        print(f"  {hook:9s} bytes x{ratio:5.3f} (the MLP's, measured on {world} ranks): communication {comm * 1e3:6.2f} ms/step, "
              f"speedup {serial:4.2f}x without overlap, {hidden:4.2f}x with the backward hiding it (modelled)")

    if args.digits_epochs:
        done = subprocess.run([sys.executable, "-m", "lezero.cli.run", "--nproc-per-node", "2", __file__,
                               "--digits-worker", "--digits-epochs", str(args.digits_epochs)], capture_output=True,
                              text=True, env=dict(os.environ, LEZERO_NUM_THREADS="1"), timeout=1800, check=False)
        if done.returncode != 0:
            sys.exit(f"the digits run failed:\n{done.stderr[-3000:]}")
        accuracy = dict(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("ACC "))
        print(f"\ndigits, 2 ranks, {args.digits_epochs} epochs, SGD 0.1 momentum 0.9 (measured): test accuracy "
              + ", ".join(f"{h} {float(a):.4f} ({100 * (float(a) - float(accuracy['allreduce'])):+.1f} points)"
                          for h, a in accuracy.items()))


if __name__ == "__main__":
    main()
