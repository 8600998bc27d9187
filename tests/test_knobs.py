"""One table of configuration knobs: the core's (config.cc, exported as
``core.knobs()``) and hbcore/knobs.py (which hbrun builds its flags from,
without loading the core) must agree field by field; hbrun's flags, the
documentation and programmatic validation all follow from them."""
import math
import os
import re

import pytest

from support.under_test import ROOT

import hbcore
from hbcore import exceptions as hx
from hbcore.knobs import BY_NAME, KNOBS, value_text
from hbcore.launcher import cli


@pytest.fixture(scope="module")
def core():
    from hbcore._native import core as module
    return module


def test_python_table_is_the_core_table(core):
    types = {core.HB_KNOB_INTEGER: "integer", core.HB_KNOB_NUMBER: "number",
             core.HB_KNOB_STRING: "string", core.HB_KNOB_BOOL: "bool",
             core.HB_KNOB_LOG_LEVEL: "log_level",
             core.HB_KNOB_CHOICE: "choice"}
    native = [(k["name"], k["env"], types[k["type"]], k["default"], k["min"],
               k["max"], k["unit"]) for k in core.knobs()]
    mirrored = [(k.name, k.env, k.type, k.default, float(k.min),
                 float(k.max), k.unit) for k in KNOBS]
    assert mirrored == native


def test_defaults_are_valid_values(core):
    for knob in KNOBS:
        if knob.default:
            hbcore.check_config({knob.name: knob.default})


def test_every_flag_sets_its_knob_and_nothing_else():
    """Each flag in the table parses, and flags_to_env maps it onto the
    knob's variable only; the flags hbrun has are exactly the table's."""
    parser = cli.build_parser()
    options = {a.option_strings[0] for group in parser._action_groups
               if group.title.startswith("tuning")
               for a in group._group_actions}
    assert options == {k.flag.option for k in KNOBS if k.flag}
    samples = {"integer": "7", "number": "2.5", "string": "tl.json",
               "log_level": "info", "bool": "1", "choice": "0"}
    for knob in KNOBS:
        if knob.flag is None:
            continue
        value = [] if knob.flag.const is not None else [samples[knob.type]]
        args, _ = cli.parse_args(["-np", "1", knob.flag.option] + value
                                 + ["python", "t.py"])
        env = cli.flags_to_env(args)
        assert list(env) == [knob.env], knob
        hbcore.check_config({knob.name: env[knob.env]})


@pytest.mark.parametrize("knob", [k for k in KNOBS if k.flag
                                  and k.type in ("integer", "number")],
                         ids=lambda k: k.name)
def test_flag_range_is_the_knob_range(knob, capsys):
    """hbrun refuses, naming the flag, what the core would refuse."""
    too_big = knob.max / knob.flag.scale * 2 if knob.max != math.inf else None
    for bad in ["-1", "x"] + ([repr(too_big)] if too_big else []):
        with pytest.raises(SystemExit):
            cli.parse_args(["-np", "1", knob.flag.option, bad, "python",
                            "t.py"])
        assert knob.flag.option in capsys.readouterr().err


def test_log_level_flag_accepts_what_the_core_accepts():
    args, _ = cli.parse_args(["-np", "1", "--log-level", "warn", "python",
                              "t.py"])
    assert cli.flags_to_env(args) == {"HB_LOG_LEVEL": "WARN"}


@pytest.mark.parametrize("path", ["docs/configuration.md", "README.md"])
def test_docs_list_every_knob(path):
    text = open(os.path.join(ROOT, path)).read()
    for knob in KNOBS:
        assert re.search(r"\|\s*`?%s`?\s*[|(]" % knob.env, text), (
            "%s: no table row for %s" % (path, knob.env))


def test_check_config_names_the_knob():
    hbcore.check_config({"fusion_threshold": 1 << 20, "cycle_time": 0.5,
                         "timeline": "", "log_level": "debug",
                         "stall_check_disable": True})
    with pytest.raises(hx.ConfigError, match=(
            r"^invalid value for config key 'cache_capacity' "
            r"\(HB_CACHE_CAPACITY\): '-5' \(expected an integer in "
            r"\[0, 1048576\]\)$")):
        hbcore.check_config({"cache_capacity": -5})
    with pytest.raises(hx.ConfigError, match="unknown configuration knob "
                                             "'HB_CYCLE_TIME'"):
        hbcore.check_config({"HB_CYCLE_TIME": 1})
    with pytest.raises(TypeError, match=r"config\['cycle_time'\]"):
        hbcore.check_config({"cycle_time": [1]})
    with pytest.raises(TypeError, match="mapping"):
        hbcore.check_config([("cycle_time", 1)])


def test_check_config_ignores_the_environment(monkeypatch):
    monkeypatch.setenv("HB_FUSION_THRESHOLD", "abc")
    hbcore.check_config({"cycle_time": 3})


def test_value_text():
    import numpy as np
    assert value_text("k", True) == "true"
    assert value_text("k", np.int64(5)) == "5"
    assert value_text("k", 0.1) == "0.1"
    assert value_text("k", np.float32(0.5)) == "0.5"
    assert value_text("k", "x") == "x"
    assert BY_NAME["cycle_time"].env == "HB_CYCLE_TIME"


def test_no_python_layer_writes_knob_variables():
    """Libraries pass knobs through hbcore.init/defer_config, never by
    writing HB_* / HOROVOD_* into os.environ."""
    writes = re.compile(
        r"os\.environ\[\s*[\"'](HB_|HOROVOD_)[^]]*\]\s*=(?!=)"
        r"|os\.environ\.setdefault\(\s*[\"'](HB_|HOROVOD_)|os\.putenv\(")
    offenders = []
    for package in ("hbcore", "hbcore_tf"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    for n, line in enumerate(open(path), 1):
                        if writes.search(line):
                            offenders.append("%s:%d: %s" % (path, n,
                                                            line.strip()))
    assert offenders == []


@pytest.mark.parametrize("op", ["allreduce", "allgather"])
def test_hierarchical_switches(op):
    """--hierarchical-allreduce and --hierarchical-allgather take no value
    and set 1, as in horovodrun; without them the ranks' own setting
    (default auto) applies."""
    args, command = cli.parse_args(["-np", "2", "--hierarchical-" + op,
                                    "python", "t.py"])
    assert cli.flags_to_env(args) == {"HB_HIERARCHICAL_" + op.upper(): "1"}
    args, _ = cli.parse_args(["-np", "2", "python", "t.py"])
    assert cli.flags_to_env(args) == {}
