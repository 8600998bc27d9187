"""DeepRec's embedding-variable options (``hb.EmbeddingVariableOption``,
``hb.CounterFilter``, ``hb.GlobalStepEvict``, ``hb.L2WeightEvict``), with
DeepRec's signatures and defaults (its python/ops/variables.py and
docs/docs_en/Feature-Filter.md, Feature-Eviction.md), and the one check
a dynamic table makes of them (``admission_threshold``).

The classes only hold their arguments, as DeepRec's do; a table reads
them when it is built. What is honoured (docs/embedding.md, "Dynamic
tables"): ``CounterFilter(filter_freq)``. Eviction options are accepted
by the constructors and refused by a table (NotImplementedError naming
it); the other ``EmbeddingVariableOption`` arguments (hash map type,
partitions, storage tiers) are DeepRec's storage settings, which have no
meaning here and are ignored.
"""
import numbers
from typing import Any, Optional


class CounterFilter:
    """Admission by count: an id looked up fewer than ``filter_freq``
    times in all (every rank's lookups) has no row: it reads 0 (DeepRec's
    ``default_value_no_permission``) and is not trained. 0 (the default)
    and 1 admit every id.

    Args:
        filter_freq: the count at which an id is admitted.
    """

    def __init__(self, filter_freq: int = 0) -> None:
        self.filter_freq = filter_freq


class GlobalStepEvict:
    """Eviction of rows not updated for ``steps_to_live`` global steps
    (DeepRec's; not supported yet by hbcore's tables).

    Args:
        steps_to_live: steps a row lives without an update; None: off.
    """

    def __init__(self, steps_to_live: Optional[int] = None) -> None:
        self.steps_to_live = steps_to_live


class L2WeightEvict:
    """Eviction of rows whose L2 norm is below ``l2_weight_threshold``
    (DeepRec's; not supported yet by hbcore's tables).

    Args:
        l2_weight_threshold: the norm threshold; -1.0 (or <= 0): off.
    """

    def __init__(self, l2_weight_threshold: float = -1.0) -> None:
        self.l2_weight_threshold = l2_weight_threshold


class EmbeddingVariableOption:
    """DeepRec's options of an embedding variable (dynamic table).

    Args:
        ht_type: DeepRec's hash map type (ignored).
        ht_partition_num: DeepRec's hash map partitions (ignored).
        evict_option: a GlobalStepEvict or L2WeightEvict, or None.
        ckpt: DeepRec's checkpoint option (ignored).
        filter_option: a CounterFilter, or None.
        storage_option: DeepRec's storage tiers (ignored; DeepRec's
            default is a StorageOption(), here None).
        init_option: DeepRec's InitializerOption (ignored; its
            default_value_no_permission is 0, the value used here).
    """

    def __init__(self, ht_type: str = "", ht_partition_num: int = 1000,
                 evict_option: Any = None, ckpt: Any = None,
                 filter_option: Any = None, storage_option: Any = None,
                 init_option: Any = None) -> None:
        self.ht_type = ht_type
        self.ht_partition_num = ht_partition_num
        self.evict_option = evict_option
        self.ckpt = ckpt
        self.filter_option = filter_option
        self.storage_option = storage_option
        self.init_option = init_option


def _turned_on(evict: Any) -> bool:
    if isinstance(evict, GlobalStepEvict):
        return evict.steps_to_live is not None
    if isinstance(evict, L2WeightEvict):
        return evict.l2_weight_threshold > 0
    return True


def admission_threshold(ev_option: Any, table: str) -> int:
    """The count at which a table admits a key (0: every key), from the
    table's ``ev_option``.

    Args:
        ev_option: None or an EmbeddingVariableOption.
        table: the table's name, for errors.

    Returns:
        ``filter_freq``, or 0 without a CounterFilter.

    Raises:
        TypeError: ``ev_option`` is not an EmbeddingVariableOption, its
            filter_option not a CounterFilter, or filter_freq not an int.
        ValueError: a negative filter_freq.
        NotImplementedError: an eviction option that is turned on.
    """
    if ev_option is None:
        return 0
    if not isinstance(ev_option, EmbeddingVariableOption):
        raise TypeError(
            "dynamic embedding table %r: ev_option must be an "
            "hb.EmbeddingVariableOption, got %s" % (
                table, type(ev_option).__name__))
    evict = ev_option.evict_option
    if evict is not None and _turned_on(evict):
        raise NotImplementedError(
            "dynamic embedding table %r: eviction (%s) is not supported "
            "yet; rows are never freed" % (table, type(evict).__name__))
    option = ev_option.filter_option
    if option is None:
        return 0
    if not isinstance(option, CounterFilter):
        raise TypeError(
            "dynamic embedding table %r: filter_option must be an "
            "hb.CounterFilter, got %s" % (table, type(option).__name__))
    freq = option.filter_freq
    if isinstance(freq, bool) or not isinstance(freq, numbers.Integral):
        raise TypeError(
            "dynamic embedding table %r: CounterFilter's filter_freq must "
            "be an int, got %r" % (table, freq))
    if freq < 0:
        raise ValueError(
            "dynamic embedding table %r: CounterFilter's filter_freq must "
            "be >= 0, got %d" % (table, freq))
    return int(freq)
