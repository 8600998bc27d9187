"""Where hbcore keeps files between runs: a per-user cache directory that
works without a writable home.

Containers often run training as a non-root user whose home is read-only
or missing (Kubeflow's MPIJob with ``runAsUser``, images whose home is
owned by root), so the cache does not assume ``~`` is writable.  The
directory is, first match wins:

1. ``$<override variable>`` (e.g. HB_TF_OPS_CACHE), used as given;
2. ``$XDG_CACHE_HOME/hbcore``;
3. ``~/.cache/hbcore`` when it can be created or written there;
4. ``<temp dir>/hbcore-cache-<uid>`` (``$TMPDIR``, else /tmp), created
   with mode 0700 and used only while it is a real directory owned by
   this user that nobody else may write: the cache holds shared libraries
   this process loads, so a directory another user could fill is refused.

Nothing else in hbcore writes under ``~``.
"""

import os
import stat
import tempfile
from typing import List


def _writable(path: str) -> bool:
    """Whether ``path`` is a writable directory, or could be created as
    one (its deepest existing ancestor is a writable directory)."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.path.isdir(probe) and os.access(probe, os.W_OK | os.X_OK)


def _private_temp_dir() -> str:
    """``<temp dir>/hbcore-cache-<uid>``, created 0700 if missing.

    Raises:
        OSError: It cannot be created, or exists but is not a directory
            owned by this user and closed to others.
    """
    path = os.path.join(tempfile.gettempdir(), "hbcore-cache-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
        raise OSError("%s is not a directory of user %d closed to others"
                      % (path, os.getuid()))
    return path


def cache_dir(override_var: str) -> str:
    """The directory of hbcore's cache (see the module docstring).

    Args:
        override_var: The variable that names the directory outright
            (checked first).

    Returns:
        The directory's path; only the temp-dir fallback is created here
        (the caller creates the others when it writes).

    Raises:
        OSError: No writable place exists; the message names each place
            tried and the variables that choose one.
    """
    given = os.environ.get(override_var)
    if given:
        return given
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "hbcore")
    home = os.path.join(os.path.expanduser("~"), ".cache", "hbcore")
    if _writable(home):
        return home
    tried: List[str] = ["%s (not writable)" % home]
    try:
        return _private_temp_dir()
    except OSError as exc:
        tried.append(str(exc))
    raise OSError("hbcore: no writable cache directory: %s; set %s or "
                  "XDG_CACHE_HOME to a writable directory"
                  % ("; ".join(tried), override_var))
