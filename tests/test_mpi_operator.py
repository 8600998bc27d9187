"""hbrun in the launcher pod of a Kubeflow MPIJob (docs/clusters.md,
"Kubernetes: Kubeflow MPIJob").

The operator's files (``hostfile`` and ``discover_hosts.sh``, in
hbcore/launcher/operator_hostfile.py's formats) are written to a temp dir
that its variable (HYDRA_HOST_FILE, ...) points to, instead of /etc/mpi.
The jobs run as a non-root user whose HOME is read-only (a root-owned
0555 directory, as in an image run with ``runAsUser``), on hosts emulated
by hydra's fork launcher.  Under root the test creates that user
(useradd, removed at the end) and switches to it with setpriv, keeping
only CAP_DAC_READ_SEARCH: this machine's Python lives under /root (0700),
which the user could not otherwise even read; the capability lets it
read and traverse, never write, so every write still needs the user's
own permission.
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from typing import List, NamedTuple

import pytest

from support.harness import base_env, run_ranks, script_path
from test_elastic import FORK, SCRIPT, assert_finished, logged_sizes

pytestmark = pytest.mark.timeout(200)

TF_SCRIPT = script_path("tf_operator_job.py")
# Variables that would choose the cache directory outright: the jobs must
# find a writable place without them.
CACHE_VARS = ("XDG_CACHE_HOME", "HB_TF_OPS_CACHE")
# Under root: chown the job's directory (its cwd, HB_TEST_OUT) to the user
# ($1 = uid:gid), then run the rest as that user.
SWITCH_USER = ('u=$1; shift; chown "$u" . && exec setpriv --reuid="${u%:*}" '
               '--regid="${u#*:}" --clear-groups '
               '--inh-caps=+dac_read_search --ambient-caps=+dac_read_search '
               '"$@"')


class JobUser(NamedTuple):
    """The user the jobs run as."""
    uid: int
    gid: int
    home: str  # read-only
    tmp: str  # its TMPDIR, writable by it
    wrapper: List[str]  # runs a command as the user, without CACHE_VARS

    def env(self, extra: dict) -> dict:
        """Job environment: HOME and TMPDIR of this user, plus extra."""
        return dict(extra, HOME=self.home, TMPDIR=self.tmp)


@pytest.fixture(scope="module")
def job_user():
    home = tempfile.mkdtemp(prefix="hbk8s_home_")
    tmp = tempfile.mkdtemp(prefix="hbk8s_tmp_")
    unset = [arg for var in CACHE_VARS for arg in ("-u", var)]
    name = None
    if os.getuid() == 0:
        name = "hbk8s%d" % os.getpid()
        subprocess.run(["useradd", "--no-create-home", "--home-dir", home,
                        "--shell", "/bin/sh", name], check=True)
        entry = pwd.getpwnam(name)
        uid, gid = entry.pw_uid, entry.pw_gid
        os.chown(tmp, uid, gid)
        wrapper = (["sh", "-c", SWITCH_USER, "sh", "%d:%d" % (uid, gid)]
                   + ["env"] + unset)
    else:
        uid, gid = os.getuid(), os.getgid()
        wrapper = ["env"] + unset
    os.chmod(home, 0o555)
    try:
        yield JobUser(uid, gid, home, tmp, wrapper)
    finally:
        os.chmod(home, 0o755)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        if name is not None:
            subprocess.run(["userdel", name], check=False)


@pytest.fixture(scope="module")
def seeded_op_library(job_user):
    """Where the user's jobs must find the TF op library: the temp-dir
    fallback of hbcore/user_cache.py (its HOME is read-only).  The
    library compiled for this checkout is copied there first, so the
    jobs load it instead of compiling it for minutes; a job that looked
    anywhere else would compile (and time out) or fail to create its
    directory."""
    done = subprocess.run(
        [sys.executable, "-c", "from hbcore_tf._ops import build; "
         "print(build.op_library_path())"],
        env=base_env(), cwd=job_user.tmp, capture_output=True, text=True,
        timeout=600)  # not the checkout's cwd: its unbuilt hbcore/ would
    # shadow the installed one (support/under_test.py)
    assert done.returncode == 0, done.stderr[-3000:]
    compiled = done.stdout.strip().splitlines()[-1]
    cache = os.path.join(job_user.tmp, "hbcore-cache-%d" % job_user.uid)
    key_dir = os.path.join(cache, os.path.basename(os.path.dirname(compiled)))
    os.makedirs(key_dir, mode=0o700)
    path = shutil.copy(compiled, key_dir)
    for item in (cache, key_dir, path):
        os.chown(item, job_user.uid, job_user.gid)
    return path


def operator_dir(parent: str, user: JobUser, hostfile: str) -> str:
    """A copy of what the operator mounts at /etc/mpi: ``hostfile`` and a
    ``discover_hosts.sh`` printing the names in ``hosts`` (the running
    workers: the elastic job's rank script rewrites that file), one per
    line without slots, as the operator's script does."""
    directory = os.path.join(parent, "etc_mpi")
    os.mkdir(directory)
    with open(os.path.join(directory, "hostfile"), "w") as f:
        f.write(hostfile)
    with open(os.path.join(directory, "hosts"), "w") as f:
        f.write(hostfile)
    script = os.path.join(directory, "discover_hosts.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nsed 's/:.*//' %s/hosts\n" % directory)
    os.chmod(os.path.join(directory, "hostfile"), 0o444)
    os.chmod(script, 0o555)
    for item in (parent, directory, os.path.join(directory, "hosts")):
        os.chown(item, user.uid, user.gid)
    return directory


@pytest.mark.parametrize("variable, text", [
    ("HYDRA_HOST_FILE", "w-0.j.ns.svc:2\nw-1.j.ns.svc:2\n"),
    ("I_MPI_HYDRA_HOST_FILE", "w-0.j.ns.svc:2\nw-1.j.ns.svc:2\n"),
    ("OMPI_MCA_orte_default_hostfile",
     "w-0.j.ns.svc slots=2\nw-1.j.ns.svc slots=2\n"),
])
def test_hbrun_reads_each_operator_hostfile_format_when_no_flag_names_hosts(
        variable, text, tmp_path, monkeypatch, capsys):
    from hbcore.launcher.cli import parse_args
    from hbcore.launcher.hosts import Host

    hostfile = tmp_path / "hostfile"
    hostfile.write_text(text)
    monkeypatch.setenv(variable, str(hostfile))
    workers = [Host("w-0.j.ns.svc", 2), Host("w-1.j.ns.svc", 2)]
    args, hosts = parse_args(["python", "train.py"])
    assert (args.np, hosts, args.elastic) == (4, workers, None)
    args, hosts = parse_args(["--min-np", "1", "python", "train.py"])
    assert (hosts, args.elastic.fixed_hosts) == (workers, workers)
    # The discovery script decides the hosts; it prints names only, which
    # get the hostfile's slots unless --slots-per-host says otherwise.
    discover = ["-np", "2", "--host-discovery-script",
                "/etc/mpi/discover_hosts.sh"]
    args, hosts = parse_args(discover + ["python", "train.py"])
    assert (hosts, args.elastic.fixed_hosts,
            args.elastic.slots_per_host) == (None, None, 2)
    args, _ = parse_args(discover + ["--slots-per-host", "3", "python", "x"])
    assert args.elastic.slots_per_host == 3
    args, hosts = parse_args(["-H", "a:1", "python", "train.py"])
    assert (args.np, hosts) == (1, [Host("a", 1)])
    hostfile.write_text("w-0.j.ns.svc slots=two\n")
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["python", "train.py"])
    assert exit_info.value.code == 2
    assert ("hbrun: error: %s=%s: bad slot count 'two' for host "
            "'w-0.j.ns.svc' in %s line 1\n" % (variable, hostfile, hostfile)
            ) in capsys.readouterr().err


