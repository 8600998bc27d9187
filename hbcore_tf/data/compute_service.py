"""Horovod's ``horovod.tensorflow.data.compute_service``: the training
side of the tf.data service (hbcore_tf/data/service/client.py, where the
docs are). Importing it gives ``tf.data.Dataset`` its
``send_to_data_service`` method, as Horovod's does."""
from hbcore_tf.data.service.client import (ComputeClient,
                                           TfDataServiceConfig,
                                           send_to_data_service,
                                           tf_data_service)

__all__ = ["ComputeClient", "TfDataServiceConfig", "send_to_data_service",
           "tf_data_service"]
