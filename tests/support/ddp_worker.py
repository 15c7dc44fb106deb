"""One rank of the DDP tests (started by lezero-run from ``test_ddp.py``): runs the scenarios named
on the command line and writes what the test compares to ``OUT/rank<r>.npz`` (parameters after
training, per-step digests of every parameter's bytes, byte counts, error messages).

The models and data are built here and by the test's single-process reference from the same
functions (``mlp``, ``bn_cnn``, ``batches``), so both start from rank 0's initial weights.
"""
from __future__ import annotations

import hashlib
import sys
import time

import numpy as np

import lezero as lz
import lezero.distributed as dist
from lezero import nn
from lezero.eager import dispatch

STEPS = 50
PER_RANK_BATCH = 8
HOOK_STEPS = 14
ACCUMULATED_UPDATES = 6
POWER_SGD_START = 2


class MLP(nn.Module):
    """The seed's SimpleMLP (784 -> 256 -> 10)."""

    def __init__(self, unused: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)
        if unused:
            self.unused = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


def mlp(seed: int = 0, unused: bool = False, dtype=np.float32) -> MLP:
    lz.manual_seed(seed)
    return MLP(unused).to(lz.float64 if dtype == np.float64 else lz.float32)


def bn_cnn(seed: int = 0) -> nn.Module:
    lz.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 10)).to(lz.float64)


def batches(world: int, steps: int, image: bool = False, dtype=np.float32) -> list:
    """Each step's whole batch (``world`` x ``PER_RANK_BATCH`` rows); rank r trains on its r-th block.
    The equality tests train in float64: float32's rounding, summed in another order over 50
    momentum steps, drifts by ~1e-6 relative by itself."""
    rng = np.random.default_rng(1)
    shape = (1, 6, 6) if image else (784,)
    return [(rng.standard_normal((world * PER_RANK_BATCH, *shape)).astype(dtype),
             rng.integers(0, 10, world * PER_RANK_BATCH)) for _ in range(steps)]


def shard(batch, rank: int):
    x, y = batch
    rows = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
    return lz.from_numpy(np.ascontiguousarray(x[rows])), lz.from_numpy(np.ascontiguousarray(y[rows]))


def digest(module: nn.Module) -> bytes:
    """Of the parameters (buffers differ between ranks until the next forward broadcasts rank 0's)."""
    h = hashlib.sha256()
    for t in module.parameters():
        h.update(np.ascontiguousarray(t.detach().numpy()).tobytes())
    return h.digest()


def train(model, steps: list, rank: int, compiled: bool = False, hook=None, bytes_per_step: list | None = None,
          trace: dict | None = None):
    """DDP-train ``model``; the digest of its parameters after every step (and into ``trace`` the
    compiled step's last timestamps)."""
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5)
    if hook is not None:
        ddp.register_comm_hook(*hook)
    optimizer = lz.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    step = None
    if compiled:
        x0, y0 = shard(steps[0], rank)
        step = lz.jit.compile_train_step(ddp, criterion, optimizer, x0, y0)
        step.record_trace = trace is not None
    digests = []
    for batch in steps:
        x, y = shard(batch, rank)
        before = dist.bytes_sent()
        if step is not None:
            step(x, y)
        else:
            optimizer.zero_grad()
            criterion(ddp(x), y).backward()
            optimizer.step()
        if bytes_per_step is not None:
            bytes_per_step.append(dist.bytes_sent() - before)
        digests.append(digest(model))
        if trace is not None:
            trace.setdefault("overlapped", []).append(overlapped(step.last_trace))
            trace.update(step.last_trace)
    return digests


def clipped_accumulating_step(model, steps: list, rank: int | None):
    """``compile_train_step`` of ``model`` with the norm clipped to 0.5 and 2 micro-batches per
    update (their mean loss), and its calls' data: rank ``rank``'s blocks (None: the whole batches)."""
    data = [shard(b, rank) if rank is not None else (lz.from_numpy(b[0]), lz.from_numpy(b[1])) for b in steps]
    criterion = nn.CrossEntropyLoss()
    optimizer = lz.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = lz.jit.compile_train_step(model, lambda out, y: criterion(out, y) / 2, optimizer, *data[0],
                                     clip_grad_norm=0.5, accumulate=2)
    return step, data


def overlapped(trace: dict) -> bool:
    """Whether a bucket's all-reduce ran while some kernel of the step did."""
    buckets = [(start, end) for name, start, end in trace["all_reduce"] if name.startswith("all_reduce bucket")]
    return any(s < b_end and e > b_start for b_start, b_end in buckets for _, s, e in trace["kernels"])


def state_arrays(prefix: str, module: nn.Module) -> dict:
    named = list(module.named_parameters()) + list(module.named_buffers())
    return {f"{prefix}/{n}": t.detach().numpy().copy() for n, t in named}


