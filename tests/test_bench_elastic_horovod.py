"""benchmarks/elastic_horovod.py without Horovod: the module imports, reads
``horovodrun --check-build``'s report, and builds its table rows (the
Horovod jobs themselves run only where Horovod is built; CI has none)."""
import importlib.util
import os
import socket

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = importlib.util.spec_from_file_location(
    "elastic_horovod", os.path.join(ROOT, "benchmarks", "elastic_horovod.py"))
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)

# The shape of Horovod 0.28.1's report (launch.py, check_build).
REPORT = """
    Horovod v0.28.1:

    Available Frameworks:
        [X] TensorFlow
        [ ] PyTorch
        [ ] MXNet

    Available Controllers:
        [X] MPI
        [%s] Gloo

    Available Tensor Operations:
        [ ] NCCL
        [ ] DDL
        [ ] CCL
        [X] MPI
        [%s] Gloo
"""


def test_check_build_report():
    built = bench.parse_check_build(REPORT % ("X", "X"))
    assert built["Available Frameworks"] == {
        "TensorFlow": True, "PyTorch": False, "MXNet": False}
    assert built["Available Controllers"] == {"MPI": True, "Gloo": True}
    assert built["Available Tensor Operations"]["Gloo"] is True
    assert bench.missing_features(built) == []
    without_gloo = bench.parse_check_build(REPORT % (" ", " "))
    assert bench.missing_features(without_gloo) == [
        "Gloo (Available Controllers)", "Gloo (Available Tensor Operations)"]
    assert bench.missing_features(bench.parse_check_build("")) == [
        "TensorFlow (Available Frameworks)", "Gloo (Available Controllers)",
        "Gloo (Available Tensor Operations)"]


def test_host_names_and_command():
    names = bench.local_host_names(2)
    assert len(set(names)) == 2
    assert all(socket.gethostbyname(n) for n in names)
    command = bench.horovodrun(3, ["--rank", "commit"], ["a", "b", "c"])
    assert command[command.index("-np") + 1] == "3"
    assert command[command.index("--min-np") + 1] == "2"
    assert command[command.index("-H") + 1] == "a:1,b:1,c:1"
    assert "--gloo" in command and command[-2:] == ["--rank", "commit"]


def test_table_rows():
    assert bench.table_lines({2: {}}, "no Horovod here") == [
        "Horovod + Gloo elastic: not measured (no Horovod here)"]
    hbcore = {2: {"dense_ms": 30.0, "tf_commit_ms": 8.0, "recovery_s": 6.0}}
    horovod = {2: {"step_ms": 50.0, "object_ms": 0.5, "variable_ms": 2.0,
                   "recovery_s": 3.0, "reform_s": 1.0, "sync_s": 0.5}}
    lines = bench.table_lines(hbcore, horovod)
    text = "\n".join(lines)
    assert "0.10 %" in text          # 0.5 / (10 * 50)
    assert "60.0 x" in text and "4.0 x" in text  # 30 / 0.5, 8 / 2
    assert "2.0 x" in text           # recovery 6 / 3
    detection = [line for line in lines if "detection" in line]
    assert detection and detection[0].split()[-2:] == ["not", "seen"]


def test_split_recovery():
    # Survivor b notices at Gloo's timeout: the parts end at its marks.
    a = {"restore": 100.5, "reset": 131.0, "first": 131.5}
    b = {"restore": 130.0, "reset": 131.2, "first": 131.6}
    got = bench.split_recovery(100.0, [a, b])
    want = {"recovery_s": 31.6, "detect_s": 30.0, "detect_first_s": 0.5,
            "reform_s": 1.2, "sync_s": 0.4}
    assert set(got) == set(want)
    assert all(abs(got[k] - want[k]) < 1e-9 for k in want), got
    notice = bench.split_recovery(100.0, [{"reset": 102.0, "first": 103.0}])
    assert notice == {"recovery_s": 3.0, "sync_s": 1.0}
