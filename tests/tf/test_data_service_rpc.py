"""hbcore_tf.data.service.rpc, the compute service's RPC, as Horovod's
tf.data service integration: a client with a wrong key (a stale config
file) gets a ConnectionError naming the address and the key and the
service keeps answering (it used to kill the accepting thread, so every
later training process hung in its handshake); the compute client's
dispatcher and worker registrations and wait_for_shutdown as Horovod's.
"""
import socket
import threading

import pytest

from support.data_service import call_in_thread, port_of
from support.tf_launch import REQUIRES_TF

pytestmark = REQUIRES_TF


def test_wrong_key_client_does_not_stop_the_service():
    from hbcore_tf.data.service.rpc import (ComputeServiceClient,
                                            ComputeServiceServer, new_key)

    server = ComputeServiceServer(new_key())
    try:
        # A connection that never completes the handshake, then one with
        # another compute job's key (a stale config file).
        silent = socket.create_connection(("127.0.0.1",
                                           port_of(server.address)))
        stale = ComputeServiceClient(server.address, new_key())
        with pytest.raises(ConnectionError) as info:
            call_in_thread(lambda: stale.call("ping"))
        message = str(info.value)
        assert server.address in message and "key" in message, message
        assert "stale" in message, message
        # The service still answers the clients that hold its key.
        for _ in range(2):
            good = ComputeServiceClient(server.address, server.key)
            assert call_in_thread(lambda: good.call("ping")) is True
            good.close()
        silent.close()
    finally:
        server.close()


def test_compute_client_registrations_as_horovod():
    """A dispatcher id keeps its first address: registering another one
    is a ValueError naming both (its workers serve the first, so readers
    of the second would wait forever); a worker id counts once
    (register_worker_for_dispatcher(dispatcher_id, worker_id), Horovod's
    signature); wait_for_shutdown() returns once a stop was asked."""
    from hbcore_tf.data.service.rpc import ComputeServiceServer, new_key
    from hbcore_tf.data.compute_service import TfDataServiceConfig

    server = ComputeServiceServer(new_key())
    try:
        config = TfDataServiceConfig(1, 2, "training", [server.address],
                                     server.key, timeout=0.5)
        client = config.compute_client()
        client.register_dispatcher(0, "host-a:1")
        client.register_dispatcher(0, "host-a:1")  # the same: fine
        with pytest.raises(ValueError) as info:
            client.register_dispatcher(0, "host-b:2")
        assert "host-a:1" in str(info.value), str(info.value)
        assert "host-b:2" in str(info.value), str(info.value)
        assert client.wait_for_dispatcher_registration(0, 1) == "host-a:1"

        client.register_worker_for_dispatcher(0, 5)
        client.register_worker_for_dispatcher(0, 5)
        with pytest.raises(TimeoutError):  # one worker of the two
            client.wait_for_dispatcher_worker_registration(0)
        client.register_worker_for_dispatcher(0, 6)
        client.wait_for_dispatcher_worker_registration(0)

        waiter = config.compute_client()
        done = threading.Event()
        thread = threading.Thread(
            target=lambda: (waiter.wait_for_shutdown(), done.set()),
            daemon=True)
        thread.start()
        assert not done.wait(0.2)  # still waiting: no stop asked yet
        other = config.compute_client()
        other._rpc.call("shutdown")
        assert done.wait(20), "wait_for_shutdown did not return"
        thread.join(20)
    finally:
        server.close()
