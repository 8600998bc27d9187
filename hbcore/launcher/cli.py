"""``hbrun``: the command line launcher (console script ``hbrun``).

    hbrun -np 4 python train.py --lr 0.1
    hbrun -np 8 -H host1:4,host2:4 --timeline-filename tl.json python train.py
    hbrun --check-build

Flags follow horovodrun.  Tuning flags come from the knob table
(hbcore/knobs.py, checked against the core's) and become HB_* variables on
every rank; everything else of the environment is passed through as well.
"""

import argparse
import math
import os
import shlex
import sys
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

from hbcore import __version__
from hbcore.knobs import BY_NAME, KNOBS, LOG_LEVELS, Knob, env_flag
from hbcore.setting_values import parse_bool, parse_number
from hbcore.launcher.command_job import run_command_job
from hbcore.launcher.hosts import Host, parse_hostfile, parse_hosts
from hbcore.launcher.job_spec import (DEFAULT_ELASTIC_TIMEOUT_S,
                                      ELASTIC_TIMEOUT_VAR, HBRUN_NAMES,
                                      ElasticSettings, JobSettingError,
                                      JobSpec, elastic_settings, rank_count)
from hbcore.launcher.tf_config_launch import (DEFAULT_START_TIMEOUT_S,
                                                     run_tf_config_job)
from hbcore.launcher.mpiexec import launcher_environ, nic_env
from hbcore.launcher.operator_hostfile import operator_hostfile, uniform_slots

EPILOG = """\
output:
  Every line a rank prints is prefixed with its rank and stream:
    [1]<stdout>:text printed by rank 1
    [0]<stderr>:Traceback (most recent call last):
  With --output-filename DIR, each rank's raw (unprefixed) output is also
  written to DIR/rank.N/stdout and DIR/rank.N/stderr.

failures:
  When a rank exits with a nonzero code or is killed by a signal, the
  launcher gives the other ranks up to a second to fail too (so each
  prints its own error), stops those still running (SIGTERM, then SIGKILL
  after a few seconds) and prints one line on stderr naming the first rank that
  failed, e.g.
    {{prog}}: rank 1 failed first: exited with code 3 [host h1, pid 4242]; stopped the remaining ranks
    {{prog}}: rank 2 failed first: killed by signal SIGKILL (9) [host h1, pid 4243]; stopped the remaining ranks
  Exit status: 0 if every rank exited 0, else the first failing rank's exit
  code, or 128 + signal number if it was killed by a signal (130 when the
  launcher itself gets Ctrl-C).

environment:
{flags}
  HB_MPIEXEC selects the hydra mpiexec to use (default: the one next to
  this Python, then PATH).
""".format(flags="\n".join(
    "  %s -> %s%s" % (k.flag.option, k.env,
                      " (%s)" % k.unit if k.flag.scale != 1 else "")
    for k in KNOBS if k.flag))


def _format_number(value: float) -> str:
    # "1" rather than "1.0" for whole numbers; full precision otherwise.
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _number(text: str, kind: type, minimum: float, inclusive: bool,
            what: str, maximum: float = math.inf):
    try:
        value = parse_number(what, text, kind)  # finite, of that kind
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected %s, got %r" % (what, text)) from None
    if (value < minimum or (not inclusive and value == minimum)
            or value > maximum):
        raise argparse.ArgumentTypeError("expected %s, got %r" % (what, text))
    return value


def _positive_int(text: str) -> int:
    return _number(text, int, 0, False, "an integer >= 1")


def _port(text: str) -> int:
    return _number(text, int, 1, True, "a port number from 1 to 65535",
                   65535)


