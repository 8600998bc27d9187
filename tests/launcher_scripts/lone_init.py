"""Calls hbcore.init() under each environment named on the command line and
prints one JSON line per case: the world size, or the error's type and
message.  Used by tests/test_job_environment.py (real processes: the check
runs inside init, on the world MPI really formed).

    python lone_init.py CASES_JSON [--context CASE]

CASES_JSON: a list of [name, {VAR: value or null}]; null unsets VAR for
that case.  --context CASE adds a case "context" that asks hb.context.world_size
(hbcore_tf, which initialises hbcore) under CASE's environment.
"""
import json
import os
import sys

# tests/, for the test support
sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from support.hbcore_path import import_hbcore_package  # noqa: E402

import_hbcore_package()
import hbcore  # noqa: E402


def apply(env):
    saved = {name: os.environ.get(name) for name in env}
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return saved


def outcome(call):
    try:
        size = call()
        return {"size": size}
    except Exception as exc:  # reported, the test checks type and message
        return {"error": type(exc).__name__, "message": str(exc)}


def init_size():
    hbcore.init()
    size = hbcore.size()
    hbcore.shutdown()
    return size


def main():
    cases = json.loads(sys.argv[1])
    for name, env in cases:
        saved = apply(env)
        print(json.dumps(dict(outcome(init_size), case=name)), flush=True)
        if sys.argv[2:] == ["--context", name]:
            import hbcore_tf as hb
            result = outcome(lambda: hb.context.world_size)
            print(json.dumps(dict(result, case="context")), flush=True)
        apply(saved)


main()
