"""DistributedDataParallel on real engines (MPI through MPICH, torch.distributed's gloo), 2 ranks
on loopback: training equals one process training on the concatenated batches, every rank holds
the same bytes after every step, comm hooks cut the bytes, unused parameters are named, a
mismatched collective fails fast naming both ranks' tensors.  One launch per backend runs every
scenario (``support/ddp_worker.py``); the single-process references are computed here."""
from __future__ import annotations

import functools
import pathlib

import numpy as np
import pytest
from support import ddp_worker as worker
from support.distributed_testing import rank_results, relative_difference, run_ranks

import lezero as lz
from lezero import nn

WORLD = 2
SCENARIOS = ["mlp", "compiled", "compiled_clip_accumulate", "bn_cnn", "hooks", "unused", "no_sync", "sampler", "mismatch", "late_rank"]


@pytest.fixture(scope="module", params=["gloo", "mpi"])
def ranks(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"ddp_{request.param}")
    done = run_ranks(worker.__file__, [str(out), *SCENARIOS], nproc=WORLD, backend=request.param, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return rank_results(out, WORLD)


def single_process(model: nn.Module, steps: list, mimic_ddp_buffers: bool = False) -> nn.Module:
    """The reference: SGD on each step's whole batch.  With ``mimic_ddp_buffers`` the forward runs
    per rank block (BatchNorm's batch statistics are per rank under DDP) and the buffers keep rank
    0's update (DDP broadcasts them from rank 0 before each forward)."""
    optimizer = lz.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for batch in steps:
        optimizer.zero_grad()
        if not mimic_ddp_buffers:
            criterion(model(lz.from_numpy(batch[0])), lz.from_numpy(batch[1])).backward()
        else:
            buffers = list(model.buffers())
            start = [b.numpy().copy() for b in buffers]
            losses, after_rank0 = [], None
            for r in range(WORLD):
                for b, s in zip(buffers, start):
                    b.data = lz.from_numpy(s.copy())
                x, y = worker.shard(batch, r)
                losses.append(criterion(model(x), y))
                after_rank0 = after_rank0 or [b.numpy().copy() for b in buffers]
            ((losses[0] + losses[1]) / WORLD).backward()
            for b, s in zip(buffers, after_rank0):
                b.data = lz.from_numpy(s)
        optimizer.step()
    return model


def assert_trained_like(results: list[dict], prefix: str, reference: nn.Module) -> None:
    """Every rank's parameters, and rank 0's buffers (the others' hold their own last update until
    the next forward broadcasts rank 0's), equal the reference's."""
    named = [(n, t, results) for n, t in reference.named_parameters()]
    named += [(n, t, results[:1]) for n, t in reference.named_buffers()]
    for name, t, checked in named:
        for r, res in enumerate(checked):
            got = res[f"{prefix}/{name}"]
            assert relative_difference(got, t.detach().numpy()) <= 1e-6, (prefix, name, r)
    assert all(np.array_equal(res[f"{prefix}/digests"], results[0][f"{prefix}/digests"]) for res in results), \
        f"{prefix}: the ranks' parameters differ after some step"


def test_mlp_trains_as_one_process_on_the_whole_batch(ranks):
    reference = single_process(worker.mlp(dtype=np.float64), worker.batches(WORLD, worker.STEPS, dtype=np.float64))
    assert_trained_like(ranks, "mlp", reference)
    for res in ranks:  # the eager backward reduced each bucket through lz.all_reduce_start / lz.all_reduce_wait
        assert list(res["mlp/eager_collectives"]) == [
            "all_reduce_start bucket 0 [fc2.bias, fc2.weight, fc1.bias]", "all_reduce_start bucket 1 [fc1.weight]",
            "all_reduce_wait", "all_reduce_wait"], res["mlp/eager_collectives"]


def test_compiled_step_trains_as_one_process(ranks):
    reference = single_process(worker.mlp(dtype=np.float64), worker.batches(WORLD, worker.STEPS, dtype=np.float64))
    assert_trained_like(ranks, "compiled", reference)


@functools.cache
def clipped_accumulating_reference() -> nn.Module:
    """One process's compiled step with the same clipping and accumulation (computed once for both backends)."""
    reference = worker.mlp(dtype=np.float64)
    step, data = worker.clipped_accumulating_step(
        reference, worker.batches(WORLD, 2 * worker.ACCUMULATED_UPDATES, dtype=np.float64), None)
    for batch in data:
        step(*batch)
    return reference


def test_compiled_step_clips_and_accumulates_as_one_process(ranks):
    """Clipping and accumulation act on the averaged gradients inside the compiled DDP step."""
    assert_trained_like(ranks, "compiled_clip_accumulate", clipped_accumulating_reference())


def test_compiled_step_all_reduces_while_later_backward_kernels_run(ranks):
    """The timestamps of the compiled step: a bucket's all-reduce (on the communication thread)
    overlaps a backward kernel.  The two cores are shared, so not every step shows it; some must."""
    for res in ranks:
        # the MLP at bucket_cap_mb=0.5: fc1.weight, the rest (started as the schedule computes their last gradients)
        assert sorted(" ".join(b.split()[:2]) for b in res["compiled/buckets"] if b.startswith("all_reduce bucket")) == \
            ["all_reduce bucket0", "all_reduce bucket1"]
        assert res["compiled/overlapped"].any(), "no step's all-reduce ran while a kernel of its backward ran"


def test_batchnorm_cnn_broadcasts_buffers_from_rank0(ranks):
    reference = single_process(worker.bn_cnn(), worker.batches(WORLD, 10, image=True, dtype=np.float64),
                               mimic_ddp_buffers=True)
    assert_trained_like(ranks, "bn_cnn", reference)


def test_compression_hooks_cut_the_bytes(ranks):
    sent = {h: ranks[0][f"hooks/{h}/bytes"][worker.POWER_SGD_START + 1:].mean()
            for h in ("allreduce", "fp16", "bf16", "powersgd", "topk")}
    parameter_bytes = sum(p.numel() * 4 for p in worker.mlp().parameters())
    assert sent["allreduce"] == parameter_bytes
    assert sent["fp16"] == sent["bf16"] == parameter_bytes // 2
    assert sent["powersgd"] <= 0.4 * parameter_bytes and sent["topk"] <= 0.4 * parameter_bytes, sent
    for hook in ("fp16", "bf16", "powersgd", "topk"):  # every rank applies the same averaged update
        assert np.array_equal(ranks[0][f"hooks/{hook}/digests"], ranks[1][f"hooks/{hook}/digests"]), hook
    # fp16 follows the exact run closely; the lossy ones still train (their loss is not checked here)
    exact, fp16 = ranks[0]["hooks/allreduce/fc1.weight"], ranks[0]["hooks/fp16/fc1.weight"]
    assert relative_difference(fp16, exact) < 1e-2


def test_unused_parameters_are_named_or_found(ranks):
    for res in ranks:
        message = str(res["unused/error"])
        assert "Expected to have finished reduction" in message and "unused.weight" in message \
            and "unused.bias" in message and "fc1.weight" not in message, message
    assert np.array_equal(ranks[0]["unused/fc1_grad"], ranks[1]["unused/fc1_grad"])


def test_no_sync_accumulates_locally_then_reduces_the_sum(ranks):
    assert all(int(res["no_sync/bytes"]) == 0 for res in ranks)
    model = worker.mlp()
    first, second = worker.batches(WORLD, 2)
    criterion = nn.CrossEntropyLoss()
    for batch in (first, second):  # each rank's two mean losses summed, averaged over the ranks
        for r in range(WORLD):
            x, y = worker.shard(batch, r)
            (criterion(model(x), y) / WORLD).backward()
    for res in ranks:
        assert relative_difference(res["no_sync/grad"], model.fc1.weight.grad.numpy()) <= 1e-6


def test_distributed_sampler_splits_one_order(ranks):
    a, b = (res["sampler/indices"] for res in ranks)
    assert len(a) == len(b) == 6
    assert sorted(set(a) | set(b)) == list(range(11))  # 12 slots: one index repeated as padding


def test_a_mismatched_collective_fails_fast_naming_both_ranks(ranks):
    for res in ranks:
        message = str(res["mismatch/error"])
        assert "rank 0: all_reduce rank0_grad" in message and "[3]" in message, message
        assert "rank 1: all_reduce rank1_grad" in message and "[4]" in message, message
        assert float(res["mismatch/seconds"]) < 5


def test_a_late_rank_times_the_wait_out_with_a_message(ranks):
    message = str(ranks[0]["late_rank/error"])
    assert "rank 0: all_reduce late" in message and "did not complete within 1 s" in message, message


@pytest.mark.slow
def test_four_mpi_ranks_train_as_one_process(tmp_path):
    done = run_ranks(worker.__file__, [str(tmp_path), "mlp"], nproc=4, backend="mpi", timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    reference = single_process(worker.mlp(dtype=np.float64), worker.batches(4, worker.STEPS, dtype=np.float64))
    assert_trained_like(rank_results(tmp_path, 4), "mlp", reference)


@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_a_failing_rank_fails_the_job(tmp_path, backend):
    """Rank 1 exits with 4 while rank 0 waits in a barrier: the job ends with 4 at once (mpi4py's
    runner aborts the MPI job; lezero-run stops the gloo ranks), not at the barrier's timeout."""
    script = pathlib.Path(tmp_path, "fails.py")
    script.write_text("import lezero.distributed as dist, sys\ndist.init_process_group(timeout=20)\n"
                      "sys.exit(4) if dist.get_rank() == 1 else dist.barrier()\n")
    done = run_ranks(str(script), [], nproc=2, backend=backend, timeout=60)
    assert done.returncode == 4 and "rank 1" in done.stderr and "did not complete" not in done.stderr