class _NicAction(argparse.Action):
    """horovodrun's --network-interface(s): repeatable, values may be
    comma-separated; all given interfaces are collected in one list."""

    def __call__(self, parser: argparse.ArgumentParser,
                 namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        names = [name.strip() for name in str(values).split(",")]
        if not all(names):
            parser.error("argument %s: empty interface name in %r"
                         % ("/".join(self.option_strings), values))
        setattr(namespace, self.dest,
                list(getattr(namespace, self.dest, None) or []) + names)


# horovodrun 0.28.1 flags hbrun has nothing to do for: flag names, number
# of values, and why.  They are refused by name (exit 2) instead of being
# ignored, so that a job never silently runs without what was asked for.
_UNSUPPORTED = (
    (("--gloo",), 0, "hbcore has no Gloo controller; ranks always use MPI "
     "(drop --gloo)"),
    (("--jsrun",), 0, "hbrun launches through hydra's mpiexec only"),
    (("--config-file",), 1, "give the settings as flags or HB_*/HOROVOD_* "
     "variables"),
    (("--log-with-timestamp", "--no-log-hide-timestamp"), 0, "hbcore's log "
     "lines carry no timestamp; --prefix-output-with-timestamp stamps every "
     "output line"),
    (("--mpi-threads-disable",), 0, "hbcore needs MPI_THREAD_MULTIPLE when "
     "it initializes MPI (a program that initializes MPI itself chooses the "
     "thread level before hbcore.init())"),
)


def _unsupported_action(reason: str) -> type:
    class Unsupported(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser,
                     namespace: argparse.Namespace, values: Any,
                     option_string: Optional[str] = None) -> None:
            parser.error("argument %s: not supported by %s: %s"
                         % ("/".join(self.option_strings), parser.prog,
                            reason))
    return Unsupported


def _flag_type(knob: Knob) -> Callable[[str], Any]:
    """The argparse type of a knob's flag: the knob's own type and range
    (divided by the flag's scale), so hbrun refuses what the core would."""
    flag = knob.flag
    assert flag is not None
    if knob.type == "log_level":
        accepted = LOG_LEVELS + ("WARN",)

        def level(text: str) -> str:
            if text.upper() not in accepted:
                raise argparse.ArgumentTypeError(
                    "expected one of %s, got %r" % ("/".join(LOG_LEVELS),
                                                    text))
            return text.upper()
        return level
    if knob.type in ("bool", "choice"):
        def boolean(text: str) -> str:
            if knob.type == "choice" and text == "auto":
                return text
            try:
                return "true" if parse_bool(flag.option, text) else "false"
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return boolean
    if knob.type == "string":
        return str
    low, high = knob.min / flag.scale, knob.max / flag.scale
    kind = int if knob.type == "integer" and flag.scale == 1 else float
    what = "%s %s %s" % ("an integer" if kind is int else "a number",
                         ">" if flag.positive else ">=", _format_number(low))
    if high != math.inf:
        what += " and <= %s" % _format_number(high)
    return lambda text: _number(text, kind, low, not flag.positive, what,
                                high)


def _dest(knob: Knob) -> str:
    """The argparse attribute of a knob's flag (``--log-level`` ->
    ``log_level``)."""
    assert knob.flag is not None
    return knob.flag.option.lstrip("-").replace("-", "_")


def _switch_offs() -> List[Tuple[str, str, Knob, str]]:
    """horovodrun's negative switches: (option, dest, knob, value set)."""
    offs = [("--no-" + k.flag.option[2:], "no_" + _dest(k), k, "0")
            for k in KNOBS if k.flag is not None and k.flag.const is not None]
    offs.append(("--no-stall-check", "no_stall_check",
                 BY_NAME["stall_check_disable"], "1"))
    return offs


def add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the flags that set knobs (one per knob of
    :data:`hbcore.knobs.KNOBS` that has a flag), horovodrun's switches off
    (``--no-hierarchical-allreduce``, ``--no-stall-check``, ...), and the
    output flags.

    Args:
        parser: The parser to extend (hbrun's or ``python -m hbcore.run``'s).
    """
    tuning = parser.add_argument_group("tuning (set HB_* on every rank)")
    for knob in KNOBS:
        if knob.flag is not None:
            if knob.flag.const is not None:
                # A switch, as in horovodrun: no value of its own.
                tuning.add_argument(knob.flag.option, action="store_const",
                                    const=knob.flag.const,
                                    help="%s (%s=%s)" % (knob.help, knob.env,
                                                         knob.flag.const))
                continue
            tuning.add_argument(knob.flag.option, type=_flag_type(knob),
                                metavar=knob.flag.metavar,
                                help="%s (%s)" % (knob.help, knob.env))
    # horovodrun's --no-... switches (to pin a choice off) and
    # --no-stall-check; see _switch_offs for the variables they set.
    offs = parser.add_argument_group("switches off (as horovodrun)")
    for option, dest, knob, value in _switch_offs():
        offs.add_argument(option, dest=dest, action="store_true",
                          help="%s=%s" % (knob.env, value))
    launcher = parser.add_argument_group("launcher")
    launcher.add_argument("--output-filename", metavar="DIR",
                          help="also write each rank's output to "
                               "DIR/rank.N/{stdout,stderr}")
    launcher.add_argument("--mpi-args", metavar="ARGS", default="",
                          help="extra arguments for mpiexec, one string "
                               "(write --mpi-args=\"-bind-to core\" when it "
                               "starts with -)")
    launcher.add_argument("--binding-args", metavar="ARGS", default="",
                          help="process binding arguments for mpiexec, one "
                               "string, as horovodrun's (e.g. "
                               "--binding-args=\"-bind-to core\"); default: "
                               "no binding")
    launcher.add_argument("-prefix-timestamp",
                          "--prefix-output-with-timestamp",
                          dest="prefix_output_with_timestamp",
                          action="store_true",
                          help="put the local time in front of every output "
                               "line")
    launcher.add_argument("--verbose", action="store_true",
                          help="print the mpiexec command line")


def add_tf_config_flags(parser: argparse.ArgumentParser,
                        always: bool) -> None:
    """Adds the flags of a TF_CONFIG launch (tf_config_launch.py).

    Args:
        parser: hbrun's or ``python -m hbcore.run``'s parser.
        always: ``python -m hbcore.run``: a TF_CONFIG in the environment
            makes the launch a TF_CONFIG launch by itself (as HybridBackend's
            launcher); hbrun: only with ``--tf-config``.
    """
    group = parser.add_argument_group(
        "TF_CONFIG clusters (one launcher per machine)")
    if not always:
        group.add_argument("--tf-config", action="store_true",
                           help="form one job with the launchers started on "
                                "the other machines of TF_CONFIG's cluster "
                                "(no -np/-H: each machine runs one worker "
                                "per visible GPU, or one)")
    group.add_argument("--start-timeout", type=_positive_int, metavar="S",
                       help="seconds for every machine of a TF_CONFIG "
                            "cluster to arrive (default %d, as horovodrun)"
                            % DEFAULT_START_TIMEOUT_S)


def use_tf_config(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  environ: Mapping[str, str]) -> bool:
    """Whether this launch is a TF_CONFIG launch; exits 2 on bad input.

    Args:
        parser: The launcher's parser (for errors).
        args: Its validated arguments.
        environ: The environment.

    Returns:
        True for ``hbrun --tf-config``, and for ``python -m hbcore.run``
        (no ``tf_config`` attribute) when TF_CONFIG is set and
        HB_IGNORE_TF_CONFIG is not.
    """
    if hasattr(args, "tf_config"):
        return bool(args.tf_config)
    try:
        ignore = env_flag("ignore_tf_config", environ)
    except ValueError as exc:
        parser.error(str(exc))
    return bool(environ.get("TF_CONFIG", "").strip()) and not ignore


def run_tf_config(args: argparse.Namespace, program: str) -> int:
    """Runs this machine's part of a TF_CONFIG job
    (tf_config_launch.py).

    Args:
        args: Validated arguments.
        program: The name starting report lines.

    Returns:
        The exit code.
    """
    try:
        job = job_from_args(args, 1, None, program=program)
    except JobSettingError as exc:
        return _report_setting_error(program, exc)
    return run_tf_config_job(job, args.start_timeout, os.environ)


def _non_negative_int(text: str) -> int:
    return _number(text, int, 0, True, "an integer >= 0")


def add_elastic_flags(parser: argparse.ArgumentParser) -> None:
    """Adds horovodrun's elastic flags (elastic/driver.py, docs/elastic.md).

    Args:
        parser: hbrun's parser.
    """
    group = parser.add_argument_group(
        "elastic training (as horovodrun; see docs/elastic.md)")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np",
                       type=_positive_int, metavar="N",
                       help="fewest ranks to go on with (default: -np); "
                            "fewer make the job wait for hosts")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np",
                       type=_positive_int, metavar="N",
                       help="most ranks (default: unbounded)")
    group.add_argument("--host-discovery-script", metavar="SCRIPT",
                       help="prints the usable hosts, one 'host:slots' a "
                            "line; run about once a second")
    group.add_argument("--slots-per-host", dest="slots_per_host",
                       type=_positive_int, metavar="N",
                       help="slots of a discovered host printed without "
                            "':slots' (default 1)")
    group.add_argument("--elastic-timeout", type=_positive_int, metavar="S",
                       help="seconds to wait for --min-np slots (default "
                            "%s or %d); also how long a rank may stay "
                            "stopped or stuck in the kernel before it is "
                            "killed as hung, unless "
                            "--stall-check-shutdown-time-seconds is set"
                            % (ELASTIC_TIMEOUT_VAR,
                               DEFAULT_ELASTIC_TIMEOUT_S))
    group.add_argument("--reset-limit", type=_non_negative_int, metavar="N",
                       help="most re-formations of the job (default: "
                            "unlimited)")
    group.add_argument("--blacklist-cooldown-range", type=_non_negative_int,
                       nargs=2, metavar=("MIN", "MAX"),
                       help="seconds a host where a rank failed stays "
                            "unused, doubling from MIN to MAX (default: "
                            "for the rest of the job)")


def _elastic_settings(args: argparse.Namespace, hosts: Optional[List[Host]],
                      environ: Mapping[str, str]
                      ) -> Optional[ElasticSettings]:
    """The elastic settings of a command line (job_spec.elastic_settings),
    or None for a fixed job; JobSettingError on bad input."""
    given = ["--" + flag.replace("_", "-") for flag in (
        "slots_per_host", "elastic_timeout", "reset_limit",
        "blacklist_cooldown_range") if getattr(args, flag) is not None]
    return elastic_settings(
        HBRUN_NAMES, args.np, args.min_np, args.max_np,
        args.host_discovery_script, hosts,
        args.slots_per_host or getattr(args, "operator_slots", None),
        args.reset_limit, args.blacklist_cooldown_range,
        args.elastic_timeout, environ, given)


def _argument_text(exc: JobSettingError) -> str:
    """A rule's error in argparse's words: ``argument --min-np ...`` (a
    variable's error as it is)."""
    if not exc.name.startswith("-"):
        return str(exc)
    text = str(exc)
    return "argument " + (text if text.startswith(exc.name)
                          else "%s: %s" % (exc.name, text))


def _report_setting_error(program: str, exc: JobSettingError) -> int:
    sys.stderr.write("%s: error: %s\n" % (program, _argument_text(exc)))
    return 2


def build_parser(prog: str = "hbrun") -> argparse.ArgumentParser:
    """Builds hbrun's argument parser.

    Args:
        prog: Program name shown in usage and errors.

    Returns:
        The parser; ``args.command`` holds the command and its own flags.
    """
    parser = argparse.ArgumentParser(
        prog=prog, allow_abbrev=False, epilog=EPILOG.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Launch a command on N ranks through MPI's launcher.")
    parser.add_argument("-np", "--num-proc", dest="np", type=_positive_int,
                        metavar="N", help="number of ranks (default: the "
                        "total slots of -H/--hostfile)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-H", "--hosts", metavar="HOSTS",
                       help="hosts and slots, e.g. host1:2,host2:2")
    where.add_argument("-hostfile", "--hostfile", metavar="FILE",
                       help="file of 'host slots=N' or 'host:N' lines")
    add_tuning_flags(parser)
    add_tf_config_flags(parser, always=False)
    parser.add_argument("-cb", "--check-build", action="store_true",
                        help="print what was built and found, and exit")
    parser.add_argument("-v", "--version", action="version",
                        version="%(prog)s (hbcore) " + __version__,
                        help="print hbcore's version and exit")
    remote = parser.add_argument_group("hosts and network (as horovodrun)")
    remote.add_argument("-p", "--ssh-port", type=_port, metavar="PORT",
                        help="ssh port on all the hosts (ssh -p)")
    remote.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                        help="ssh identity (private key) file (ssh -i)")
    remote.add_argument("--network-interface", "--network-interfaces",
                        dest="nics", action=_NicAction, metavar="NIC",
                        help="interface(s) for NCCL's sockets; repeat or "
                             "separate with commas (sets NCCL_SOCKET_IFNAME)")
    add_elastic_flags(parser)
    compat = parser.add_argument_group(
        "accepted for horovodrun compatibility, no effect")
    compat.add_argument("--disable-cache", action="store_true",
                        help="hbrun runs no cached ssh/NIC pre-checks")
    compat.add_argument("--mpi", action="store_true",
                        help="MPI is the only controller")
    compat.add_argument("--tcp", action="store_true",
                        help="as horovodrun under MPICH: nothing to change")
    compat.add_argument("--num-nccl-streams", type=_positive_int,
                        metavar="N", help="hbcore runs one NCCL stream per "
                        "device")
    compat.add_argument("--gloo-timeout-seconds", type=_positive_int,
                        metavar="S", help="hbcore has no Gloo controller")
    compat.add_argument("--log-without-timestamp", "--log-hide-timestamp",
                        action="store_true", dest="log_without_timestamp",
                        help="hbcore's log lines carry no timestamp")
    for options, nargs, reason in _UNSUPPORTED:
        parser.add_argument(*options, nargs=nargs,
                            action=_unsupported_action(reason),
                            help=argparse.SUPPRESS)
    # REMAINDER: everything from the command on belongs to the command, so
    # "hbrun -np 2 python train.py --verbose" passes --verbose to train.py.
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command each rank runs")
    return parser


def flags_to_env(args: argparse.Namespace) -> Dict[str, str]:
    """Maps parsed tuning flags onto HB_* environment variables.

    Args:
        args: Parsed arguments (flags that were not given are None).

    Returns:
        The variables to set on every rank; unset flags are left out so
        the ranks' own environment (or the core's default) applies.
    """
    env = {}
    for knob in KNOBS:
        if knob.flag is None:
            continue
        value = getattr(args, _dest(knob))
        if value is None:
            continue
        if knob.type == "integer":
            env[knob.env] = str(int(round(value * knob.flag.scale)))
        elif knob.type == "number":
            env[knob.env] = _format_number(value * knob.flag.scale)
        elif knob.unit == "path":
            # Absolute, so a rank that changes directory writes the same file.
            env[knob.env] = os.path.abspath(value)
        else:
            env[knob.env] = value
    for _option, dest, knob, value in _switch_offs():
        if getattr(args, dest, False):
            env[knob.env] = value
    return env


def launch_env(args: argparse.Namespace) -> Dict[str, str]:
    """Returns the rank variables that hbrun's non-tuning flags set.

    Args:
        args: Parsed arguments (hbrun's, or ``python -m hbcore.run``'s,
            which lack these flags).

    Returns:
        ``NCCL_SOCKET_IFNAME`` for --network-interface, or nothing.
    """
    return nic_env(getattr(args, "nics", None))


def validate_common(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> None:
    """Checks what argparse cannot check per flag; exits 2 on an error.

    Also normalises ``args.command`` (drops a leading ``--``) and splits
    ``args.mpi_args`` into a list.

    Args:
        parser: The parser (for ``parser.error``).
        args: Parsed arguments.
    """
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command and not getattr(args, "check_build", False):
        parser.error("no command given (e.g. %s python train.py)"
                     % parser.prog)
    for option, dest, knob, _value in _switch_offs():
        if (getattr(args, dest, False) and knob.flag is not None
                and getattr(args, _dest(knob)) is not None):
            parser.error("argument %s: not allowed with argument %s"
                         % (option, knob.flag.option))
    warn = args.stall_check_warning_time_seconds
    stop = args.stall_check_shutdown_time_seconds
    if warn is not None and stop and stop < warn:
        parser.error("argument --stall-check-shutdown-time-seconds: %s is "
                     "less than --stall-check-warning-time-seconds %s"
                     % (_format_number(stop), _format_number(warn)))
    # Binding arguments first, then --mpi-args (as horovodrun orders them).
    mpi_args = []
    for option in ("binding_args", "mpi_args"):
        try:
            mpi_args += shlex.split(getattr(args, option, "") or "")
        except ValueError as exc:
            parser.error("argument --%s: %s" % (option.replace("_", "-"),
                                                exc))
    args.mpi_args = mpi_args


def _resolve_hosts(parser: argparse.ArgumentParser,
                   args: argparse.Namespace,
                   environ: Mapping[str, str]) -> Optional[List[Host]]:
    """The hosts of -H/--hostfile, else of the hostfile an MPI operator
    names in ``environ`` (not with a discovery script, which then only
    lends its slot count: see operator_hostfile.py); sets args.np and
    args.operator_slots; exits 2 on a bad host list, raises
    JobSettingError for a bad rank count."""
    args.operator_slots = None
    try:
        if args.hosts is not None:
            hosts = parse_hosts(args.hosts)
        elif args.hostfile is not None:
            hosts = parse_hostfile(args.hostfile)
        else:
            hosts = None
    except (ValueError, OSError) as exc:
        flag = "-H/--hosts" if args.hosts is not None else "--hostfile"
        parser.error("argument %s: %s" % (flag, exc))
    if hosts is None:
        try:
            given = operator_hostfile(environ)
        except ValueError as exc:
            parser.error(str(exc))
        if given is not None:
            args.operator_slots = uniform_slots(given.hosts)
            if getattr(args, "host_discovery_script", None) is None:
                hosts = given.hosts
    if args.np is None and getattr(args, "min_np", None) is not None:
        args.np = args.min_np  # an elastic job starts with --min-np slots
    args.np = rank_count(HBRUN_NAMES, args.np, hosts)
    return hosts


def parse_args(argv: Optional[Sequence[str]] = None
               ) -> Tuple[argparse.Namespace, Optional[List[Host]]]:
    """Parses and validates hbrun's command line.

    Args:
        argv: Arguments without the program name (default: sys.argv[1:]).

    Returns:
        (args, hosts); hosts is None for a local run.

    Raises:
        SystemExit: With code 2 and a message naming the flag, on bad
            arguments; with code 0 for --help.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    validate_common(parser, args)
    if args.check_build:
        return args, None
    if args.tf_config:
        if args.np is not None or args.hosts or args.hostfile:
            parser.error("argument --tf-config: not allowed with -np, -H or "
                         "--hostfile (TF_CONFIG's cluster and each machine's "
                         "GPUs decide)")
        if (args.min_np is not None or args.max_np is not None
                or args.host_discovery_script is not None):
            parser.error("argument --tf-config: not allowed with --min-np, "
                         "--max-np or --host-discovery-script (a TF_CONFIG "
                         "launch is not elastic)")
        args.elastic = None
        return args, None
    try:
        hosts = _resolve_hosts(parser, args, os.environ)
        args.elastic = _elastic_settings(args, hosts, os.environ)
    except JobSettingError as exc:
        parser.error(_argument_text(exc))
    return args, hosts


def job_from_args(args: argparse.Namespace, np: int,
                  hosts: Optional[List[Host]],
                  per_rank_env: Optional[List[Dict[str, str]]] = None,
                  program: str = "hbrun") -> JobSpec:
    """The job a validated command line describes (hbrun's or ``python -m
    hbcore.run``'s, which lacks the ssh, NIC and elastic flags).

    Args:
        args: Validated arguments (``validate_common`` ran).
        np: Number of ranks.
        hosts: Hosts, or None for this host.
        per_rank_env: Extra variables per rank, or None.
        program: Name starting the report lines.

    Returns:
        The JobSpec.

    Raises:
        JobSettingError: Naming --output-filename (its directory cannot be
            created) or -i/--ssh-identity-file.
    """
    output_dir = (os.path.abspath(args.output_filename)
                  if args.output_filename else None)
    if output_dir is not None:
        # Checked here, where the message can name the flag; the ranks on
        # other hosts create (and report) their own.
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as exc:
            raise JobSettingError("--output-filename", (
                "cannot create directory %s: %s"
                % (output_dir, exc.strerror or exc))) from None
    try:
        environ = launcher_environ(
            os.environ, ssh_port=getattr(args, "ssh_port", None),
            ssh_identity_file=getattr(args, "ssh_identity_file", None))
    except ValueError as exc:
        raise JobSettingError("-i/--ssh-identity-file", str(exc)) from None
    env = flags_to_env(args)
    env.update(launch_env(args))
    return JobSpec(
        command=list(args.command), np=np, hosts=hosts, env=env,
        per_rank_env=per_rank_env, mpi_args=args.mpi_args,
        output_dir=output_dir, verbose=args.verbose, environ=environ,
        timestamp_output=getattr(args, "prefix_output_with_timestamp", False),
        elastic=getattr(args, "elastic", None), program=program)


def run_job(args: argparse.Namespace, np: int, hosts: Optional[List[Host]],
            per_rank_env: Optional[List[Dict[str, str]]] = None,
            program: str = "hbrun") -> int:
    """Launches a parsed command line and reports the outcome.

    Args:
        args, np, hosts, per_rank_env, program: As ``job_from_args``'s.

    Returns:
        The exit code for the launcher process (2 for a flag that
        ``job_from_args`` refused).
    """
    try:
        job = job_from_args(args, np, hosts, per_rank_env, program)
    except JobSettingError as exc:
        return _report_setting_error(program, exc)
    return run_command_job(job)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``hbrun``.

    Args:
        argv: Arguments without the program name (default: sys.argv[1:]).

    Returns:
        The process exit code (see the --help epilog).
    """
    args, hosts = parse_args(argv)
    if args.check_build:
        from hbcore.launcher.check_build import print_report
        return print_report()
    if args.tf_config:
        return run_tf_config(args, "hbrun")
    return run_job(args, args.np, hosts)


if __name__ == "__main__":
    sys.exit(main())