def main(out: str, scenarios: list[str]) -> None:
    dist.init_process_group(timeout=30)
    rank, world = dist.get_rank(), dist.get_world_size()
    results: dict = {}
    if "mlp" in scenarios:
        model = mlp(seed=rank, dtype=np.float64)  # each rank starts elsewhere: DDP broadcasts rank 0's weights
        results["mlp/digests"] = np.frombuffer(b"".join(train(model, batches(world, STEPS, dtype=np.float64), rank)),
                                               np.uint8)
        results.update(state_arrays("mlp", model))
        # the eager buckets went through the collective IR ops: the eager op cache compiled them
        results["mlp/eager_collectives"] = np.array(sorted(
            f"{key[0].name} {dict(key[1]).get('tag', '')}".strip() for key in dispatch.RUNNERS
            if key[0].name in ("all_reduce_start", "all_reduce_wait")))
    if "compiled" in scenarios:
        model = mlp(seed=rank, dtype=np.float64)
        trace: dict = {}
        results["compiled/digests"] = np.frombuffer(
            b"".join(train(model, batches(world, STEPS, dtype=np.float64), rank, compiled=True, trace=trace)), np.uint8)
        results["compiled/overlapped"] = np.array(trace["overlapped"])
        results["compiled/buckets"] = np.array([name for name, _, _ in trace["all_reduce"]])
        results.update(state_arrays("compiled", model))
    if "compiled_clip_accumulate" in scenarios:  # clipping and accumulation inside the compiled DDP step
        model = mlp(seed=rank, dtype=np.float64)
        step, steps = clipped_accumulating_step(nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5),
                                                batches(world, 2 * ACCUMULATED_UPDATES, dtype=np.float64), rank)
        digests = []
        for batch in steps:
            step(*batch)
            digests.append(digest(model))
        results["compiled_clip_accumulate/digests"] = np.frombuffer(b"".join(digests), np.uint8)
        results.update(state_arrays("compiled_clip_accumulate", model))
    if "bn_cnn" in scenarios:
        model = bn_cnn(seed=rank)
        steps = batches(world, 10, image=True, dtype=np.float64)
        results["bn_cnn/digests"] = np.frombuffer(b"".join(train(model, steps, rank)), np.uint8)
        results.update(state_arrays("bn_cnn", model))
    if "hooks" in scenarios:
        hooks = {"allreduce": None, "fp16": (None, nn.parallel.comm_hooks.fp16_compress_hook),
                 "bf16": (None, nn.parallel.comm_hooks.bf16_compress_hook),
                 "powersgd": (nn.parallel.comm_hooks.PowerSGDState(matrix_approximation_rank=2,
                                                                   start_powerSGD_iter=POWER_SGD_START),
                              nn.parallel.comm_hooks.powerSGD_hook),
                 "topk": (nn.parallel.comm_hooks.TopKState(ratio=0.01), nn.parallel.comm_hooks.topk_hook)}
        for name, hook in hooks.items():
            sent: list = []
            model = mlp()
            results[f"hooks/{name}/digests"] = np.frombuffer(
                b"".join(train(model, batches(world, HOOK_STEPS), rank, hook=hook, bytes_per_step=sent)), np.uint8)
            results[f"hooks/{name}/bytes"] = np.array(sent)
            results.update(state_arrays(f"hooks/{name}", model))
    if "unused" in scenarios:
        x, y = shard(batches(world, 1)[0], rank)
        ddp = nn.parallel.DistributedDataParallel(mlp(unused=True))
        nn.CrossEntropyLoss()(ddp(x), y).backward()
        try:
            ddp(x)
            results["unused/error"] = np.array("no error")
        except RuntimeError as e:
            results["unused/error"] = np.array(str(e))
        found = nn.parallel.DistributedDataParallel(mlp(unused=True), find_unused_parameters=True)
        for _ in range(2):
            nn.CrossEntropyLoss()(found(x), y).backward()
        results["unused/fc1_grad"] = found.module.fc1.weight.grad.numpy().copy()
    if "no_sync" in scenarios:
        model = mlp()
        ddp = nn.parallel.DistributedDataParallel(model)
        first, second = batches(world, 2)
        with ddp.no_sync():
            before = dist.bytes_sent()
            nn.CrossEntropyLoss()(ddp(shard(first, rank)[0]), shard(first, rank)[1]).backward()
            results["no_sync/bytes"] = np.array(dist.bytes_sent() - before)
        nn.CrossEntropyLoss()(ddp(shard(second, rank)[0]), shard(second, rank)[1]).backward()
        results["no_sync/grad"] = model.fc1.weight.grad.numpy().copy()
    if "sampler" in scenarios:
        sampler = lz.utils.data.DistributedSampler(list(range(11)), shuffle=True, seed=3)
        sampler.set_epoch(2)
        results["sampler/indices"] = np.array(list(sampler))
    if "mismatch" in scenarios:
        started = time.perf_counter()
        try:
            dist.all_reduce(lz.ones(3 + rank), name=f"rank{rank}_grad")
            results["mismatch/error"] = np.array("no error")
        except dist.CollectiveMismatchError as e:
            results["mismatch/error"] = np.array(str(e))
        results["mismatch/seconds"] = np.array(time.perf_counter() - started)
    if "late_rank" in scenarios:  # rank 1 reaches the all-reduce 4 s late: rank 0's 1 s wait says so
        work = dist.all_reduce(lz.ones(2), name="late", async_op=True) if rank == 0 else None
        if rank == 0:
            try:
                work.wait(timeout=1)
                results["late_rank/error"] = np.array("no error")
            except dist.DistributedTimeoutError as e:
                results["late_rank/error"] = np.array(str(e))
            work.wait()  # it completes once rank 1 arrives
        else:
            time.sleep(4)
            dist.all_reduce(lz.ones(2), name="late")
    np.savez(f"{out}/rank{rank}.npz", **results)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
