"""The compute job of a tf.data service setup (Horovod's
``horovod.tensorflow.data.compute_worker``, run as
``python -m hbcore_tf.data.compute_worker``).

    hbrun -np 4 python -m hbcore_tf.data.compute_worker /tmp/compute.json
    hbrun -np 4 python -m hbcore_tf.data.compute_worker --dispatchers 2 /tmp/compute.json
    hbrun -np 4 python -m hbcore_tf.data.compute_worker --dispatcher-side training /tmp/compute.json

Every rank runs one tf.data service worker; the ranks are split into
``--dispatchers`` groups of ``np / dispatchers`` workers (np must be a
multiple), each group serving one dispatcher. With the compute side, the
first rank of each group also runs its dispatcher; with the training side,
the training job's ``tf_data_service`` runs them and the workers wait for
them to register. Rank 0 runs the compute service (see rpc.py) and
writes the config file once every rank is ready to serve; the job then
serves until the training job calls ``compute_client().shutdown()``, or it
is interrupted (SIGINT/SIGTERM, through hbrun or to any one rank), and
exits 0 after stopping its servers.
"""
import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from typing import List, Optional

import tensorflow as tf

import hbcore
from hbcore_tf.data.service.client import (DISPATCHER_SIDES,
                                           WATCH_INTERVAL_S, ComputeClient,
                                           TfDataServiceConfig)
from hbcore_tf.data.service.rpc import (ComputeServiceServer, advertised_host,
                                        new_key)


