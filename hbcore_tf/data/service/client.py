"""The training side of the tf.data service (Horovod's
``horovod.tensorflow.data.compute_service``, whose name
``hbcore_tf.data.compute_service`` exports it): input pipelines that run
in a separate compute job (``hbcore_tf.data.compute_worker``), read by the
training job.

    # compute job (writes the config file, serves until told to stop):
    hbrun -np 4 python -m hbcore_tf.data.compute_worker /tmp/compute.json
    # training job:
    cfg = TfDataServiceConfig.read("/tmp/compute.json", wait_for_file_creation=True)
    with tf_data_service(cfg, hvd.rank()) as dispatcher_address:
        ds = make_dataset().send_to_data_service(cfg, hvd.rank(), hvd.size())
        ... train ...
    if hvd.rank() == 0:
        cfg.compute_client().shutdown()          # ends the compute job

Dispatchers: one shared by every training rank (``--dispatchers 1``, the
default; with ``distributed_epoch`` every element reaches exactly one
training rank per epoch), or one per training rank (``--dispatchers N``:
the training job must then have N ranks, and each rank reads what its own
dispatcher's workers produce). They run in the compute job
(``--dispatcher-side compute``) or in the training processes
(``--dispatcher-side training``; ``tf_data_service`` starts them there).
The dataset's functions (map, filter, ...) run in the compute job's
worker processes.

Errors, never hangs: a config file that does not appear within the
timeout, a training job whose size does not match the dispatchers, or a
compute job that cannot be reached raise (TimeoutError, ValueError,
ConnectionError); while reading, a watchdog thread ends the training
process with a message if the compute job goes away, because the tf.data
service client itself would retry for a long time.
"""
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import tensorflow as tf

from hbcore_tf.data.service.rpc import ComputeServiceClient, advertised_host

DISPATCHER_SIDES = ("compute", "training")


