"""DeepRec's embedding-variable options (``hb.EmbeddingVariableOption``,
``hb.CounterFilter``, ``hb.GlobalStepEvict``, ``hb.L2WeightEvict``), with
DeepRec's signatures and defaults (its python/ops/variables.py and
docs/docs_en/Feature-Filter.md, Feature-Eviction.md), and the one check
dynamic table makes of them (``admission_threshold``, ``eviction``), and
their form in a Keras layer's config (``to_config`` / ``from_config``).

The classes only hold their arguments, as DeepRec's do; a table reads
them when it is built. What is honoured (docs/embedding.md, "Dynamic
tables"): ``CounterFilter(filter_freq)``, ``GlobalStepEvict(steps_to_live)``
and ``L2WeightEvict(l2_weight_threshold)``; the other
``EmbeddingVariableOption`` arguments (hash map type, partitions, storage
tiers) are DeepRec's storage settings, which have no meaning here and are
ignored.
"""
import numbers
from typing import Any, Dict, NamedTuple, Optional


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
    """Eviction of rows not updated for more than ``steps_to_live`` steps
    (DeepRec's: a row whose version, the step of its last training
    lookup, is more than ``steps_to_live`` behind the table's step is
    dropped when the table is saved).

    Args:
        steps_to_live: steps a row lives without an update; None or 0:
            off (DeepRec's 0).
    """

    def __init__(self, steps_to_live: Optional[int] = None) -> None:
        self.steps_to_live = steps_to_live


class L2WeightEvict:
    """Eviction of rows whose L2 weight, DeepRec's ``0.5 * sum(row**2)``,
    is below ``l2_weight_threshold`` (dropped when the table is saved).

    Args:
        l2_weight_threshold: the threshold; -1.0 (or <= 0): off.
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


class Eviction(NamedTuple):
    """A table's eviction policy (``eviction``): exactly one of the two
    is set."""

    steps_to_live: Optional[int] = None
    l2_weight_threshold: Optional[float] = None


def _checked(ev_option: Any, table: str) -> Any:
    if ev_option is not None and not isinstance(ev_option,
                                                EmbeddingVariableOption):
        raise TypeError(
            "dynamic embedding table %r: ev_option must be an "
            "hb.EmbeddingVariableOption, got %s" % (
                table, type(ev_option).__name__))
    return ev_option


def _int_option(value: Any, what: str, table: str) -> int:
    """``value`` as an int >= 0 (``what`` names it in the errors)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("dynamic embedding table %r: %s must be an int, "
                        "got %r" % (table, what, value))
    if value < 0:
        raise ValueError("dynamic embedding table %r: %s must be >= 0, "
                         "got %d" % (table, what, value))
    return int(value)


def eviction(ev_option: Any, table: str) -> Optional[Eviction]:
    """The table's eviction policy, from its ``ev_option``.

    Args:
        ev_option: None or an EmbeddingVariableOption.
        table: the table's name, for errors.

    Returns:
        An Eviction, or None when there is no eviction option or it is
        off (``steps_to_live`` None or 0, ``l2_weight_threshold`` <= 0).

    Raises:
        TypeError: ``ev_option`` is not an EmbeddingVariableOption, its
            evict_option neither a GlobalStepEvict nor an L2WeightEvict,
            steps_to_live not an int or l2_weight_threshold not a number.
        ValueError: a negative steps_to_live.
    """
    ev_option = _checked(ev_option, table)
    evict = None if ev_option is None else ev_option.evict_option
    if evict is None:
        return None
    if isinstance(evict, GlobalStepEvict):
        if evict.steps_to_live is None:
            return None
        steps = _int_option(evict.steps_to_live,
                            "GlobalStepEvict's steps_to_live", table)
        return Eviction(steps_to_live=steps) if steps else None
    if isinstance(evict, L2WeightEvict):
        threshold = evict.l2_weight_threshold
        if isinstance(threshold, bool) or not isinstance(threshold,
                                                         numbers.Real):
            raise TypeError(
                "dynamic embedding table %r: L2WeightEvict's "
                "l2_weight_threshold must be a number, got %r" % (
                    table, threshold))
        return Eviction(l2_weight_threshold=float(threshold)) \
            if threshold > 0 else None
    raise TypeError(
        "dynamic embedding table %r: evict_option must be an "
        "hb.GlobalStepEvict or hb.L2WeightEvict, got %s" % (
            table, type(evict).__name__))


def to_config(filter_freq: int, evict: Optional[Eviction]
              ) -> Optional[Dict[str, Any]]:
    """The JSON form of a table's options in a Keras layer's config (None
    when neither is on); ``from_config`` reads it back.

    Args:
        filter_freq: the admission threshold.
        evict: the eviction policy, or None.

    Returns:
        ``{"filter_option": ..., "evict_option": ...}`` or None.
    """
    if not filter_freq and evict is None:
        return None
    config: Dict[str, Any] = {"filter_option": None, "evict_option": None}
    if filter_freq:
        config["filter_option"] = {"filter_freq": filter_freq}
    if evict is not None and evict.steps_to_live is not None:
        config["evict_option"] = {"steps_to_live": evict.steps_to_live}
    elif evict is not None:
        config["evict_option"] = {
            "l2_weight_threshold": evict.l2_weight_threshold}
    return config


def from_config(config: Dict[str, Any]) -> EmbeddingVariableOption:
    """The EmbeddingVariableOption of ``to_config``'s dict.

    Args:
        config: the dict.

    Returns:
        An EmbeddingVariableOption.
    """
    filter_option = config.get("filter_option")
    evict_option = config.get("evict_option")
    if evict_option is not None:
        evict_option = GlobalStepEvict(**evict_option) \
            if "steps_to_live" in evict_option \
            else L2WeightEvict(**evict_option)
    return EmbeddingVariableOption(
        evict_option=evict_option,
        filter_option=None if filter_option is None
        else CounterFilter(**filter_option))


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
    """
    ev_option = _checked(ev_option, table)
    option = None if ev_option is None else ev_option.filter_option
    if option is None:
        return 0
    if not isinstance(option, CounterFilter):
        raise TypeError(
            "dynamic embedding table %r: filter_option must be an "
            "hb.CounterFilter, got %s" % (table, type(option).__name__))
    return _int_option(option.filter_freq, "CounterFilter's filter_freq",
                       table)
