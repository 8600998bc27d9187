"""``hbcore_tf.keras.elastic``: not supported; see hbcore_tf/elastic.py
(importing this module raises its ImportError)."""
import hbcore_tf.elastic  # noqa: F401  (raises ImportError)
