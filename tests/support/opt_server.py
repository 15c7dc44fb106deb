"""``lezero-opt`` for the FileCheck suite without importing lezero once per RUN line.

Starting ``lezero-opt`` costs ~1.4 s of CPU (importing lezero), and the FileCheck files run it
~160 times: a fifth of the whole test suite's CPU time went to those imports.  ``OptServer``
starts one process that imports ``lezero.cli.opt`` and waits on a Unix socket; the ``lezero-opt``
that lit finds first on its PATH is then a client (Python without site-packages, ~20 ms) that
hands the server its arguments, working directory, environment and standard streams (the file
descriptors themselves, ``SCM_RIGHTS``).  For each request the server forks a child, which forks
the run: the run takes the client's streams, directory, environment and ``sys.argv``, calls
``lezero.cli.opt.main`` as the console script does, runs the atexit handlers and exits with its
status (without the interpreter's teardown of its modules, which nothing sees); the child waits for
it and sends the status back, and the client exits with it.  So each RUN line gets a fresh process
with lezero imported (nothing else ran in the server), its own streams and its own exit status,
as a ``lezero-opt`` started from scratch would.  The server takes lit's environment (only what
``lit.cfg.py`` passes through), so what modules read from the environment at import is lit's too.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import sys

_STATUS = struct.Struct("!i")  # the run's exit status, or -signal


def _serve(path: str) -> None:
    import atexit
    import signal
    import traceback

    import lezero.cli.opt as opt

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(5.0)
    parent = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children are reaped by the kernel
    print("ready", flush=True)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test process is gone (killed before its teardown)
                return
            continue
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        if os.fork() == 0:  # the child: runs the request, reports its status
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            request = json.loads(message)
            run = os.fork()
            if run == 0:
                conn.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                sys.argv = request["argv"]
                try:
                    opt.main()
                    status = 0
                except SystemExit as e:  # main() ends in sys.exit: its status as the interpreter makes it
                    status = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
                    if not isinstance(e.code, (int, type(None))):
                        print(e.code, file=sys.stderr)
                except BaseException:
                    traceback.print_exc()
                    status = 1
                # what an exit does that can be seen (atexit handlers, flushed streams), without the
                # interpreter's teardown of its ~1,200 modules (0.5 s a run, nothing of it visible)
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
            for fd in fds:
                os.close(fd)
            _, wait_status = os.waitpid(run, 0)
            status = os.waitstatus_to_exitcode(wait_status)
            conn.sendall(_STATUS.pack(status))
            os._exit(0)
        for fd in fds:
            os.close(fd)
        conn.close()


def client() -> None:
    """The ``lezero-opt`` on lit's PATH: one request to the server named by $LEZERO_OPT_SERVER."""
    path = os.environ["LEZERO_OPT_SERVER"]
    request = json.dumps({"argv": ["lezero-opt", *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ)})
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [request.encode()], [0, 1, 2])
        reply = b""
        while len(reply) < _STATUS.size:
            chunk = conn.recv(_STATUS.size - len(reply))
            if not chunk:
                break
            reply += chunk
    except OSError as e:
        sys.exit(f"lezero-opt (tests/support/opt_server.py): the server at {path} failed: {e}")
    if len(reply) < _STATUS.size:
        sys.exit(f"lezero-opt (tests/support/opt_server.py): the server at {path} sent no exit status")
    (status,) = _STATUS.unpack(reply)
    if status < 0:
        sys.stderr.write(f"lezero-opt: killed by signal {-status}\n")
        sys.exit(128 - status)
    sys.exit(status)


class OptServer:
    """A running server and the folder holding its ``lezero-opt`` client (put it first on PATH).
    ``env``: the environment the server runs in (lit's, for faithful imports)."""

    def __init__(self, folder, env: dict):
        import subprocess

        folder = str(folder)
        self.socket = os.path.join(folder, "opt.sock")
        self.bin = os.path.join(folder, "bin")
        os.makedirs(self.bin)
        script = os.path.join(self.bin, "lezero-opt")
        with open(script, "w") as f:
            f.write(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                    "import opt_server\nopt_server.client()\n")
        os.chmod(script, 0o755)
        self.process = subprocess.Popen([sys.executable, __file__, self.socket], env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"the lezero-opt server did not start (it said {line!r}, "
                               f"exit status {self.process.poll()})")

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


if __name__ == "__main__":
    _serve(sys.argv[1])
