"""hbcore_tf.data.compute_service.TfDataServiceConfig as Horovod's (a
dataclass, compared by value): ``read(f) == config`` after
``config.write(f)``, a failed write leaves no temporary file, and
``read(timeout=None)`` waits without a limit.
"""
import os
import threading

import pytest

from support.data_service import call_in_thread
from support.tf_launch import REQUIRES_TF

pytestmark = REQUIRES_TF


def test_config_write_read_round_trip(tmp_path):
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(2, 3, "training", ["host-a:1234"], "00ff",
                                 timeout=7.5, reuse_dataset=True,
                                 round_robin=True)
    path = tmp_path / "compute.json"
    config.write(str(path))
    read = TfDataServiceConfig.read(str(path))
    assert read == config
    assert read.to_dict() == config.to_dict()
    assert hash(read) == hash(config)
    assert read != TfDataServiceConfig(2, 3, "training", ["host-a:1234"],
                                       "00fe", timeout=7.5,
                                       reuse_dataset=True, round_robin=True)
    assert read != config.to_dict()
    assert os.listdir(str(tmp_path)) == ["compute.json"]


def test_write_failure_leaves_no_temporary_file(tmp_path):
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(1, 1, "compute", ["h:1"], "00")
    config.key = object()  # not JSON-serializable: json.dump fails midway
    with pytest.raises(TypeError):
        config.write(str(tmp_path / "compute.json"))
    assert os.listdir(str(tmp_path)) == []


def test_read_without_a_time_limit(tmp_path, monkeypatch):
    """timeout=None waits without a limit (Horovod's read has none): a file
    that a writer creates once the reader is waiting is read."""
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    config = TfDataServiceConfig(1, 2, "compute", ["h:1"], "00", timeout=3)
    path = str(tmp_path / "compute.json")
    config.write(path)
    assert TfDataServiceConfig.read(path, True, timeout=None) == config
    os.remove(path)
    # Handshake: the writer writes once the reader looked for the file.
    looked = threading.Event()
    real_exists = os.path.exists

    def exists(name):
        if name == path:
            looked.set()
        return real_exists(name)

    monkeypatch.setattr(os.path, "exists", exists)
    writer = threading.Thread(target=lambda: (looked.wait(30),
                                              config.write(path)))
    writer.start()
    try:
        got = call_in_thread(lambda: TfDataServiceConfig.read(
            path, wait_for_file_creation=True, timeout=None), timeout=30)
    finally:
        writer.join(30)
    assert looked.is_set() and got == config
