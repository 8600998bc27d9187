"""One plain TensorFlow process per job (hbcore never imported there) for
the checks that read what hbcore wrote as a user without hbcore would: a
checkpoint restored, a SavedModel served.

    with PlainTF() as plain:          # in the rank script's main()
        result = plain.run(SNIPPET, "arg1", "arg2")

A SNIPPET is Python source that reads ``sys.argv[1:]`` and prints one line
``RESULT<json>``; ``run`` returns that JSON with ``hbcore_imported`` (any
hbcore module loaded in the plain process) added. The process starts at
the first ``run`` and serves every later one, so a job pays for one import
of TensorFlow instead of one per check (3.5-5.5 s of CPU each on a 2-core
machine). Snippets therefore share the process: one must not change its
global mode (``tf.compat.v1.disable_eager_execution``); a tf.compat.v1
graph is built in ``with tf.Graph().as_default()`` instead.

Protocol (one JSON line each way per snippet, on the process's stdin and
stdout): the request is ``{"code": source, "args": [...]}``; the reply is
``{"ok": bool, "stdout": what the snippet printed, "error": traceback or
"", "hbcore_imported": bool}``. The snippet's prints are captured, so the
stdout pipe carries replies only; stderr (TensorFlow's logs) goes to a
file whose tail a failure shows. The process ends when its stdin closes:
at ``close()``, or when the rank dies.
"""
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Optional

SERVER = r"""
import contextlib, io, json, sys, traceback
for line in sys.stdin:
    request = json.loads(line)
    sys.argv = ["-c"] + request["args"]
    printed = io.StringIO()
    reply = {"ok": True, "error": ""}
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(request["code"], "<snippet>", "exec"),
                 {"__name__": "__main__"})
    except BaseException:
        reply = {"ok": False, "error": traceback.format_exc()}
    reply["stdout"] = printed.getvalue()
    reply["hbcore_imported"] = any(m.startswith("hbcore") for m in sys.modules)
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"""


class PlainTFError(RuntimeError):
    """A snippet failed, printed no RESULT line, or the process died or
    did not answer in time."""


class PlainTF:
    """The job's plain TensorFlow process (see the module docstring)."""

    def __init__(self) -> None:
        self._proc: Optional[subprocess.Popen] = None
        self._stderr = None

    def __enter__(self) -> "PlainTF":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        # Nothing of the launcher's or hbcore's environment: the process
        # is what a user without hbcore runs.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HB_", "HOROVOD_", "OMPI_", "PMI",
                                    "MPI"))}
        self._stderr = tempfile.TemporaryFile(mode="w+")
        return subprocess.Popen(
            [sys.executable, "-c", SERVER], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr, text=True)

    def run(self, code: str, *args: object, timeout: float = 120) -> dict:
        """Runs ``code`` with ``sys.argv[1:] = args`` (as strings) in the
        plain process; returns its RESULT JSON plus ``hbcore_imported``.

        Raises:
            PlainTFError: the snippet raised or printed no RESULT line,
                the process died, or no reply came within ``timeout`` s.
        """
        if self._proc is None:
            self._proc = self._start()
        request = {"code": code, "args": [str(a) for a in args]}
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise PlainTFError("the plain process died: " + self._tail())
        deadline = time.monotonic() + timeout
        ready = []
        while not ready and time.monotonic() < deadline:
            ready, _, _ = select.select([self._proc.stdout], [], [],
                                        deadline - time.monotonic())
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            message = "the plain process %s: %s" % (
                "died" if ready else "did not answer in %g s" % timeout,
                self._tail())
            self.close(kill=True)
            raise PlainTFError(message)
        reply = json.loads(line)
        results = [ln for ln in reply["stdout"].splitlines()
                   if ln.startswith("RESULT")]
        if not reply["ok"] or not results:
            raise PlainTFError("plain snippet failed: %s%s" % (
                reply["error"] or "no RESULT line", self._tail()))
        result = json.loads(results[-1][len("RESULT"):])
        result["hbcore_imported"] = reply["hbcore_imported"]
        return result

    def _tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return "\n--- its stderr ---\n" + self._stderr.read()[-3000:]

    def close(self, kill: bool = False) -> None:
        """Ends the process: closes its stdin and waits (kills it after
        30 s, or at once with ``kill``)."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            if kill:
                proc.kill()
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
