"""The temporary directory of the processes the tests start: one per pytest
process, removed when its session ends.

Why: TensorFlow writes the source of every function autograph converts to
the temporary directory (``__autograph_generated_file*.py``) and removes
it in an exit handler, which a rank killed by a test, or leaving through
``os._exit``, never runs; rank scripts and Ray leave directories there
too. A run of the suite left about 8,000 files in /tmp.

conftest.py calls :func:`apply` once per pytest process: TMPDIR then names
a fresh directory (mode 1777, as /tmp, so a job run as another user in a
test can use it) for every process the tests start. The pytest process
keeps the temporary directory it started with: ``tempfile`` caches it
before TMPDIR changes, so pytest's own ``tmp_path`` and the quiet lock
(support/quiet.py), which pytest-xdist's workers share, stay where they
were. :func:`remove` deletes the directory at the end of the session.
"""
import os
import shutil
import tempfile
from typing import Optional

_path: Optional[str] = None


def apply() -> str:
    """Makes the directory and sets TMPDIR to it for the processes this
    one starts (idempotent).

    Returns:
        The directory.
    """
    global _path
    if _path is None:
        tempfile.gettempdir()  # cached for this process before TMPDIR moves
        _path = tempfile.mkdtemp(prefix="hbtests-")
        os.chmod(_path, 0o1777)
        os.environ["TMPDIR"] = _path
    return _path


def remove() -> None:
    """Deletes the directory and everything the session's processes left
    in it."""
    if _path is not None:
        shutil.rmtree(_path, ignore_errors=True)