HEARTBEAT_MS = 500


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parses the compute worker's command line.

    Args:
      argv: the arguments after the program name; None: ``sys.argv[1:]``.

    Returns:
      The parsed arguments.

    Raises:
      SystemExit: bad arguments, or ``--help`` (argparse).
    """
    parser = argparse.ArgumentParser(
        prog="python -m hbcore_tf.data.compute_worker",
        description="Runs tf.data service workers (and dispatchers) for a "
                    "training job; writes CONFIG for it.")
    parser.add_argument("configfile", help="the config file to write")
    parser.add_argument("--dispatchers", type=int, default=1,
                        help="number of dispatchers (1: shared by all "
                             "training ranks; else one per training rank)")
    parser.add_argument("--dispatcher-side", default="compute",
                        choices=DISPATCHER_SIDES,
                        help="where dispatchers run (default: compute)")
    parser.add_argument("--timeout", type=float, default=60,
                        help="seconds to wait for dispatchers and workers "
                             "to register")
    parser.add_argument("--reuse-dataset", action="store_true",
                        help="default of send_to_data_service's "
                             "reuse_dataset")
    parser.add_argument("--round-robin", action="store_true",
                        help="default of send_to_data_service's round_robin")
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def _remove_config_file(filename: str, key: Optional[str]) -> None:
    """Removes the config file ``filename`` if it holds ``key`` (None: any
    key), so that no training job reads an address that is gone. A file
    another compute job wrote over it meanwhile is left alone.

    Args:
      filename: the config file.
      key: this compute job's key, or None for a stale file of any job.
    """
    with contextlib.suppress(OSError, ValueError):
        if key is not None:
            with open(filename) as f:
                if json.load(f).get("key") != key:
                    return
        os.remove(filename)


def main(argv: Optional[List[str]] = None) -> int:
    """Runs this rank of the compute job until shutdown or a signal.

    Args:
      argv: the arguments after the program name; None: ``sys.argv[1:]``.

    Returns:
      The exit status: 0, or 2 when the number of ranks is not a
      multiple of ``--dispatchers``.
    """
    args = parse_args(argv)
    hbcore.init()
    rank, size = hbcore.rank(), hbcore.size()
    if args.dispatchers < 1 or size % args.dispatchers:
        # Every rank sees the same arguments, so every rank stops here.
        print("compute_worker: the number of compute ranks (hbrun -np %d) "
              "must be a multiple of --dispatchers (%d)" % (
                  size, args.dispatchers), file=sys.stderr, flush=True)
        hbcore.shutdown()
        return 2
    per_dispatcher = size // args.dispatchers
    if rank == 0:
        # A file left by an earlier compute job that did not end cleanly
        # names a service that is gone: no training job should read it
        # while this one starts.
        _remove_config_file(args.configfile, None)
    server = ComputeServiceServer(new_key()) if rank == 0 else None
    service = hbcore.broadcast_object(
        (server.address, server.key) if server else None, root_rank=0)
    config = TfDataServiceConfig(
        args.dispatchers, per_dispatcher, args.dispatcher_side,
        [service[0]], service[1], timeout=args.timeout,
        reuse_dataset=args.reuse_dataset, round_robin=args.round_robin)
    client = ComputeClient(config, verbose=args.verbose)
    dispatcher_id = rank // per_dispatcher

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    dispatcher = None
    if args.dispatcher_side == "compute" and rank % per_dispatcher == 0:
        dispatcher = tf.data.experimental.service.DispatchServer(
            tf.data.experimental.service.DispatcherConfig(port=0))
        port = int(dispatcher.target.rsplit(":", 1)[1])
        client.register_dispatcher(dispatcher_id,
                                   "%s:%d" % (advertised_host(), port))
    # Everyone is ready to accept registrations: publish the config. With
    # training-side dispatchers the workers can only start once the
    # training job (which needs this file) registered its dispatchers.
    hbcore.barrier()
    if rank == 0:
        config.write(args.configfile)
        print("compute_worker: %d rank(s), %d dispatcher(s) on the %s side; "
              "config written to %s" % (size, args.dispatchers,
                                        args.dispatcher_side, args.configfile),
              flush=True)

    worker = None
    address = None
    rpc = client._rpc  # noqa: SLF001
    # Training-side dispatchers may never come (the training job failed
    # before tf_data_service): a stop request ends this wait as well.
    while not stop.is_set():
        try:
            address = client.wait_for_dispatcher_registration(
                dispatcher_id, timeout=1.0)
            break
        except TimeoutError:
            try:
                if rpc.call("wait_shutdown", 0.0):
                    break
            except ConnectionError:
                break  # rank 0's service is gone: the job is ending
        except ConnectionError:
            break
    if address is not None:
        worker = tf.data.experimental.service.WorkerServer(
            tf.data.experimental.service.WorkerConfig(
                dispatcher_address=address,
                worker_address=advertised_host() + ":%port%",
                # Workers learn about new jobs (every epoch of a rank's own
                # dataset is one) through heartbeats: keep them short.
                heartbeat_interval_ms=HEARTBEAT_MS))
        client.register_worker_for_dispatcher(dispatcher_id, rank)

    # Serve until the training job asks us to stop, or a signal arrives.
    while not stop.is_set():
        try:
            if rpc.call("wait_shutdown", 1.0):
                break
        except ConnectionError:
            break  # rank 0's service is gone: the job is ending
    if server is not None:
        # The job is ending: the next training job must wait for the next
        # compute job's file, not read this job's address.
        _remove_config_file(args.configfile, server.key)
    if stop.is_set():
        # A signal to this rank alone (not through hbrun) stops every rank:
        # the others wait for the shutdown flag, then for this rank in the
        # barrier below.
        try:
            rpc.call("shutdown", False)
        except ConnectionError:
            pass
    if worker is not None:
        worker._stop()  # pylint: disable=protected-access
    if dispatcher is not None:
        dispatcher._stop()  # pylint: disable=protected-access
    hbcore.barrier()
    if server is not None:
        if not stop.is_set():
            # Asked to stop by the training job: readers' watchdogs ping
            # every WATCH_INTERVAL_S and stand down once they see that;
            # stay reachable until each had its chance, so none takes the
            # end of this job for a lost compute job.
            stop.wait(WATCH_INTERVAL_S + 1.0)
        server.close()
    hbcore.shutdown()
    return 0
