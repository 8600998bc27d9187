"""The job description's rules (hbcore/launcher/job_spec.py): each rule is
checked once, and every entry point reports it with the same words in its
own spelling of the settings (hbrun's flags, hbcore.run's arguments,
Horovod's Spark/Ray names)."""
import pytest

from support.hbcore_path import import_hbcore_package

import_hbcore_package()
from hbcore.launcher import cli  # noqa: E402
from hbcore.launcher.elastic.hosted import elastic_limits  # noqa: E402
from hbcore.launcher.run_fn import run  # noqa: E402


def _hbrun_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv + ["python", "t.py"])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


def _raised(call, *args, **kwargs):
    with pytest.raises(ValueError) as exc:
        call(*args, **kwargs)
    return str(exc.value)


def test_rank_count_rules_read_alike_in_each_entry_points_words(capsys):
    assert _hbrun_error(["-np", "2", "--min-np", "3"], capsys) == (
        "hbrun: error: argument --min-np 3 is more than -np/--num-proc 2")
    assert _raised(run, len, np=2, min_np=3) == "min_np 3 is more than np 2"
    assert _raised(elastic_limits, 2, 3, None, None, None) == (
        "min_num_proc 3 is more than num_proc 2")
    # Ranks that do not fit the hosts: one check for fixed and elastic jobs.
    assert _hbrun_error(["-np", "4", "-H", "a:1,b:1"], capsys) == (
        "hbrun: error: argument -np/--num-proc: 4 ranks do not fit in the "
        "2 slots of the host list")
    assert _raised(run, len, np=3, min_np=1, hosts="a:2") == (
        "np: 3 ranks do not fit in the 2 slots of the host list")


def test_elastic_only_settings_without_an_elastic_job(capsys):
    assert _hbrun_error(["-np", "2", "--reset-limit", "1"], capsys) == (
        "hbrun: error: argument --reset-limit: --slots-per-host, "
        "--elastic-timeout, --reset-limit and --blacklist-cooldown-range "
        "are for an elastic job: give --min-np, --max-np or "
        "--host-discovery-script")
    assert _raised(run, len, np=1, cooldown_range=(1, 2)) == (
        "reset_limit and cooldown_range are for an elastic job: give "
        "min_np, max_np or host_discovery_script")


def test_discovery_with_a_host_list_and_a_bad_cooldown(capsys):
    assert _hbrun_error(["-np", "1", "--min-np", "1", "-H", "a:1",
                         "--host-discovery-script", "d.sh"], capsys) == (
        "hbrun: error: argument --host-discovery-script: not with "
        "-H/--hosts or --hostfile")
    assert _raised(run, len, min_np=1, hosts="a:1",
                   host_discovery_script="d.sh") == (
        "host_discovery_script: not with hosts or hostfile")
    assert _hbrun_error(["-np", "1", "--min-np", "1",
                         "--blacklist-cooldown-range", "5", "2"], capsys) == (
        "hbrun: error: argument --blacklist-cooldown-range must be (MIN, "
        "MAX) with 0 <= MIN <= MAX, got [5, 2]")


def test_a_bad_elastic_timeout_variable_reads_the_same_everywhere(
        monkeypatch, capsys):
    from hbcore.launcher.job_spec import JobSettingError
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "soon")
    expected = "HOROVOD_ELASTIC_TIMEOUT must be an integer >= 1, got 'soon'"
    assert _hbrun_error(["-np", "1", "--min-np", "1"], capsys) == (
        "hbrun: error: " + expected)
    with pytest.raises(JobSettingError) as exc:
        run(len, min_np=1)
    assert (str(exc.value), exc.value.name) == (
        expected, "HOROVOD_ELASTIC_TIMEOUT")
    # Spark/Ray give the timeout as an argument: the variable is not read.
    assert elastic_limits(2, 1, None, None, 5).timeout_s == 5
