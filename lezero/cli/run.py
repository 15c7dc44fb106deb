"""lezero-run: start the ranks of a distributed training script on this machine, as torchrun does.

    lezero-run --nproc-per-node 2 train.py args...                 (torch.distributed's gloo)
    lezero-run --nproc-per-node 4 --backend mpi train.py args...   (through the MPICH wheel's mpiexec)
    lezero-run --nproc-per-node 2 --max-restarts 3 train.py        (restart every rank when one fails)
    lezero-run --nnodes 2 --node-rank K --master-addr HOST0 --master-port 29500 --nproc-per-node 4 train.py
                                                                   (on each of 2 machines, torchrun's static form)
    lezero-run --backend mpi --hosts a,b --nproc-per-node 4 train.py   (8 ranks over MPICH's hydra, ssh to a and b)

Each rank is ``python script args`` with the environment torchrun sets: ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node's rank: ``RANK`` is ``GROUP_RANK *
nproc-per-node + LOCAL_RANK``), ``MASTER_ADDR``, ``MASTER_PORT``, and
``LEZERO_BACKEND`` (what ``lz.distributed.init_process_group()`` reads when no backend is given),
plus the elastic agent's restart count, ``LEZERO_RESTART_COUNT`` and ``TORCHELASTIC_RESTART_COUNT``
(0 on the first start), and ``LEZERO_MAX_RESTARTS`` / ``TORCHELASTIC_MAX_RESTARTS``.  With
``--backend mpi`` the ranks are started by ``mpiexec`` (MPICH's Hydra), which gives each its rank
through MPI, and runs it under ``python -m mpi4py`` (a rank's uncaught exception or non-zero
``sys.exit`` aborts the whole MPI job with its status); the same variables are set for every rank too (``RANK`` from MPICH's ``PMI_RANK`` at
``init_process_group``).

When one rank fails, the others are stopped (SIGTERM, then SIGKILL after ``--stop-timeout``
seconds); with restarts left, every rank starts again (a fresh ``MASTER_PORT`` unless it was
given), else lezero-run exits with the first failing rank's exit status (128 + N for a signal N)
after printing which rank failed and the last lines of its stderr.  SIGINT, SIGTERM and SIGHUP are
forwarded to every rank, and lezero-run then exits 128 + the signal, without restarting.

``--heartbeat-timeout T`` (issue 15) also treats a rank that hangs as failed: each rank gets a file
of its own, ``LEZERO_HEARTBEAT_FILE``, that ``lezero.runtime.heartbeat.beat()`` touches at most
once a second from every training step (``compile_train_step``'s step, ``DataLoader`` batches,
``Optimizer.step``, ``CheckpointManager.save``); a rank whose file is older than T seconds is
stopped with the others and the job restarts like after a death.  It is off by default: the first
step compiles for as long as the model needs (minutes for a large one) and a script may loop
without lezero's loaders and optimizers, so any fixed default would kill healthy runs.  Every
restart is logged on stderr as ``lezero-run: restart K of N: rank R <cause>``, the cause being
``exited with status S``, ``killed by signal SIGKILL`` or ``sent no heartbeat for T s``.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

PROG = "lezero-run"
STDERR_TAIL_LINES = 20
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UsageError(Exception):
    """A bad command line; the message says what to do."""


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Start the ranks of a distributed lezero script "
                                "(torchrun's form).")
    p.add_argument("--nproc-per-node", "--nproc_per_node", "--nproc", dest="nproc", type=int, default=1,
                   help="ranks to start on this machine (default 1)")
    p.add_argument("--nnodes", type=int, default=1,
                   help="machines in the job (torch backends: run lezero-run on each, with its --node-rank and the "
                   "same --master-addr/--master-port)")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0)
    p.add_argument("--hosts", default=None,
                   help="--backend mpi: comma-separated machines for mpiexec (its -hosts), nproc-per-node ranks each")
    p.add_argument("--backend", choices=("gloo", "mpi", "nccl"), default="gloo",
                   help="the process group's engine: torch.distributed's gloo (default) or nccl, or MPI (mpiexec)")
    p.add_argument("--max-restarts", "--max_restarts", dest="max_restarts", type=int, default=0,
                   help="restart every rank up to N times when one fails (torchrun's elastic agent)")
    p.add_argument("--master-addr", "--master_addr", dest="master_addr", default="127.0.0.1")
    p.add_argument("--master-port", "--master_port", dest="master_port", type=int, default=None,
                   help="the rendezvous port (default: a free port, a new one for each restart)")
    p.add_argument("--stop-timeout", type=float, default=5.0,
                   help="seconds between SIGTERM and SIGKILL when stopping the ranks (default 5)")
    p.add_argument("--heartbeat-timeout", type=float, default=None, metavar="SECONDS",
                   help="treat a rank whose heartbeat (lezero.runtime.heartbeat.beat, called every training step) "
                   "is older than SECONDS as hung: stop every rank and restart (default: off)")
    p.add_argument("script", help="the Python script every rank runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def rank_environment(args, rank: int, port: int, restart: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(RANK=str(args.node_rank * args.nproc + rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(args.nnodes * args.nproc), LOCAL_WORLD_SIZE=str(args.nproc),
               GROUP_RANK=str(args.node_rank), MASTER_ADDR=args.master_addr, MASTER_PORT=str(port), LEZERO_BACKEND=args.backend,
               LEZERO_RESTART_COUNT=str(restart), TORCHELASTIC_RESTART_COUNT=str(restart),
               LEZERO_MAX_RESTARTS=str(args.max_restarts), TORCHELASTIC_MAX_RESTARTS=str(args.max_restarts))
    return env


class Rank:
    """One started process (a rank, or mpiexec holding all of them) whose stderr is passed through
    to ours while its last lines are kept for the failure report."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], heartbeat_file: str | None = None):
        self.name = name
        self.heartbeat_file = heartbeat_file  # created now: its age counts from the start
        if heartbeat_file is not None:
            open(heartbeat_file, "w").close()
            os.utime(heartbeat_file)  # a restart reuses the file: its age counts from this start
            env = {**env, "LEZERO_HEARTBEAT_FILE": heartbeat_file}
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        # its own session: stopping it reaches the processes it starts (mpiexec's ranks, workers)
        self.process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, start_new_session=True)
        self.reader = threading.Thread(target=self._pass_stderr, daemon=True)
        self.reader.start()

    def _pass_stderr(self) -> None:
        for raw in iter(self.process.stderr.readline, b""):
            sys.stderr.buffer.write(raw)
            sys.stderr.buffer.flush()
            self.tail.append(raw.decode(errors="replace").rstrip("\n"))

    def read_to_end(self, timeout: float = 5.0) -> None:
        """Wait (a bounded time) until its stderr is read to the end: a line a rank wrote just before it
        died may still be in the pipe when its exit is seen, and the report must show it."""
        self.reader.join(timeout)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    @property
    def exit_status(self) -> int | None:
        """The shell's view: the exit code, or 128 + N when signal N ended it (None while running)."""
        code = self.process.poll()
        return None if code is None else (128 - code if code < 0 else code)

    def silent_for(self) -> float:
        """Seconds since its last heartbeat (0 without --heartbeat-timeout)."""
        if self.heartbeat_file is None:
            return 0.0
        try:
            return time.time() - os.stat(self.heartbeat_file).st_mtime
        except FileNotFoundError:
            return 0.0

    def death_cause(self) -> str:
        code = self.process.poll()
        return f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"


