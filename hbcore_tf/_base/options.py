"""HybridBackend's options: one typed object, parsed in one place.

Each option has a name, a type, a default and a doc line (the table
``OPTIONS`` below is the single definition; docs/hybridbackend.md lists
it). Its value comes from, in increasing precedence:

1. the default;
2. the environment variable ``HB_<NAME>`` (read once, at the first use of
   the options object; a bad value is a ValueError naming the variable);
3. the process-wide value set by ``hb.context.options.<name> = value`` or
   ``hb.context.update_params(<name>=value)``;
4. the innermost active ``hb.scope(<name>=value)`` /
   ``@hb.function(<name>=value)`` that sets it. Scopes stack and unwind;
   the stack is process-wide (not per thread), so code that a scope runs
   on other threads (Keras' data adapters, tf.data) sees the same values.

An unknown name is an AttributeError (reading or setting an attribute) or
a ValueError (``update_params``/``scope`` keywords) that names it and
lists the known options; a value of the wrong type is a TypeError naming
the option and the expected type; a value of the right type outside the
option's domain (``grad_nbuckets=0``, ``comm_default="GLOO"``) is a
ValueError.

These options are read by the Python layer only. The core's runtime knobs
(hbcore/knobs.py: HB_FUSION_THRESHOLD, HB_CYCLE_TIME, HB_TIMELINE, ...) are
read by the C++ core at ``init()``; no option here uses one of their
environment variables (checked at import).
"""
import contextlib
import numbers
import os
from collections.abc import Mapping
from typing import (Any, Callable, Dict, Iterator, List, NamedTuple,
                    Optional, Sequence, Tuple, Union)

import tensorflow as tf

import hbcore
from hbcore import knobs as _core_knobs
from hbcore import setting_values

# Backends that can carry hbcore's collectives (MPI on host memory, NCCL on
# CUDA memory; see DESIGN.md "Backends").
COMM_BACKENDS = ("MPI", "NCCL")
WIRE_DTYPES = ("float32", "float16", "bfloat16")
EMB_BACKENDS = ("DEFAULT", "PAIEV")


class Option(NamedTuple):
    """One option.

    Attributes:
        name: the attribute / keyword name.
        type: bool, int, float or str; or ``object`` for HybridBackend's
            options that hbcore accepts without using and whose values it
            does not type (any value, or what ``check`` accepts; the
            environment's text as is).
        default: the default value (of ``type``).
        doc: one line for the docs.
        check: None, or a function that raises ValueError for a value of
            the right type that the option does not accept, and returns the
            value to store (e.g. upper-cased).
        from_env: whether ``HB_<NAME>`` sets it (False for HybridBackend's
            options that have no variable there, so that an unrelated
            HB_MODE or HB_BATCH_SIZE in a user's shell is never read).
        per_column: whether it also takes a dict ``{column_name: value}``
            (HybridBackend's per-column embedding options; the
            environment's text is always one value).
    """

    name: str
    type: type
    default: Any
    doc: str
    check: Optional[Callable[[str, Any], Any]] = None
    from_env: bool = True
    per_column: bool = False

    @property
    def env(self) -> str:
        """The environment variable of the option: ``HB_<NAME>``."""
        return "HB_" + self.name.upper()


def _at_least(low: int) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value < low:
            raise ValueError("option %s must be >= %d, got %r" % (
                name, low, value))
        return value
    return check


def _one_of(choices: Tuple[str, ...], upper: bool) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        norm = value.upper() if upper else value.lower()
        if norm not in choices:
            raise ValueError("option %s must be one of %s, got %r" % (
                name, ", ".join(choices), value))
        return norm
    return check


