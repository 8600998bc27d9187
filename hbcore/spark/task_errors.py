"""What a failed Spark job says about its cause, read from Spark's error.

When a barrier task fails, ``collect()`` raises a Py4JJavaError whose text
is the JVM's: "Job aborted due to stage failure: ... barrier task
ResultTask(<stage>, <partition>) finished unsuccessfully.", then the
``PythonException`` carrying the worker's own Python traceback, then Java
frames. The worker's traceback is the cause (a worker that cannot import
hbcore, an error in the task); the rest is Spark's. These functions find
it in the text, so they work for whichever exception type the pyspark
version raises (Py4JJavaError, pyspark.errors' captured exceptions).
"""

import re
from typing import List, NamedTuple, Optional

_TRACEBACK = "Traceback (most recent call last):"
# The partition of the task Spark names as the stage's failure: a barrier
# stage's "ResultTask(stage, partition)", or "Lost task 1.0 in stage 3.0".
_FAILED_TASK = re.compile(r"barrier task ResultTask\(\d+, (\d+)\)"
                          r"|Lost task (\d+)\.\d+ in stage")
# Where the Python traceback ends: the first Java frame, or Spark 4's
# SQLSTATE suffix on a line of its own.
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>/-]+\(")
_SQLSTATE = re.compile(r"^\s*SQLSTATE: \w+\s*$")
# Spark's own check that a barrier stage fits the cluster (SPARK-24819).
_TOO_FEW_SLOTS = ("more slots than the total number of slots",
                  "SPARK-24819")
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")


class TaskFailure(NamedTuple):
    """The Python exception a Spark task failed with.

    Attributes:
        task: The task's partition, as Spark names it (None if Spark's
            text does not say).
        summary: The exception's first line, "ModuleNotFoundError: No
            module named 'hbcore'".
        traceback: The worker's whole Python traceback.
    """
    task: Optional[int]
    summary: str
    traceback: str

    @property
    def is_import_error(self) -> bool:
        """Whether the task's Python could not import a module."""
        name = self.summary.partition(":")[0].strip()
        return name.rpartition(".")[2] in _IMPORT_ERRORS


def task_failure(error: BaseException) -> Optional[TaskFailure]:
    """The worker's Python exception in a failed Spark job's error.

    Args:
        error: What ``collect()`` raised.

    Returns:
        The failure, or None when the error carries no Python traceback
        (a cancelled job, a lost executor, Spark's own checks).
    """
    text = str(error)
    start = text.find(_TRACEBACK)
    if start < 0:
        return None
    lines: List[str] = []
    for line in text[start:].splitlines():
        if _JAVA_FRAME.match(line) or _SQLSTATE.match(line):
            break
        lines.append(line.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    # The exception's text follows the last frame: "  File ..." and its
    # source lines, which are indented further.
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = frames[-1] + 1 if frames else 1
    while after < len(lines) and lines[after].startswith("    "):
        after += 1
    summary = next((line for line in lines[after:] if line.strip()), "")
    if not summary:
        return None
    match = _FAILED_TASK.search(text, 0, start)
    task = None if match is None else int(match.group(1) or match.group(2))
    return TaskFailure(task, summary.strip(), "\n".join(lines))


def too_few_slots(error: BaseException) -> bool:
    """Whether Spark refused the barrier stage for want of task slots.

    Args:
        error: What ``collect()`` raised.

    Returns:
        True for Spark's SPARK-24819 check.
    """
    text = str(error)
    return any(marker in text for marker in _TOO_FEW_SLOTS)
