"""Reads an endless dataset through the tf.data service and writes
STARTED_FILE after the first element; used to check that a training
process whose compute job dies ends with an error instead of hanging.

    python data_service_reader.py CONFIG STARTED_FILE
"""
import sys

from train_common import tf  # noqa: F401

import hbcore_tf as hvd  # noqa: E402
from hbcore_tf.data.compute_service import (TfDataServiceConfig,  # noqa: E402
                                            tf_data_service)


def main() -> None:
    path, started = sys.argv[1], sys.argv[2]
    hvd.init()
    config = TfDataServiceConfig.read(path, wait_for_file_creation=True)
    with tf_data_service(config, hvd.rank()):
        ds = tf.data.Dataset.range(10 ** 9).send_to_data_service(
            config, hvd.rank(), hvd.size())
        for count, _ in enumerate(ds):
            if count == 0:
                with open(started, "w") as f:
                    f.write("reading\n")
    print("the endless dataset ended", flush=True)


if __name__ == "__main__":
    main()
