"""Errors raised by the launcher."""


class LauncherError(RuntimeError):
    """The job could not be started (no mpiexec, bad host list, ...).

    Failures of a running job are not raised as this error: they are
    reported in the ``LaunchResult`` returned by ``launch``.
    """
