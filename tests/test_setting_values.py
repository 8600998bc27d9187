"""The one parser of bool and numeric settings (hbcore/setting_values.py),
checked with one table against every reader: the Python parser, the
launcher's env_flag and hbrun's flags (hbcore/knobs.py, cli.py), the
core's own parser (csrc/core/src/common/config.cc, through
hbcore.check_config; the values it reads are checked in
rank_scripts/config_check.py) and hbcore_tf's options (HB_<OPTION>)."""
import argparse
import re

import pytest

from support.hbcore_path import import_hbcore_package
from support.tf_launch import REQUIRES_TF

import_hbcore_package()
import hbcore  # noqa: E402
from hbcore import exceptions as hx  # noqa: E402
from hbcore import setting_values  # noqa: E402
from hbcore.knobs import BY_NAME, env_flag  # noqa: E402
from hbcore.launcher import cli  # noqa: E402

# text -> the bool it means, or None: refused. HybridBackend's words
# (TRUE/YES/1, FALSE/NO/0), hbcore_tf's (on/off), Horovod's whole numbers
# (> 0 is true).
BOOLS = [
    ("1", True), ("true", True), ("TRUE", True), ("True", True),
    ("yes", True), ("YES", True), ("on", True), ("On", True),
    (" true\n", True), ("2", True), ("10", True),
    ("0", False), ("false", False), ("FALSE", False), ("no", False),
    ("No", False), ("off", False), ("OFF", False), ("00", False),
    ("", None), ("maybe", None), ("-1", None), ("1.5", None), ("y", None),
    ("t", None), ("tru", None), ("0x1", None), ("\u0661", None),
]


@pytest.mark.parametrize("text,value", BOOLS)
def test_bool_words_in_python_and_the_launcher(text, value):
    # env_flag reads an empty variable as unset (the knob's default).
    environ = {"HOROVOD_IGNORE_TF_CONFIG": text}
    if value is None:
        with pytest.raises(ValueError, match=r"^invalid value for HB_X: %s "
                           r"\(expected a bool: " % re.escape(repr(text))):
            setting_values.parse_bool("HB_X", text)
        if text:
            with pytest.raises(ValueError, match="^invalid value for "
                               "HOROVOD_IGNORE_TF_CONFIG: "):
                env_flag("ignore_tf_config", environ)
        return
    assert setting_values.parse_bool("HB_X", text) is value
    assert env_flag("ignore_tf_config", environ) is value


def test_hbrun_flags_take_the_same_words():
    boolean = cli._flag_type(BY_NAME["timeline_mark_cycles"])
    choice = cli._flag_type(BY_NAME["hierarchical_allreduce"])
    for text, value in BOOLS:
        if value is None:
            for parse in (boolean, choice):
                with pytest.raises(argparse.ArgumentTypeError,
                                   match="--timeline-mark-cycles|"
                                   "--hierarchical-allreduce"):
                    parse(text)
        else:
            assert boolean(text) == choice(text) == str(value).lower()
    assert choice("auto") == "auto"
    with pytest.raises(argparse.ArgumentTypeError):
        boolean("auto")


def test_the_core_accepts_the_same_words():
    for text, value in BOOLS:
        for knob in ("stall_check_disable", "idle_spin"):
            if value is None:
                with pytest.raises(hx.ConfigError, match=r"invalid value for "
                                   r"config key '%s'.*expected .*a bool"
                                   % knob):
                    hbcore.check_config({knob: text})
            else:
                hbcore.check_config({knob: text})


@pytest.mark.parametrize("text,kind,value", [
    ("3", int, 3), (" 3 ", int, 3), ("-2", int, -2), ("2.5", float, 2.5),
    ("1e3", float, 1000.0), ("3", float, 3.0),
    ("2.5", int, None), ("", int, None), ("abc", float, None),
    ("inf", float, None), ("nan", float, None),
])
def test_numbers(text, kind, value):
    if value is None:
        with pytest.raises(ValueError, match=r"^invalid value for HB_N: %s "
                           r"\(expected " % re.escape(repr(text))):
            setting_values.parse_number("HB_N", text, kind)
    else:
        parsed = setting_values.parse_number("HB_N", text, kind)
        assert parsed == value and type(parsed) is kind


@REQUIRES_TF
def test_hbcore_tf_options_take_the_same_words(monkeypatch):
    """hbcore_tf's options read HB_<OPTION> with the same parser, while
    TensorFlow's own TF_USE_LEGACY_KERAS keeps TensorFlow's rule (imports
    TensorFlow: most of this test's 10-15 s)."""
    from hbcore_tf._base import compat, options

    # TensorFlow routes tf.keras to tf_keras for exactly these texts; for
    # any other hbcore_tf must not believe it does.
    for text, legacy in (("1", True), ("true", True), ("True", True),
                         ("yes", False), ("TRUE", False), ("2", False),
                         ("0", False)):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", text)
        assert compat.use_legacy_keras() is legacy, text
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    assert compat.use_legacy_keras() is False

    flag = options._BY_NAME["sharding"]
    for text, value in BOOLS:
        if value is None:
            with pytest.raises(ValueError, match=r"environment variable %s="
                               % flag.env):
                options.parse_env_value(flag, text)
        else:
            assert options.parse_env_value(flag, text) is value
    number = options._BY_NAME["grad_nbuckets"]
    with pytest.raises(ValueError, match=r"environment variable %s='2\.5'"
                       % number.env):
        options.parse_env_value(number, "2.5")