def test_a_tf_job_runs_on_the_operators_hostfile_as_a_user_without_home(
        job_user, seeded_op_library, tmp_path):
    """3 ranks on hA:2, hB:1 from HYDRA_HOST_FILE, no -H or -np.  Over
    10 s: each rank imports TensorFlow."""
    etc = operator_dir(str(tmp_path), job_user, "hA:2\nhB:1\n")
    run = run_ranks(TF_SCRIPT, 3, timeout=150,
                    env=job_user.env(
                        {"HYDRA_HOST_FILE": os.path.join(etc, "hostfile")}),
                    hbrun_args=[FORK], wrapper=job_user.wrapper)
    run.assert_ok()
    assert len(run.results) == 3, run.describe()
    for rank, result in run.results.items():
        assert result == {"sum": [6.0] * 3, "size": 3,
                          "local_size": 2 if rank < 2 else 1,
                          "cross_size": 1 if rank == 1 else 2,
                          "uid": job_user.uid,
                          "library": seeded_op_library}, run.describe()


def test_an_elastic_job_takes_the_operators_discover_hosts_sh(
        job_user, tmp_path):
    """hbrun --host-discovery-script <etc>/discover_hosts.sh as the user:
    hA, hB at start; after step 3 hB leaves the script's answer and hA
    finishes alone, with the values of a replay."""
    etc = operator_dir(str(tmp_path), job_user, "hA:1\nhB:1\n")
    run = run_ranks(SCRIPT, 2, timeout=150,
                    env=job_user.env({
                        "HYDRA_HOST_FILE": os.path.join(etc, "hostfile"),
                        "HB_TEST_HOSTS_FILE": os.path.join(etc, "hosts"),
                        "HB_TEST_EVENTS": "remove:hB:3"}),
                    hbrun_args=[FORK, "--min-np", "1",
                                "--host-discovery-script",
                                os.path.join(etc, "discover_hosts.sh")],
                    wrapper=job_user.wrapper)
    assert_finished(run, np_final=1)
    assert logged_sizes(run.out_dir) == [2, 1], run.describe()
    assert "hbrun: elastic generation 1 on hA:1\n" in run.stderr, \
        run.describe()
    with open(os.path.join(run.out_dir, "rank0.json")) as f:
        assert f.read()  # written by the user's rank, in its own directory
    assert os.stat(run.out_dir).st_uid == job_user.uid