def start_ranks(args, restart: int, heartbeat_dir: str | None) -> list[Rank]:
    if args.nnodes > 1 and args.master_port is None:
        raise UsageError("--nnodes > 1 needs --master-port (and --master-addr): every node must meet at the same one")
    port = args.master_port or free_port(args.master_addr)
    command = [sys.executable, args.script, *args.script_args]
    if args.backend != "mpi":
        return [Rank(f"rank {r}", command, rank_environment(args, r, port, restart),
                     None if heartbeat_dir is None else os.path.join(heartbeat_dir, f"rank{r}"))
                for r in range(args.nproc)]
    if heartbeat_dir is not None:
        raise UsageError("--heartbeat-timeout needs the torch backends (gloo, nccl): mpiexec starts the MPI ranks, "
                         "and one file for all of them would not say which one hangs")
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if mpiexec is None:
        raise UsageError("--backend mpi needs MPICH's mpiexec (pip install mpich) next to the Python that runs "
                         f"{PROG} or on PATH")
    env = rank_environment(args, 0, port, restart)
    for per_rank in ("RANK", "LOCAL_RANK"):  # each rank's own comes from MPI (PMI_RANK)
        env.pop(per_rank)
    hosts = [] if args.hosts is None else [h for h in args.hosts.split(",") if h]
    placement = ["-hosts", ",".join(hosts), "-ppn", str(args.nproc)] if hosts else []
    env["WORLD_SIZE"] = str(args.nproc * max(len(hosts), 1))
    # mpi4py's runner: a rank's uncaught exception or sys.exit(N) aborts the whole job with its status
    # (a plain script would wait in MPI_Finalize for ranks still inside a collective)
    command = [sys.executable, "-m", "mpi4py", args.script, *args.script_args]
    return [Rank("mpiexec", [mpiexec, "-n", env["WORLD_SIZE"], *placement, *command], env)]