class TfDataServiceConfig:
    """What the compute job tells the training job (the config file).

    Args:
      dispatchers: number of dispatchers (1, or the training job's size).
      workers_per_dispatcher: compute ranks (tf.data workers) per dispatcher.
      dispatcher_side: "compute" or "training": where dispatchers run.
      addresses: the compute service's address(es), host:port.
      key: the compute service's authentication key.
      timeout: seconds to wait for dispatchers and workers to register.
      reuse_dataset: default of send_to_data_service's reuse_dataset.
      round_robin: default of send_to_data_service's round_robin.

    Raises:
      ValueError: bad counts or dispatcher side.
    """

    def __init__(self, dispatchers: int, workers_per_dispatcher: int,
                 dispatcher_side: str, addresses: List[str], key: str,
                 timeout: float = 60, reuse_dataset: bool = False,
                 round_robin: bool = False) -> None:
        if int(dispatchers) < 1 or int(workers_per_dispatcher) < 1:
            raise ValueError("dispatchers and workers_per_dispatcher must be "
                             "positive, got %r and %r" % (
                                 dispatchers, workers_per_dispatcher))
        if dispatcher_side not in DISPATCHER_SIDES:
            raise ValueError("dispatcher_side must be one of %s, got %r" % (
                DISPATCHER_SIDES, dispatcher_side))
        self.dispatchers = int(dispatchers)
        self.workers_per_dispatcher = int(workers_per_dispatcher)
        self.dispatcher_side = dispatcher_side
        self.addresses = list(addresses)
        self.key = key
        self.timeout = float(timeout)
        self.reuse_dataset = bool(reuse_dataset)
        self.round_robin = bool(round_robin)

    def to_dict(self) -> Dict[str, Any]:
        """The config as a JSON-serializable dict (the file's contents)."""
        return {"dispatchers": self.dispatchers,
                "workers_per_dispatcher": self.workers_per_dispatcher,
                "dispatcher_side": self.dispatcher_side,
                "addresses": self.addresses, "key": self.key,
                "timeout": self.timeout, "reuse_dataset": self.reuse_dataset,
                "round_robin": self.round_robin}

    @staticmethod
    def from_dict(config: Dict[str, Any]) -> "TfDataServiceConfig":
        """The config that ``to_dict`` turned into ``config``.

        Args:
          config: the constructor's arguments by name.

        Raises:
          ValueError: bad counts or dispatcher side.
          TypeError: an unknown or missing argument.
        """
        return TfDataServiceConfig(**config)

    def write(self, filename: str) -> None:
        """Writes the config file atomically (readers never see half).

        Args:
          filename: the file to write (a temporary file beside it is
            renamed over it).

        Raises:
          OSError: the file cannot be written.
        """
        tmp = "%s.%d.tmp" % (filename, os.getpid())
        try:
            with open(tmp, "w") as f:
                json.dump(self.to_dict(), f)
            os.replace(tmp, filename)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)  # no half-written file left beside it
            raise

    @staticmethod
    def read(filename: str, wait_for_file_creation: bool = False,
             timeout: Optional[float] = 60) -> "TfDataServiceConfig":
        """Reads a config file written by the compute job.

        Args:
          filename: the file.
          wait_for_file_creation: wait for the compute job to write it.
          timeout: seconds to wait for it; None: no limit (Horovod's
            ``read`` waits without one).

        Returns:
          The TfDataServiceConfig in the file.

        Raises:
          FileNotFoundError: the file does not exist (and no wait).
          TimeoutError: it did not appear within ``timeout`` seconds.
          ValueError: the file is not valid JSON, or holds bad counts or
            a bad dispatcher side.
          TypeError: the file lacks an entry or has an unknown one.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.05
        while not os.path.exists(filename):
            if not wait_for_file_creation:
                raise FileNotFoundError(
                    "tf.data service config file %s does not exist (start "
                    "the compute job first, or pass "
                    "wait_for_file_creation=True)" % filename)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    "the tf.data service config file %s did not appear "
                    "within %ss: is the compute job (python -m "
                    "hbcore_tf.data.compute_worker %s) running?" % (
                        filename, timeout, filename))
            time.sleep(pause)  # the file is created by another job
            pause = min(pause * 2, 1.0)
        with open(filename) as f:
            return TfDataServiceConfig.from_dict(json.load(f))

    def compute_client(self, verbose: bool = False) -> "ComputeClient":
        """A client of the compute job's service; ``shutdown()`` ends it.

        Args:
          verbose: print a line about every second while a wait goes on.

        Returns:
          A ComputeClient (it connects on its first call).
        """
        return ComputeClient(self, verbose=verbose)

    def __eq__(self, other: object) -> bool:
        """Configs are equal when every entry is (as Horovod's dataclass):
        ``TfDataServiceConfig.read(f) == config`` after ``config.write(f)``.
        """
        if not isinstance(other, TfDataServiceConfig):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        shown = dict(self.to_dict(), key="...")
        return "TfDataServiceConfig(%s)" % ", ".join(
            "%s=%r" % kv for kv in shown.items())


class ComputeClient:
    """Talks to the compute job (Horovod's ComputeClient).

    Raises (every method):
      ConnectionError: the compute job cannot be reached.
    """

    def __init__(self, config: TfDataServiceConfig, verbose: bool = False
                 ) -> None:
        self.config = config
        self._rpc = ComputeServiceClient(config.addresses[0], config.key,
                                         verbose)

    def register_dispatcher(self, dispatcher_id: int, address: str) -> None:
        """Tells the compute service where dispatcher ``dispatcher_id`` is.

        Args:
          dispatcher_id: the dispatcher's index.
          address: its host:port (without ``grpc://``).

        Raises:
          ValueError: another address is registered for that dispatcher
            (its workers serve that one).
          ConnectionError: the compute job cannot be reached.
        """
        reply = self._rpc.call("register_dispatcher", dispatcher_id, address)
        if reply is not True:
            raise ValueError(
                "dispatcher %d is already registered at %s, cannot register "
                "it at %s: the compute job's workers serve the first one "
                "(start a new compute job for a new training job)" % (
                    dispatcher_id, reply, address))

    def wait_for_dispatcher_registration(self, dispatcher_id: int,
                                         timeout: Optional[float] = None
                                         ) -> str:
        """The address of dispatcher ``dispatcher_id`` once registered.

        Args:
          dispatcher_id: the dispatcher's index.
          timeout: seconds to wait; None: the config's ``timeout``.

        Returns:
          The host:port it registered.

        Raises:
          TimeoutError: it did not register within ``timeout`` seconds.
          ConnectionError: the compute job cannot be reached.
        """
        return self._rpc.wait_for(
            ("wait_dispatcher", dispatcher_id),
            "dispatcher %d to register" % dispatcher_id,
            self.config.timeout if timeout is None else timeout)

    def register_worker_for_dispatcher(self, dispatcher_id: int,
                                       worker_id: Optional[int] = None
                                       ) -> None:
        """Counts one more tf.data worker of dispatcher ``dispatcher_id``.

        Args:
          dispatcher_id: the dispatcher the worker serves.
          worker_id: the worker's id (its compute rank): registering one id
            again counts it once, as in Horovod; None: a new worker.

        Raises:
          ConnectionError: the compute job cannot be reached.
        """
        self._rpc.call("register_worker", dispatcher_id, worker_id)

    def wait_for_dispatcher_worker_registration(
            self, dispatcher_id: int, timeout: Optional[float] = None) -> None:
        """Returns once all workers of dispatcher ``dispatcher_id`` joined.

        Args:
          dispatcher_id: the dispatcher's index.
          timeout: seconds to wait; None: the config's ``timeout``.

        Raises:
          TimeoutError: fewer than ``workers_per_dispatcher`` workers
            registered within ``timeout`` seconds.
          ConnectionError: the compute job cannot be reached.
        """
        self._rpc.wait_for(
            ("wait_workers", dispatcher_id,
             self.config.workers_per_dispatcher),
            "the %d tf.data workers of dispatcher %d" % (
                self.config.workers_per_dispatcher, dispatcher_id),
            self.config.timeout if timeout is None else timeout)

    def wait_for_shutdown(self) -> None:
        """Returns once the compute job was asked to stop.

        Raises:
          ConnectionError: the compute job cannot be reached.
        """
        self._rpc.wait_for(("wait_shutdown",), "the compute job to stop",
                           None)

    def ping(self) -> None:
        """Checks that the compute service answers.

        Raises:
          ConnectionError: the compute job cannot be reached.
        """
        self._rpc.call("ping")

    def shutdown(self) -> None:
        """Tells the compute job to stop (it then exits cleanly).

        This process's reader watchdog stands down first: the compute job
        going away is expected from here on.
        """
        _Watchdog.stop_watching()
        self._rpc.call("shutdown")
        self._rpc.close()


def _dispatcher_id(config: TfDataServiceConfig, rank: int,
                   size: Optional[int]) -> int:
    """Which dispatcher training rank ``rank`` uses.

    Raises:
      ValueError: the training job's size does not match the dispatchers.
    """
    if config.dispatchers == 1:
        return 0
    if size is not None and size != config.dispatchers:
        raise ValueError(
            "the compute job runs %d dispatchers (one per training rank), "
            "but the training job has %d ranks: start the compute job with "
            "--dispatchers %d or 1" % (config.dispatchers, size, size))
    if not 0 <= rank < config.dispatchers:
        raise ValueError("training rank %d has no dispatcher: the compute "
                         "job runs %d" % (rank, config.dispatchers))
    return rank


# How often a reader's watchdog pings the compute service (seconds). The
# compute job keeps its service up for longer than that after it was told
# to stop (compute_worker.py), so that every watchdog sees the request.
WATCH_INTERVAL_S = 2.0
# How long one ping may go unanswered (seconds): a compute service answers
# in microseconds, so a ping this slow means a stopped or unreachable host,
# which counts as a failed ping (the watchdog would otherwise block in it).
WATCH_TIMEOUT_S = 10.0


class _Watchdog:
    """Ends this process if the compute job goes away while it is read.

    The tf.data service client retries an unreachable dispatcher for a
    long time inside a TF op; a job whose compute side died would hang
    there. One daemon thread per process pings the compute service every
    WATCH_INTERVAL_S; when it cannot be reached, or does not answer within
    WATCH_TIMEOUT_S, twice in a row, it prints why and exits the process
    with status 1 (hbrun then stops the other ranks). The watch ends without a word when ``stop_watching()`` is
    called (leaving ``tf_data_service``; asking the compute job to stop
    from this process) or when a ping answers that the training job asked
    the compute job to stop: a compute job that ends on request is not a
    lost one, and readers that used ``send_to_data_service`` outside
    ``tf_data_service`` keep running after it.
    """

    _lock = threading.Lock()
    _instance: Optional["_Watchdog"] = None

    def __init__(self, config: TfDataServiceConfig) -> None:
        self._client = ComputeServiceClient(config.addresses[0], config.key,
                                            timeout=WATCH_TIMEOUT_S)
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True,
                         name="hbcore-data-service-watchdog").start()

    @classmethod
    def watch(cls, config: TfDataServiceConfig) -> None:
        with cls._lock:
            if cls._instance is None:
                cls._instance = _Watchdog(config)

    @classmethod
    def stop_watching(cls) -> None:
        with cls._lock:
            if cls._instance is not None:
                cls._instance._stop.set()
                cls._instance = None

    def _run(self) -> None:
        failures = 0
        while not self._stop.wait(WATCH_INTERVAL_S):
            try:
                if not self._client.call("ping"):
                    return  # the compute job was asked to stop
                failures = 0
            except ConnectionError as exc:
                failures += 1
                if failures >= 2 and not self._stop.is_set():
                    print("hbcore: %s; stopping this training process" % exc,
                          file=sys.stderr, flush=True)
                    os._exit(1)


@contextlib.contextmanager
def tf_data_service(compute_config: TfDataServiceConfig, rank: int
                    ) -> Iterator[str]:
    """The dispatcher this training rank reads from, as a context.

    With ``dispatcher_side="training"`` the dispatcher runs in this
    process (started here, registered with the compute job, stopped at
    exit; with one shared dispatcher, rank 0 runs it); otherwise it is the
    compute job's. Waits until the dispatcher's workers registered.

    Args:
      compute_config: the compute job's TfDataServiceConfig.
      rank: this training rank.

    Yields:
      The dispatcher's address ("grpc://host:port").

    Raises:
      ValueError: the training size does not match the dispatchers.
      TimeoutError: the dispatcher or its workers did not register in time.
      ConnectionError: the compute job cannot be reached.
    """
    config = compute_config
    client = config.compute_client()
    dispatcher_id = _dispatcher_id(config, rank, None)
    server = None
    watching = False
    try:
        if config.dispatcher_side == "training" and (
                config.dispatchers > 1 or rank == 0):
            server = tf.data.experimental.service.DispatchServer(
                tf.data.experimental.service.DispatcherConfig(port=0))
            port = int(server.target.rsplit(":", 1)[1])
            client.register_dispatcher(dispatcher_id,
                                       "%s:%d" % (advertised_host(), port))
        address = client.wait_for_dispatcher_registration(dispatcher_id)
        client.wait_for_dispatcher_worker_registration(dispatcher_id)
        _Watchdog.watch(config)
        watching = True
        yield "grpc://" + address
    finally:
        # Also when a wait above failed: the dispatcher started here (its
        # port, its threads) does not outlive the error.
        if watching:
            _Watchdog.stop_watching()
        if server is not None:
            server._stop()  # pylint: disable=protected-access
        client._rpc.close()  # pylint: disable=protected-access


# How many shared datasets (one job for every rank) this process sent.
_SHARED_SENT = [0]
_SHARED_LOCK = threading.Lock()


def send_to_data_service(dataset: tf.data.Dataset,
                         compute_config: TfDataServiceConfig, rank: int,
                         size: Optional[int] = None,
                         reuse_dataset: Optional[bool] = None,
                         round_robin: Optional[bool] = None
                         ) -> tf.data.Dataset:
    """Runs ``dataset`` in the compute job and reads it from there
    (``ds.send_to_data_service(config, rank, size)``).

    Processing mode ``distributed_epoch`` (as in Horovod): each epoch
    every element is produced once, by one of the dispatcher's workers,
    and goes to one reader of the job; with ``round_robin`` the ``size``
    training ranks read the shared job in turns.

    Args:
      dataset: the dataset whose pipeline the compute job runs.
      compute_config: the compute job's TfDataServiceConfig.
      rank: this training rank.
      size: the training job's size (checked against the dispatchers).
      reuse_dataset: with one shared dispatcher, every training rank reads
        one job, so each element reaches exactly one rank (give every rank
        the same dataset; every rank must send its shared datasets in the
        same order, each one reading a job of its own); without it each
        rank reads its own job, so each
        element of a rank's dataset reaches that rank (shard the dataset
        by rank yourself). Default: the config's value.
      round_robin: with ``reuse_dataset``, read the shared job in
        round-robin order, rank by rank (an infinite dataset; every rank
        must then read the same number of batches); without it, as in
        Horovod, it changes nothing. Default: the config's value.

    Returns:
      The dataset read from the tf.data service.

    Raises:
      ValueError: the training size does not match the dispatchers, or
        ``round_robin`` and ``reuse_dataset`` with more than one
        dispatcher or without ``size``.
      TimeoutError, ConnectionError: see tf_data_service.
    """
    config = compute_config
    dispatcher_id = _dispatcher_id(config, rank, size)
    reuse = config.reuse_dataset if reuse_dataset is None else reuse_dataset
    rr = config.round_robin if round_robin is None else round_robin
    # Horovod reads in round-robin order only a job the ranks share.
    rr = bool(rr and reuse)
    # Arguments first: a mistake is named before any wait on the job.
    if rr and config.dispatchers != 1:
        raise ValueError("round_robin needs one shared dispatcher, the "
                         "compute job runs %d" % config.dispatchers)
    if rr and size is None:
        raise ValueError("round_robin needs the training size")
    client = config.compute_client()
    address = client.wait_for_dispatcher_registration(dispatcher_id)
    shared = config.dispatchers == 1 and reuse
    # A shared job is named, so every rank joins it; a rank's own job is
    # anonymous, so each pass over the dataset (epoch) starts a fresh job.
    # Each shared dataset gets a job of its own: the ranks send the same
    # datasets in the same order, so the n-th one of every rank has the
    # same name, and another dataset (a validation set, the training set
    # built anew) never joins an earlier one's job, whose elements, or
    # end, it would read instead of its own.
    job_name = None
    if shared:
        with _SHARED_LOCK:
            index = _SHARED_SENT[0]
            _SHARED_SENT[0] += 1
        job_name = client._rpc.call(  # pylint: disable=protected-access
            "job_name", index, rank)
    client._rpc.close()  # pylint: disable=protected-access
    _Watchdog.watch(config)
    kwargs: Dict[str, Any] = {}
    if rr:
        kwargs.update(consumer_index=rank, num_consumers=size)
    # distributed_epoch also for round-robin reads: with parallel_epochs
    # every worker would produce the whole dataset, and the ranks would get
    # each element once per worker.
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode="distributed_epoch", service="grpc://" + address,
        job_name=job_name, **kwargs))


tf.data.Dataset.send_to_data_service = send_to_data_service

__all__ = ["ComputeClient", "TfDataServiceConfig", "send_to_data_service",
           "tf_data_service"]