def test_the_cache_falls_back_to_a_private_temp_dir_or_says_what_to_set(
        job_user, tmp_path):
    # As the user, HOME read-only: the cache goes to TMPDIR/hbcore-cache-
    # <uid> (created 0700); one another user could write is refused; with
    # no writable TMPDIR either, the error names what to set.
    code = (
        "import os, stat, tempfile\n"
        "from hbcore.user_cache import cache_dir\n"
        "path = cache_dir('HB_TF_OPS_CACHE')\n"
        "print(path, oct(stat.S_IMODE(os.stat(path).st_mode)))\n"
        "os.chmod(path, 0o777)\n"
        "for tmp in (os.environ['TMPDIR'], os.environ['HOME']):\n"
        "    tempfile.tempdir = tmp\n"
        "    try:\n"
        "        cache_dir('HB_TF_OPS_CACHE')\n"
        "    except OSError as exc:\n"
        "        print(exc)\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chown(str(tmp_path), job_user.uid, job_user.gid)
    os.chown(str(tmp), job_user.uid, job_user.gid)
    done = subprocess.run(
        job_user.wrapper + [sys.executable, "-c", code], cwd=str(tmp_path),
        env=base_env({"HOME": job_user.home, "TMPDIR": str(tmp)}),
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    home_cache = os.path.join(job_user.home, ".cache", "hbcore")
    private = os.path.join(str(tmp), "hbcore-cache-%d" % job_user.uid)
    assert done.stdout.splitlines() == [
        "%s 0o700" % private,
        "hbcore: no writable cache directory: %s (not writable); %s is not "
        "a directory of user %d closed to others; set HB_TF_OPS_CACHE or "
        "XDG_CACHE_HOME to a writable directory"
        % (home_cache, private, job_user.uid),
        "hbcore: no writable cache directory: %s (not writable); [Errno 13] "
        "Permission denied: '%s'; set HB_TF_OPS_CACHE or XDG_CACHE_HOME to "
        "a writable directory"
        % (home_cache, os.path.join(job_user.home, "hbcore-cache-%d"
                                    % job_user.uid)),
    ], done.stdout + done.stderr