def stop(ranks: list[Rank], timeout: float) -> None:
    for r in ranks:
        if r.exit_status is None:
            r.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for r in ranks:
        try:
            r.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.signal(signal.SIGKILL)
            r.process.wait()
    for r in ranks:
        r.reader.join(timeout=1.0)


def supervise(ranks: list[Rank], received: list[int], timeout: float,
              heartbeat_timeout: float | None) -> tuple[Rank, str] | None:
    """Wait until every rank succeeded (None), one died or hung or a signal came (the failed rank
    and the cause, or None with ``received`` set); stop the others either way."""
    while True:
        if received:
            stop(ranks, timeout)
            return None
        failed = [r for r in ranks if r.exit_status not in (None, 0)]
        if failed:
            stop(ranks, timeout)
            return failed[0], failed[0].death_cause()
        if heartbeat_timeout is not None:
            hung = [(r, s) for r in ranks if r.exit_status is None and (s := r.silent_for()) > heartbeat_timeout]
            if hung:
                stop(ranks, timeout)
                return hung[0][0], f"sent no heartbeat for {hung[0][1]:.0f} s"
        if all(r.exit_status == 0 for r in ranks):
            for r in ranks:
                r.reader.join(timeout=1.0)
            return None
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    args = build_arg_parser().parse_args(argv)
    if args.nproc < 1:
        print(f"{PROG}: error: --nproc-per-node must be at least 1, not {args.nproc}", file=sys.stderr)
        return 2
    if not 0 <= args.node_rank < args.nnodes:
        print(f"{PROG}: error: --node-rank {args.node_rank} is outside --nnodes {args.nnodes}", file=sys.stderr)
        return 2
    if args.hosts is not None and (args.backend != "mpi" or args.nnodes > 1):
        print(f"{PROG}: error: --hosts starts every machine's ranks through mpiexec: it needs --backend mpi "
              "(and no --nnodes)", file=sys.stderr)
        return 2
    if not os.path.exists(args.script):
        print(f"{PROG}: error: no script {args.script!r}", file=sys.stderr)
        return 2
    if args.heartbeat_timeout is not None and args.heartbeat_timeout <= 0:
        print(f"{PROG}: error: --heartbeat-timeout must be positive, not {args.heartbeat_timeout}", file=sys.stderr)
        return 2
    received: list[int] = []
    heartbeats = None if args.heartbeat_timeout is None else tempfile.TemporaryDirectory(prefix="lezero-heartbeat-")
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum)) for s in FORWARDED_SIGNALS}
    try:
        restart = 0
        while True:
            try:
                ranks = start_ranks(args, restart, None if heartbeats is None else heartbeats.name)
            except UsageError as e:
                print(f"{PROG}: error: {e}", file=sys.stderr)
                return 2
            outcome = supervise(ranks, received, args.stop_timeout, args.heartbeat_timeout)
            if received:
                print(f"{PROG}: {signal.Signals(received[0]).name} forwarded to every rank; stopped", file=sys.stderr)
                return 128 + received[0]
            if outcome is None:
                return 0
            failed, cause = outcome
            failed.read_to_end()
            if restart < args.max_restarts:
                restart += 1
                print(f"{PROG}: restart {restart} of {args.max_restarts}: {failed.name} {cause} "
                      f"(pid {failed.process.pid}); stopped the others, starting every rank again", file=sys.stderr)
                continue
            print(f"{PROG}: {failed.name} {cause} (pid {failed.process.pid}); stopped the others; "
                  f"no restarts left (--max-restarts {args.max_restarts})", file=sys.stderr)
            print(f"{PROG}: the last lines of {failed.name}'s stderr:\n" +
                  "\n".join("    " + line for line in failed.tail), file=sys.stderr)
            return failed.exit_status
    finally:
        if heartbeats is not None:
            heartbeats.cleanup()
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