def _optional(kind: type, low: float) -> Callable[[str, Any], Any]:
    """None, or a number of ``kind`` (int: not a bool) >= ``low``; numbers
    from the environment's text are parsed."""
    def check(name: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = kind(value)
            except ValueError:
                raise ValueError("option %s expects None or a number, got %r"
                                 % (name, value)) from None
        if isinstance(value, bool) or not isinstance(
                value, (int,) if kind is int else (int, float)):
            raise TypeError("option %s expects None or %s, got %r (%s)" % (
                name, kind.__name__, value, type(value).__name__))
        if value < low:
            raise ValueError("option %s must be >= %s, got %r" % (
                name, low, value))
        return kind(value)
    return check


def _emb_backend(name: str, value: Any) -> Any:
    norm = value.upper()
    if norm not in EMB_BACKENDS:
        raise ValueError(
            "option %s must be one of %s, got %r (DEFAULT: hbcore's "
            "sharded tables; PAIEV: DeepRec's EmbeddingVariable, hbcore's "
            "dynamic tables)" % (name, ", ".join(EMB_BACKENDS), value))
    return norm


def _comm_backend(name: str, value: Any) -> Any:
    value = _one_of(COMM_BACKENDS, upper=True)(name, value)
    if value == "NCCL":
        if not hbcore.nccl_built():
            raise ValueError("option %s=NCCL: this hbcore build has no NCCL "
                             "backend (hbcore.nccl_built() is False); "
                             "backends here: MPI" % name)
    return value


def _dtype_of(kind: str) -> Callable[[str, Any], Any]:
    """A check that takes the name of a TensorFlow dtype (a tf.DType is
    taken by its name before the check) that is floating or integer
    (``kind``), and stores its canonical name."""
    def check(name: str, value: Any) -> Any:
        try:
            dtype = tf.as_dtype(value)
        except TypeError:
            raise ValueError("option %s expects the name of a TensorFlow "
                             "dtype, got %r" % (name, value)) from None
        ok = dtype.is_floating if kind == "floating" else dtype.is_integer
        if not ok:
            raise ValueError("option %s expects a %s dtype, got %r" % (
                name, kind, value))
        return dtype.name
    return check


OPTIONS: Tuple[Option, ...] = (
    Option("grad_nbuckets", int, 1,
           "gradients of one step travel as this many fused allreduce "
           "groups, in reverse order of the variables (the first group "
           "holds the last variables, whose gradients are ready first)",
           _at_least(1)),
    Option("data_sync_drop_remainder", bool, True,
           "data sync: stop every rank after the step in which the first "
           "rank runs out of data (False: ranks out of data join with "
           "empty batches until every rank is out)"),
    Option("comm_default", str, "MPI",
           "backend that carries collectives of host tensors: MPI (NCCL is "
           "chosen for CUDA tensors by the core whatever this says); "
           "NCCL is accepted only by builds that have it",
           _comm_backend),
    Option("comm_pool_capacity", int, 1,
           "HybridBackend's number of communicators per device; hbcore has "
           "one communicator per process and fuses concurrent collectives "
           "instead, so values > 1 are accepted and change nothing",
           _at_least(1)),
    Option("sharding", bool, False,
           "sharded embedding (issue 10): variables created by "
           "hb.embedding_scope are partitioned across ranks"),
    Option("emb_min_rows_to_shard", int, 1,
           "sharded embedding: tables with fewer rows stay replicated "
           "(data parallel) instead of being sharded", _at_least(0)),
    Option("emb_unique", bool, True,
           "sharded embedding: deduplicate ids on each rank before they "
           "are sent to the owning ranks (or a dict per column)",
           per_column=True),
    Option("emb_checkpoint_block_bytes", int, 64 << 20,
           "sharded embedding: checkpoints store a tensor larger than this "
           "as row blocks of at most this size (a restoring rank reads "
           "only the blocks of its rows); smaller tensors are stored "
           "whole", _at_least(1)),
    Option("emb_wire_dtype", str, "float32",
           "sharded embedding: dtype of the embedding rows exchanged "
           "between ranks (float32, float16 or bfloat16; a tf.DType is "
           "taken by its name; or a dict per column)",
           _one_of(WIRE_DTYPES, upper=False), per_column=True),
    # HybridBackend's training options.
    Option("keep_checkpoint_max", object, None,
           "inside hb.scope, a tf.compat.v1.train.Saver keeps this many "
           "checkpoints (its max_to_keep), as HybridBackend's scope sets "
           "it; None: the Saver's own argument",
           _optional(int, 0),
           from_env=False),
    Option("keep_checkpoint_every_n_hours", object, None,
           "inside hb.scope, a Saver also keeps one checkpoint every this "
           "many hours; None: the Saver's own argument",
           _optional(float, 0),
           from_env=False),
    Option("grad_lazy_sync", bool, False,
           "HybridBackend reduces gradients in apply_gradients instead of "
           "compute_gradients; hbcore reduces them in compute_gradients, "
           "as Horovod does, and applies the same values: accepted, "
           "changes nothing"),
    Option("mode", object, None,
           "HybridBackend's estimator mode key (train, eval, infer); "
           "accepted, unused (tf.estimator is gone)",
           from_env=False),
    Option("batch_size", int, -1,
           "HybridBackend's batch size hint; accepted, unused",
           from_env=False),
    Option("model_dir", object, None,
           "HybridBackend's model directory; accepted, unused (give "
           "checkpoint_dir to hb.train.MonitoredTrainingSession)",
           from_env=False),
    Option("use_hierarchical_embedding_lookup", bool, False,
           "HybridBackend's two-level lookup exchange; hbcore's exchange "
           "is one alltoall per table: accepted, changes nothing"),
    # HybridBackend's embedding options that tune its own kernels (a value,
    # or a dict per column): hbcore's sharded tables place and exchange
    # rows their own way, so these are accepted and change nothing.
    Option("emb_backend", str, "DEFAULT",
           "HybridBackend's embedding backend: DEFAULT (sharded tables) or "
           "PAIEV (embedding columns over dynamic tables, DeepRec's "
           "EmbeddingVariable)", _emb_backend),
    Option("emb_num_groups", int, 1,
           "HybridBackend's coalesced lookup groups, the default of "
           "hb.keras.layers.DenseFeatures' num_groups; hbcore's core fuses "
           "the alltoalls that are ready together whatever the groups, so "
           "values and collectives do not depend on it",
           _at_least(1)),
    Option("emb_enable_concat", bool, True,
           "hb.keras.layers.DenseFeatures concatenates its columns' "
           "tensors (False: returns the list of them), the default of its "
           "enable_concat",
           from_env=False),
    Option("emb_device", str, "",
           "HybridBackend's table device (or a dict per column); hbcore "
           "keeps each shard on its rank's device: accepted, unused",
           from_env=False, per_column=True),
    Option("emb_input_device", str, "",
           "HybridBackend's id device (or a dict per column); accepted, "
           "unused",
           from_env=False, per_column=True),
    Option("emb_dtype", str, "float32",
           "HybridBackend's table dtype, a floating dtype (or a dict per "
           "column); the variable's own dtype rules: accepted, unused",
           _dtype_of("floating"), from_env=False, per_column=True),
    Option("emb_input_dtype", str, "int64",
           "HybridBackend's id dtype, an integer dtype (or a dict per "
           "column); accepted, unused",
           _dtype_of("integer"), from_env=False, per_column=True),
    Option("emb_pad", bool, False,
           "HybridBackend's padded lookups (or a dict per column); "
           "accepted, unused",
           from_env=False, per_column=True),
    Option("emb_num_buckets_max", int, 2 ** 63 - 1,
           "feature columns: an embedding column over a categorical "
           "column with at least this many buckets (HybridBackend's "
           "unchecked ids) is a ValueError, >= 1 (or a dict per column)",
           _at_least(1), from_env=False, per_column=True),
    Option("emb_segment_rank", int, 0,
           "feature columns (hb.dense_features, DenseFeatures): k > 0 "
           "gives one output row per segment of the ids' first k + 1 "
           "dimensions, >= 0 (or a dict per column)",
           _at_least(0), from_env=False, per_column=True),
    # HybridBackend's PAIEV options (a value, or a dict per column): the
    # DeepRec EmbeddingVariable arguments of columns under
    # emb_backend='PAIEV' (hbcore_tf.embedding.paiev).
    Option("paiev_enabled", bool, True,
           "emb_backend='PAIEV': whether a column's table is a dynamic "
           "table (always for sys.maxsize buckets)",
           from_env=False, per_column=True),
    Option("paiev_capacity", int, 65536,
           "hbcore: rows each rank's part of a PAIEV table holds, >= 1 "
           "(a lookup needing more fails naming the table)",
           _at_least(1), from_env=False, per_column=True),
    Option("paiev_ev_option", object, None,
           "DeepRec's EmbeddingVariableOption of PAIEV tables (its "
           "CounterFilter admits ids)", from_env=False, per_column=True),
    Option("paiev_steps_to_live", object, None,
           "DeepRec's global-step eviction of PAIEV tables: "
           "NotImplementedError when set", from_env=False,
           per_column=True),
    Option("paiev_caching_device", object, None,
           "DeepRec's caching device; accepted, unused", from_env=False,
           per_column=True),
    Option("paiev_partitioner", object, None,
           "DeepRec's partitioner; PAIEV tables are sharded by id hash: "
           "accepted, unused", from_env=False, per_column=True),
    Option("paiev_validate_shape", object, True,
           "DeepRec's validate_shape; accepted, unused", from_env=False,
           per_column=True),
    Option("paiev_regularizer", object, None,
           "DeepRec's regularizer: NotImplementedError when set",
           from_env=False, per_column=True),
    Option("paiev_custom_getter", object, None,
           "DeepRec's custom getter: NotImplementedError when set",
           from_env=False, per_column=True),
    Option("paiev_constraint", object, None,
           "DeepRec's constraint: NotImplementedError when set",
           from_env=False, per_column=True),
    Option("paiev_init_data_source", object, None,
           "DeepRec's init data source: NotImplementedError when set",
           from_env=False, per_column=True),
    Option("emb_buffer_size", int, 0,
           "HybridBackend's embedding buffer rows; accepted, unused",
           _at_least(0)),
    Option("emb_buffer_load_factor", float, 0.5,
           "HybridBackend's embedding buffer load factor; accepted, "
           "unused"),
    # HybridBackend's last options (after its v0.6.0 release): they tune
    # its communicator pool, fused optimizer apply and segment kernels,
    # none of which hbcore has; accepted so its scripts run, unused.
    Option("comm_pool_name", str, "default",
           "HybridBackend's communicator pool name; hbcore has one "
           "communicator per process: accepted, unused", from_env=False),
    Option("comm_pubsub_device", str, "/cpu:0",
           "HybridBackend's device for communicator set-up; accepted, "
           "unused", from_env=False),
    Option("grad_apply_fusion", bool, True,
           "HybridBackend's fused apply of sparse gradients; hbcore applies "
           "them with the optimizer's own ops: accepted, changes nothing"),
    Option("emb_segment_sort", bool, False,
           "HybridBackend's sorted segment reduction in lookups; accepted, "
           "changes nothing"),
)

_BY_NAME: Dict[str, Option] = {o.name: o for o in OPTIONS}


def _check_no_core_collision() -> None:
    core_envs = {k.env for k in _core_knobs.KNOBS}
    clashes = sorted(o.env for o in OPTIONS if o.env in core_envs)
    if clashes:  # pragma: no cover - a programming error caught in tests
        raise AssertionError("options reuse core knob variables: %s" % clashes)


_check_no_core_collision()


def _type_name(t: type) -> str:
    return t.__name__


def _unknown(name: str) -> str:
    return "unknown hbcore_tf option %r; known options: %s" % (
        name, ", ".join(sorted(_BY_NAME)))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or (
        type(value).__module__ == "numpy" and
        type(value).__name__ in ("bool_", "bool"))


class PerColumn(Mapping):
    """A per-column option's dict: ``{column_name: value}``, read-only.

    Stored by ``validate`` for a dict given to a per-column option; its
    values are validated (and normalized) as the option's plain values.
    Columns it does not name take the option's default
    (``Options.for_column``).
    """

    def __init__(self, option: str, values: Dict[str, Any]) -> None:
        self._option = option
        self._values = dict(values)

    def __getitem__(self, column: str) -> Any:
        return self._values[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return "PerColumn(%s, %r)" % (self._option, self._values)


def _validate_one(option: Option, label: str, value: Any) -> Any:
    """Checks one plain value of ``option``; errors name ``label`` (the
    option, or ``option['column']`` for an entry of a per-column dict)."""
    name = option.name
    if option.type is object:
        return option.check(label, value) if option.check else value
    if option.type is str and type(value).__name__ == "DType" and hasattr(
            value, "name"):
        value = value.name  # a tf.DType, as HybridBackend's dtype options
    ok = isinstance(value, option.type)
    if option.type is int and isinstance(value, bool):
        ok = False
    # numpy scalars (np.int64 from a computation, np.bool_) count as the
    # Python type they stand for, and are stored as it.
    if _is_bool(value):
        if option.type is bool:
            value, ok = bool(value), True
    elif option.type is int and isinstance(value, numbers.Integral):
        value, ok = int(value), True
    elif option.type is float and isinstance(value, numbers.Real):
        value, ok = float(value), True
    elif option.type is str and isinstance(value, str):
        value = str(value)
    if not ok:
        hint = ""
        if isinstance(value, Mapping) and name.startswith("emb_"):
            hint = ("; a per-column dict is accepted by %s only" %
                    ", ".join(o.name for o in OPTIONS if o.per_column))
        raise TypeError("option %s expects a value of type %s, got %r (%s)%s"
                        % (label, _type_name(option.type), value,
                           type(value).__name__, hint))
    return option.check(label, value) if option.check else value


def validate(name: str, value: Any) -> Any:
    """Checks ``value`` for option ``name`` and returns the value to store.

    Args:
        name: the option's name (e.g. ``"grad_nbuckets"``).
        value: the candidate value; an int is accepted (as a float) for a
            float option, a bool is not accepted for an int option; numpy
            scalars are accepted as the Python type they stand for
            (``np.int64(2)`` for an int option, stored as ``2``). A
            per-column option (``Option.per_column``) also takes a dict
            ``{column_name: value}`` whose values are checked the same
            way.

    Returns:
        The value to store: ``value``, converted to float for a float
        option, or normalized by the option's check (e.g. upper-cased); a
        ``PerColumn`` of such values for a per-column dict.

    Raises:
        ValueError: unknown option, a value outside the option's domain
            (e.g. ``comm_default="NCCL"`` in a build without NCCL), or a
            per-column dict with the key ``'*'`` (columns a dict leaves
            out take the option's default; a value for every column is
            given as a plain value).
        TypeError: a value of the wrong type, a dict for an option that
            is not per-column, or a per-column dict whose key is not a
            non-empty str (a column name).
    """
    option = _BY_NAME.get(name)
    if option is None:
        raise ValueError(_unknown(name))
    if not (option.per_column and isinstance(value, Mapping)):
        return _validate_one(option, name, value)
    checked = {}
    for column, item in value.items():
        if not isinstance(column, str) or not column:
            raise TypeError("option %s: the keys of a per-column dict are "
                            "column names (non-empty str), got %r (%s)" % (
                                name, column, type(column).__name__))
        if column == "*":
            raise ValueError(
                "option %s: a per-column dict names columns; '*' is not "
                "one (columns the dict leaves out take the option's "
                "default; give a plain value to set every column)" % name)
        checked[column] = _validate_one(option, "%s[%r]" % (name, column),
                                        item)
    return PerColumn(name, checked)


def parse_env_value(option: Option, text: str) -> Any:
    """Parses the text of ``HB_<NAME>`` for ``option``.

    Args:
        option: the option the variable belongs to.
        text: the variable's text; surrounding whitespace is ignored, and
            a bool accepts hbcore.setting_values' words (1/true/yes/on,
            0/false/no/off in any case, or a whole number >= 0).

    Returns:
        The validated value, as :func:`validate` returns it.

    Raises:
        ValueError: the text is not a value of the option's type (the
            message names the variable and the expected type).
    """
    raw = text.strip()
    try:
        if option.type is bool:
            value: Any = setting_values.parse_bool(option.env, raw)
        elif option.type in (int, float):
            value = setting_values.parse_number(option.env, raw, option.type)
        else:
            value = raw
        return validate(option.name, value)
    except (TypeError, ValueError) as exc:
        raise ValueError("environment variable %s=%r is not a valid %s for "
                         "option %s (%s)" % (option.env, text,
                                             _type_name(option.type),
                                             option.name, exc)) from None


class Options:
    """The options object (``hb.context.options``).

    Attribute access reads an option's effective value; attribute
    assignment sets its process-wide value (validated). See the module
    docstring for the precedence.
    """

    def __init__(self, environ: Optional[Dict[str, str]] = None) -> None:
        object.__setattr__(self, "_environ", environ)
        object.__setattr__(self, "_base", None)
        # The defaults: built-in, or HB_<NAME> (what per-column dicts fall
        # back to); set with _base, never changed by assignments.
        object.__setattr__(self, "_defaults", None)
        object.__setattr__(self, "_stack", [])

    # -- layers ----------------------------------------------------------
    def _values(self) -> Dict[str, Any]:
        base = self._base
        if base is None:
            environ = os.environ if self._environ is None else self._environ
            base = {}
            for option in OPTIONS:
                text = environ.get(option.env) if option.from_env else None
                base[option.name] = (option.default if text is None
                                     or text.strip() == ""
                                     else parse_env_value(option, text))
            object.__setattr__(self, "_defaults", dict(base))
            object.__setattr__(self, "_base", base)
        return base

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in _BY_NAME:
            raise AttributeError(_unknown(name))
        for layer in reversed(self._stack):
            if name in layer:
                return layer[name]
        return self._values()[name]

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _BY_NAME:
            raise AttributeError(_unknown(name))
        self._values()[name] = validate(name, value)

    def __dir__(self) -> List[str]:
        return sorted(_BY_NAME) + ["update", "scope", "as_dict", "reset",
                                   "default", "for_column"]

    def __repr__(self) -> str:
        return "Options(%s)" % ", ".join(
            "%s=%r" % kv for kv in sorted(self.as_dict().items()))

    # -- API -------------------------------------------------------------
    def default(self, name: str) -> Any:
        """Returns option ``name``'s default: the value of ``HB_<NAME>``
        when the option reads it and it is set, else the built-in default.

        Raises:
            AttributeError: an unknown option.
            ValueError: a bad ``HB_<NAME>`` value.
        """
        if name not in _BY_NAME:
            raise AttributeError(_unknown(name))
        self._values()
        return self._defaults[name]

    def for_column(self, name: str,
                   column: Optional[Union[str, Sequence[str]]]) -> Any:
        """Returns the effective value of option ``name`` for one column.

        HybridBackend's rule: a per-column dict gives the column its own
        entry, else the option's default (``default(name)``); a plain
        value applies to every column. A column known by several names
        (an embedding column: its own name, then its categorical
        column's) takes the entry of the first name the dict has.

        Args:
            name: the option's name.
            column: the column's name, or its names in order of
                precedence, or None for a lookup that belongs to no
                column (it gets the default from a dict).

        Returns:
            The value (never a ``PerColumn``).

        Raises:
            AttributeError: an unknown option.
        """
        value = getattr(self, name)
        if isinstance(value, PerColumn):
            names = [column] if isinstance(column, str) else (column or [])
            for one in names:
                if one in value:
                    return value[one]
            return self.default(name)
        return value

    def as_dict(self) -> Dict[str, Any]:
        """Returns every option's effective value."""
        return {name: getattr(self, name) for name in _BY_NAME}

    def update(self, **kwargs: Any) -> None:
        """Sets process-wide values (all validated before any is set).

        Raises:
            ValueError: an unknown option or a value outside its domain.
            TypeError: a value of the wrong type.
        """
        checked = {k: validate(k, v) for k, v in kwargs.items()}
        self._values().update(checked)

    @contextlib.contextmanager
    def scope(self, **kwargs: Any) -> Iterator["Options"]:
        """Overrides options for the code inside; nests and unwinds.

        Raises:
            ValueError: an unknown option or a value outside its domain.
            TypeError: a value of the wrong type.
        """
        layer = {k: validate(k, v) for k, v in kwargs.items()}
        self._values()  # a bad environment value fails here, not later
        self._stack.append(layer)
        try:
            yield self
        finally:
            # Scopes exit in reverse order of entry (with statements nest);
            # remove() also copes with generators closed out of order.
            self._stack.remove(layer)

    def reset(self) -> None:
        """Forgets process-wide values: the environment is read again at
        the next use (scopes that are active stay active)."""
        object.__setattr__(self, "_base", None)
        object.__setattr__(self, "_defaults", None)


def option_table() -> List[Option]:
    """Returns the option definitions (for docs and tests)."""
    return list(OPTIONS)


options = Options()
