"""lezero-run: the environment each rank gets, a failing rank stopping the others, restarts with
their count in the environment, the exit status, and the MPI launch through MPICH's mpiexec."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from lezero.cli import run

TIMEOUT_S = 60


def lezero_run(tmp_path, script: str, *flags: str) -> subprocess.CompletedProcess:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, "-m", "lezero.cli.run", *flags, str(path), str(tmp_path)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


ENV_SCRIPT = """
    import json, os, pathlib, sys
    names = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "LEZERO_BACKEND", "LEZERO_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT", "PMI_RANK"]
    env = {n: os.environ.get(n) for n in names}
    rank = env["RANK"] or env["PMI_RANK"]
    pathlib.Path(sys.argv[1], f"env{rank}.json").write_text(json.dumps(env))
"""


def test_every_rank_gets_torchruns_environment(tmp_path):
    done = lezero_run(tmp_path, ENV_SCRIPT, "--nproc-per-node", "3")
    assert done.returncode == 0, done.stderr
    envs = [json.loads((tmp_path / f"env{r}.json").read_text()) for r in range(3)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and {e["LEZERO_BACKEND"] for e in envs} == {"gloo"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and envs[0]["MASTER_ADDR"] == "127.0.0.1"
    assert {e["LEZERO_RESTART_COUNT"] for e in envs} == {"0"} == {e["TORCHELASTIC_RESTART_COUNT"] for e in envs}


def test_mpi_ranks_are_started_by_mpiexec(tmp_path):
    done = lezero_run(tmp_path, ENV_SCRIPT, "--nproc-per-node", "2", "--backend", "mpi")
    assert done.returncode == 0, done.stderr
    envs = [json.loads((tmp_path / f"env{r}.json").read_text()) for r in range(2)]
    assert [e["PMI_RANK"] for e in envs] == ["0", "1"] and {e["RANK"] for e in envs} == {None}
    assert {e["LEZERO_BACKEND"] for e in envs} == {"mpi"} and {e["WORLD_SIZE"] for e in envs} == {"2"}


FAILING_SCRIPT = """
    import os, pathlib, sys, time
    rank, restart = os.environ["RANK"], os.environ["LEZERO_RESTART_COUNT"]
    pathlib.Path(sys.argv[1], f"start{rank}_{restart}").write_text(str(os.getpid()))
    if rank == "1":
        # wait (bounded) for rank 0 of this start to be up, so that its marker exists however slowly
        # a loaded machine starts Python; then give up
        deadline = time.monotonic() + 20
        while not pathlib.Path(sys.argv[1], f"start0_{restart}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("rank 1 gives up", file=sys.stderr)
        sys.exit(3)
    time.sleep(30)  # rank 0 would run on: lezero-run must stop it
"""


def test_a_failing_rank_stops_the_others_and_sets_the_exit_status(tmp_path):
    done = lezero_run(tmp_path, FAILING_SCRIPT, "--nproc-per-node", "2", "--stop-timeout", "2")
    assert done.returncode == 3
    assert "rank 1 exited with status 3" in done.stderr and "rank 1 gives up" in done.stderr
    pid0 = int((tmp_path / "start0_0").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid0, 0)


def test_max_restarts_restarts_every_rank_with_its_count(tmp_path):
    done = lezero_run(tmp_path, FAILING_SCRIPT, "--nproc-per-node", "2", "--max-restarts", "2",
                      "--stop-timeout", "2")
    assert done.returncode == 3
    started = sorted(p.name for p in tmp_path.glob("start*"))
    assert started == ["start0_0", "start0_1", "start0_2", "start1_0", "start1_1", "start1_2"]
    assert "lezero-run: restart 1 of 2: rank 1 exited with status 3" in done.stderr
    assert "lezero-run: restart 2 of 2: rank 1 exited with status 3" in done.stderr
    assert "no restarts left" in done.stderr


# issue 15: a rank that beats a few times and then hangs on its first start, and finishes on the restart
HANGING_SCRIPT = """
    import os, pathlib, sys, threading, time
    importing = threading.Event()

    def alive_while_importing():  # importing lezero takes seconds on a busy machine: no hang, keep beating
        while not importing.wait(0.5):
            os.utime(os.environ["LEZERO_HEARTBEAT_FILE"])
    threading.Thread(target=alive_while_importing, daemon=True).start()
    from lezero.runtime import heartbeat
    importing.set()
    rank, restart = os.environ["RANK"], os.environ["LEZERO_RESTART_COUNT"]
    pathlib.Path(sys.argv[1], f"start{rank}_{restart}").write_text(str(os.getpid()))
    for _ in range(3):
        heartbeat.beat()
        time.sleep(0.3)
    if rank == "1" and restart == "0":
        time.sleep(60)  # hung: lezero-run must notice the silent heartbeat and stop it
"""


@pytest.mark.slow  # two starts of lezero and a 4 s silence: ~12 s
def test_a_hanging_rank_is_stopped_and_the_job_restarted(tmp_path):
    done = lezero_run(tmp_path, HANGING_SCRIPT, "--nproc-per-node", "2", "--max-restarts", "1",
                      "--heartbeat-timeout", "4", "--stop-timeout", "1")
    assert done.returncode == 0, done.stderr
    assert re.search(r"lezero-run: restart 1 of 1: rank 1 sent no heartbeat for \d+ s", done.stderr), done.stderr
    assert sorted(p.name for p in tmp_path.glob("start*")) == ["start0_0", "start0_1", "start1_0", "start1_1"]
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "start1_0").read_text()), 0)


def test_a_killed_rank_names_its_signal(tmp_path):
    script = """
        import os, signal, sys
        if os.environ["LEZERO_RESTART_COUNT"] == "0" and os.environ["RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
    """
    done = lezero_run(tmp_path, script, "--max-restarts", "1")
    assert done.returncode == 0, done.stderr
    assert "lezero-run: restart 1 of 1: rank 0 killed by signal SIGKILL" in done.stderr


def test_the_heartbeat_needs_the_torch_backends(tmp_path):
    done = lezero_run(tmp_path, ENV_SCRIPT, "--backend", "mpi", "--heartbeat-timeout", "5")
    assert done.returncode == 2 and "--heartbeat-timeout needs the torch backends" in done.stderr


def test_a_missing_script_is_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lezero.cli.run", str(tmp_path / "nope.py")],
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 2 and "no script" in done.stderr


def test_two_nodes_meet_at_one_master(tmp_path):
    """torchrun's static multi-node form, both "nodes" on this machine: 2 x 2 ranks of one job."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(ENV_SCRIPT))
    port = str(run.free_port("127.0.0.1"))
    nodes = [subprocess.Popen([sys.executable, "-m", "lezero.cli.run", "--nnodes", "2", "--node-rank", str(k),
                               "--master-port", port, "--nproc-per-node", "2", str(path), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    for node in nodes:
        _, err = node.communicate(timeout=TIMEOUT_S)
        assert node.returncode == 0, err
    envs = [json.loads((tmp_path / f"env{r}.json").read_text()) for r in range(4)]
    assert [(e["RANK"], e["LOCAL_RANK"]) for e in envs] == [("0", "0"), ("1", "1"), ("2", "0"), ("3", "1")]
    assert {e["WORLD_SIZE"] for e in envs} == {"4"} and {e["MASTER_PORT"] for e in envs} == {port}


def test_several_nodes_need_a_master_port(tmp_path):
    done = lezero_run(tmp_path, ENV_SCRIPT, "--nnodes", "2", "--node-rank", "0")
    assert done.returncode == 2 and "--master-port" in done.stderr
