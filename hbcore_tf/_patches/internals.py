"""The one list of private TensorFlow and Keras names hbcore uses.

Each entry names a module attribute (``module:qualified.name``), what
hbcore uses it for, and the parameter names it is expected to have.
Code elsewhere in hbcore_tf reaches private TF/Keras code only through
these entries (``internals.SLOT_CREATE_SLOT.load()``), so this file is the
complete list a TensorFlow or Keras upgrade must be checked against, and
``python -m hbcore_tf._patches.check`` checks it (every entry loads, and a
callable's parameters are the expected ones).

Entries load lazily: nothing here imports Keras or tf_keras before a
caller asks (importing hbcore_tf must not import either).

Checked on TensorFlow 2.16.2 (Keras 3.0.0, tf_keras 2.16.0) and
TensorFlow 2.21.0 (Keras 3.15.1, tf_keras 2.21.0). Where versions differ,
``params`` holds one tuple per variant and the check names the variant it
found.
"""
import functools
import importlib
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

Params = Union[None, Tuple[str, ...], Dict[str, Tuple[str, ...]]]


class InternalMissing(ImportError):
    """A private TF/Keras name hbcore uses is gone (renamed or moved)."""


class Internal(NamedTuple):
    """One private name of TensorFlow or Keras.

    Attributes:
        path: ``"module:qualified.name"``.
        used_for: what hbcore uses it for (and which module does).
        params: the expected parameter names of a callable (a tuple), one
            tuple per version variant (a dict label -> tuple), or None
            (only existence is checked).
        kind: "callable", "class", "property" or "value".
    """
    path: str
    used_for: str
    params: Params = None
    kind: str = "callable"

    @property
    def module(self) -> str:
        """The module's dotted name."""
        return self.path.split(":")[0]

    @property
    def package(self) -> str:
        """The top-level package (tensorflow, keras or tf_keras)."""
        return self.module.split(".")[0]

    @property
    def attr(self) -> str:
        """The last name of the path (the attribute a patch replaces)."""
        return self.path.rsplit(".", 1)[-1].split(":")[-1]

    def owner(self) -> Any:
        """The module or class holding ``attr`` (loaded).

        Raises:
            InternalMissing: see load.
        """
        module, _, qualified = self.path.partition(":")
        head = qualified.rsplit(".", 1)[0] if "." in qualified else ""
        return Internal("%s:%s" % (module, head), self.used_for).load()

    def load(self) -> Any:
        """The object at ``path``.

        Returns:
            The module attribute (for a class attribute, as ``getattr`` on
            the class returns it; a property is returned as the property).

        Raises:
            InternalMissing: the module or the attribute does not exist.
        """
        module_name, _, qualified = self.path.partition(":")
        try:
            obj = importlib.import_module(module_name)
        except ImportError as exc:
            raise InternalMissing("%s: cannot import %s (%s)" % (
                self.path, module_name, exc)) from exc
        owner = obj
        for part in qualified.split(".") if qualified else ():
            if isinstance(owner, type) and part in owner.__dict__ and \
                    isinstance(owner.__dict__[part], property):
                obj = owner.__dict__[part]
            else:
                try:
                    obj = getattr(owner, part)
                except AttributeError as exc:
                    raise InternalMissing("%s: %s has no attribute %r" % (
                        self.path, getattr(owner, "__name__", owner),
                        part)) from exc
            owner = obj
        return obj


_TF = "tensorflow.python."
_K3 = "keras.src."
_TK = "tf_keras.src."

# --- tf.compat.v1 Saver and object checkpoints --------------------------------------

SAVER_INIT = Internal(
    _TF + "training.saver:Saver.__init__",
    "patched inside hb.scope: HybridBackend's Saver defaults "
    "(_patches/saver_init.py)",
    ("self", "var_list", "reshape", "sharded", "max_to_keep",
     "keep_checkpoint_every_n_hours", "name", "restore_sequentially",
     "saver_def", "builder", "defer_build", "allow_empty", "write_version",
     "pad_step_number", "save_relative_paths", "filename"))
SAVER_BUILD = Internal(
    _TF + "training.saver:Saver._build",
    "patched: builds the companion Saver of sharded state "
    "(_patches/saver.py, embedding/save_protocol.py)",
    ("self", "checkpoint_path", "build_save", "build_restore"))
SAVER_SAVE = Internal(
    _TF + "training.saver:Saver.save",
    "patched: the collective save of sharded tables (_patches/saver.py)",
    ("self", "sess", "save_path", "global_step", "latest_filename",
     "meta_graph_suffix", "write_meta_graph", "write_state",
     "strip_default_attrs", "save_debug_info"))
SAVER_RESTORE = Internal(
    _TF + "training.saver:Saver.restore",
    "patched: restores dynamic tables by key (_patches/saver.py, "
    "embedding/dynamic_saver.py)",
    ("self", "sess", "save_path"))
TRACKABLE_SAVER_SAVE = Internal(
    _TF + "checkpoint.checkpoint:TrackableSaver.save",
    "patched: tf.train.Checkpoint's collective save of sharded tables "
    "(_patches/trackable_saver.py)",
    ("self", "file_prefix", "checkpoint_number", "session", "options"))
TRACKABLE_SAVER_GATHER = Internal(
    _TF + "checkpoint.checkpoint:TrackableSaver._gather_serialized_tensors",
    "the tensors a tf.train.Checkpoint saves, to find the sharded ones "
    "(embedding/save_protocol.py)",
    ("self", "object_graph_tensor"))
MULTI_DEVICE_SAVER = Internal(
    _TF + "checkpoint.functional_saver:MultiDeviceSaver",
    "writes one rank's slices of a tf.train.Checkpoint "
    "(embedding/save_protocol.py)", None, "class")
MULTI_DEVICE_SAVER_SAVE = Internal(
    _TF + "checkpoint.functional_saver:MultiDeviceSaver.save",
    "as MULTI_DEVICE_SAVER", ("self", "file_prefix", "options"))
OBJECT_IDENTITY_DICT = Internal(
    _TF + "util.object_identity:ObjectIdentityDictionary",
    "the serialized tensors by object, as MultiDeviceSaver takes them "
    "(embedding/save_protocol.py)", None, "class")
GLOBAL_STEP_READ = Internal(
    _TF + "training.training_util:_get_or_create_global_step_read",
    "the global-step read CheckpointSaverHook uses "
    "(embedding/session_hook.py)", ("graph",))
MONITORED_TRAINING_SESSION = Internal(
    _TF + "training.monitored_session:MonitoredTrainingSession",
    "TF's own function, which hb.train.MonitoredTrainingSession builds on "
    "even while hb.scope replaces the public name (train/session.py)",
    ("master", "is_chief", "checkpoint_dir", "scaffold", "hooks",
     "chief_only_hooks", "save_checkpoint_secs", "save_summaries_steps",
     "save_summaries_secs", "config", "stop_grace_period_secs",
     "log_step_count_steps", "max_wait_secs", "save_checkpoint_steps",
     "summary_dir", "save_graph_def"))
PUBLIC_MONITORED_TRAINING_SESSION = Internal(
    "tensorflow:compat.v1.train.MonitoredTrainingSession",
    "patched inside hb.scope: hb.train.MonitoredTrainingSession "
    "(_patches/monitored_session.py)", None)
V1_OPTIMIZER_INIT = Internal(
    "tensorflow:compat.v1.train.Optimizer.__init__",
    "patched inside hb.scope: optimizers created become data-parallel "
    "(_patches/optimizer_init.py)",
    {"TF 2.16": ("self", "use_locking", "name"),
     "TF >= 2.17": ("self", "use_locking", "name",
                    "use_own_namescope_for_non_slot_vars")})

# --- slots, variables, graph building --------------------------------------------------

SLOT_CREATE_SLOT = Internal(
    _TF + "training.slot_creator:create_slot",
    "patched: slots of sharded tables are shards (_patches/slot_creator.py)",
    ("primary", "val", "name", "colocate_with_primary", "copy_xla_sharding"))
SLOT_CREATE_SLOT_WITH_INITIALIZER = Internal(
    _TF + "training.slot_creator:create_slot_with_initializer",
    "as SLOT_CREATE_SLOT",
    ("primary", "initializer", "shape", "dtype", "name",
     "colocate_with_primary", "copy_xla_sharding"))
SLOT_CREATE_ZEROS_SLOT = Internal(
    _TF + "training.slot_creator:create_zeros_slot",
    "as SLOT_CREATE_SLOT",
    ("primary", "name", "dtype", "colocate_with_primary",
     "copy_xla_sharding"))
PARTITION_INFO = Internal(
    _TF + "ops.variable_scope:_PartitionInfo",
    "tells a v1 initializer which rows of the whole table it makes "
    "(embedding/sharding.py, embedding/column_init.py)", None, "class")
PARTITION_INFO_INIT = Internal(
    _TF + "ops.variable_scope:_PartitionInfo.__init__", "as PARTITION_INFO",
    ("self", "full_shape", "var_offset"))
BASE_RESOURCE_VARIABLE = Internal(
    _TF + "ops.resource_variable_ops:BaseResourceVariable",
    "the variables a sharded table can be (embedding/table.py)", None,
    "class")
CONSTANT_VALUE = Internal(
    _TF + "framework.tensor_util:constant_value",
    "reads a fill value known at graph build (_splat_initial_values.py)",
    ("tensor", "partial"))
MAKE_NDARRAY = Internal(
    _TF + "framework.tensor_util:MakeNdarray",
    "as CONSTANT_VALUE", ("tensor",))
XLA_CONTEXT = Internal(
    _TF + "ops.control_flow_util:GraphOrParentsInXlaContext",
    "whether ops are traced for XLA, where hbcore's ops cannot run "
    "(_compat.in_xla_context)", ("graph",))
UNORDERED_STATEFUL_OPS = Internal(
    _TF + "framework.auto_control_deps:MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS",
    "patched: hbcore's collectives are not chained in a tf.function "
    "(_patches/auto_control_deps.py)", None, "value")

# --- feature columns -------------------------------------------------------------------

FC_V1_SEQUENCE_CATEGORICAL = Internal(
    _TF + "feature_column.feature_column:_SequenceCategoricalColumn",
    "recognises v1 sequence columns (embedding/feature_columns.py)", None,
    "class")
FC_V1_INTERNAL_INPUT_LAYER = Internal(
    _TF + "feature_column.feature_column:_internal_input_layer",
    "builds dense_features' input layer (embedding/feature_columns.py)",
    ("features", "feature_columns", "weight_collections", "trainable",
     "cols_to_vars", "scope", "cols_to_output_tensors", "from_template"))
FC_V1_NORMALIZE = Internal(
    _TF + "feature_column.feature_column:_normalize_feature_columns",
    "as FC_V1_INTERNAL_INPUT_LAYER", ("feature_columns",))
FC_V2_SHARED_EMBEDDING_COLUMN = Internal(
    _TF + "feature_column.feature_column_v2:SharedEmbeddingColumn",
    "recognises shared embedding columns (embedding/feature_columns.py)",
    None, "class")
FC_V2_SEQUENCE_CATEGORICAL = Internal(
    _TF + "feature_column.feature_column_v2:SequenceCategoricalColumn",
    "recognises sequence columns (embedding/feature_columns.py)", None,
    "class")
FC_V2_CATEGORICAL_WITH_IDENTITY = Internal(
    _TF + "feature_column.feature_column_v2:categorical_column_with_identity",
    "hb.feature_column's columns (feature_column.py)",
    ("key", "num_buckets", "default_value"))
FC_V2_IDENTITY_CATEGORICAL_COLUMN = Internal(
    _TF + "feature_column.feature_column_v2:IdentityCategoricalColumn",
    "the base of hb.feature_column.categorical_column_with_embedding's "
    "column (embedding/ev_column.py)", None, "class")
FC_V2_EMBEDDING_COLUMN = Internal(
    _TF + "feature_column.feature_column_v2:embedding_column",
    "as FC_V2_CATEGORICAL_WITH_IDENTITY",
    ("categorical_column", "dimension", "combiner", "initializer",
     "ckpt_to_load_from", "tensor_name_in_ckpt", "max_norm", "trainable",
     "use_safe_embedding_lookup"))
FC_V2_SHARED_EMBEDDING_COLUMNS = Internal(
    _TF + "feature_column.feature_column_v2:shared_embedding_columns",
    "as FC_V2_CATEGORICAL_WITH_IDENTITY",
    ("categorical_columns", "dimension", "combiner", "initializer",
     "shared_embedding_collection_name", "ckpt_to_load_from",
     "tensor_name_in_ckpt", "max_norm", "trainable",
     "use_safe_embedding_lookup"))
FC_SERIALIZE = Internal(
    _TF + "feature_column.serialization:serialize_feature_columns",
    "DenseFeatures' config (keras/dense_features.py)", ("feature_columns",))
FC_DESERIALIZE = Internal(
    _TF + "feature_column.serialization:deserialize_feature_columns",
    "as FC_SERIALIZE", ("configs", "custom_objects"))

# --- Keras 3 ------------------------------------------------------------------------------

KERAS3_BASE_OPTIMIZER = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer",
    "recognises Keras 3 optimizers (_compat.optimizer_family); patched "
    "inside hb.scope (_patches/optimizer_init.py)", None, "class")
KERAS3_OPTIMIZER_INIT = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer.__init__",
    "patched inside hb.scope: optimizers created become data-parallel "
    "(_patches/optimizer_init.py)", None)
KERAS3_MODEL_NEW = Internal(
    _K3 + "models.model:Model.__new__",
    "patched inside hb.scope: models created become data-parallel "
    "(_patches/model_new.py)", ("cls", "args", "kwargs"))
KERAS3_ADD_VARIABLE_FROM_REFERENCE = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer.add_variable_from_reference",
    "patched: slots of sharded tables are shards (_patches/keras_slots.py)",
    {"Keras 3.0": ("self", "reference_variable", "name"),
     "Keras >= 3.2": ("self", "reference_variable", "name", "initializer")})
KERAS3_OPTIMIZER_VARIABLES = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer.variables",
    "patched by smddp.init(): opt.variables() callable "
    "(_patches/optimizer_variables.py)", None, "property")
KERAS3_NAME_SCOPE = Internal(
    _K3 + "backend:name_scope",
    "the name scope Keras 3 builds optimizer slots under "
    "(_compat.build_optimizer)", None, "class")
KERAS3_MODEL = Internal(
    _K3 + "models.model:Model",
    "patched inside hb.scope: models created become data-parallel "
    "(_patches/model_new.py)", None, "class")
KERAS3_MODEL_SUPPORTS_JIT = Internal(
    _K3 + "trainers.trainer:model_supports_jit",
    "patched: models with hbcore's optimizer compile without XLA "
    "(_patches/keras_jit.py)", ("model",))
KERAS3_LOSS_SCALE_APPLY = Internal(
    _K3 + "optimizers.loss_scale_optimizer:LossScaleOptimizer.apply",
    "patched: a LossScaleOptimizer holding hbcore's optimizer reduces the "
    "gradients before it checks them for Inf/NaN "
    "(_patches/keras_loss_scale.py)",
    ("self", "grads", "trainable_variables"))
KERAS3_MODEL_SAVE = Internal(
    "keras:Model.save",
    "patched: collective save of models with sharded tables "
    "(_patches/keras_model_save.py)", None)
KERAS3_MODEL_SAVE_WEIGHTS = Internal(
    "keras:Model.save_weights", "as KERAS3_MODEL_SAVE", None)
KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer.save_own_variables",
    "patched: .keras files store sharded tables' optimizer slots whole "
    "(_patches/keras_model_save.py)", ("self", "store"))
KERAS3_OPTIMIZER_LOAD_OWN_VARIABLES = Internal(
    _K3 + "optimizers.base_optimizer:BaseOptimizer.load_own_variables",
    "as KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES", ("self", "store"))

# --- tf_keras ---------------------------------------------------------------------------------

TF_KERAS_BASE_OPTIMIZER = Internal(
    _TK + "optimizers.optimizer:_BaseOptimizer",
    "recognises tf_keras optimizers (_compat.optimizer_family)", None,
    "class")
TF_KERAS_OPTIMIZER_INIT = Internal(
    _TK + "optimizers.optimizer:_BaseOptimizer.__init__",
    "patched inside hb.scope: optimizers created become data-parallel "
    "(_patches/optimizer_init.py)", None)
TF_KERAS_OPTIMIZER_V2_INIT = Internal(
    _TK + "optimizers.legacy.optimizer_v2:OptimizerV2.__init__",
    "as TF_KERAS_OPTIMIZER_INIT", None)
TF_KERAS_OPTIMIZER = Internal(
    _TK + "optimizers.optimizer:Optimizer",
    "its set_weights is patched (_patches/tf_keras_hdf5.py)", None, "class")
TF_KERAS_OPTIMIZER_V2 = Internal(
    _TK + "optimizers.legacy.optimizer_v2:OptimizerV2",
    "recognises legacy tf_keras optimizers (_compat.optimizer_family)",
    None, "class")
TF_KERAS_AGGREGATE_GRADIENTS = Internal(
    _TK + "optimizers.optimizer:Optimizer.aggregate_gradients",
    "overridden by DistributedOptimizer as the reduction: tf_keras' "
    "LossScaleOptimizer calls it before its Inf/NaN check "
    "(_parallel/distributed_optimizer.py)", ("self", "grads_and_vars"))
TF_KERAS_V2_AGGREGATE_GRADIENTS = Internal(
    _TK + "optimizers.legacy.optimizer_v2:OptimizerV2._aggregate_gradients",
    "overridden by DistributedOptimizer as the reduction: the legacy "
    "LossScaleOptimizer calls it before its Inf/NaN check "
    "(_parallel/distributed_optimizer.py)", ("self", "grads_and_vars"))
TF_KERAS_ADD_VARIABLE_FROM_REFERENCE = Internal(
    _TK + "optimizers.optimizer:_BaseOptimizer.add_variable_from_reference",
    "patched: slots of sharded tables are shards (_patches/keras_slots.py)",
    ("self", "model_variable", "variable_name", "shape", "initial_value"))
TF_KERAS_ADD_SLOT = Internal(
    _TK + "optimizers.legacy.optimizer_v2:OptimizerV2.add_slot",
    "as TF_KERAS_ADD_VARIABLE_FROM_REFERENCE",
    ("self", "var", "slot_name", "initializer", "shape"))
TF_KERAS_OPTIMIZER_VARIABLES = Internal(
    _TK + "optimizers.optimizer:_BaseOptimizer.variables",
    "as KERAS3_OPTIMIZER_VARIABLES", None, "property")
TF_KERAS_SET_WEIGHTS = Internal(
    _TK + "optimizers.optimizer:Optimizer.set_weights",
    "patched: load_model restores sharded slots "
    "(_patches/tf_keras_hdf5.py)", ("self", "weights"))
TF_KERAS_V2_SET_WEIGHTS = Internal(
    _TK + "optimizers.legacy.optimizer_v2:OptimizerV2.set_weights",
    "as TF_KERAS_SET_WEIGHTS", ("self", "weights"))
TF_KERAS_HDF5_SAVE_SUBSET = Internal(
    _TK + "saving.legacy.hdf5_format:save_subset_weights_to_hdf5_group",
    "patched: .h5 files hold whole tables (_patches/tf_keras_hdf5.py)",
    ("f", "weights"))
TF_KERAS_HDF5_SAVE_OPTIMIZER = Internal(
    _TK + "saving.legacy.hdf5_format:save_optimizer_weights_to_hdf5_group",
    "as TF_KERAS_HDF5_SAVE_SUBSET", ("hdf5_group", "optimizer"))
TF_KERAS_HDF5_PREPROCESS = Internal(
    _TK + "saving.legacy.hdf5_format:preprocess_weights_for_loading",
    "patched: a whole table read is cut to this rank's rows "
    "(_patches/tf_keras_hdf5.py)",
    ("layer", "weights", "original_keras_version", "original_backend"))
TF_KERAS_HDF5_SAVE_ATTRIBUTES = Internal(
    _TK + "saving.legacy.hdf5_format:save_attributes_to_hdf5_group",
    "writes weight names as tf_keras does (_patches/tf_keras_hdf5.py)",
    ("group", "name", "data"))
TF_KERAS_HDF5_LEGACY_WEIGHTS = Internal(
    _TK + "saving.legacy.hdf5_format:_legacy_weights",
    "a layer's weights in file order (_patches/tf_keras_hdf5.py)",
    ("layer",))
TF_KERAS_MODEL = Internal(
    _TK + "engine.training:Model",
    "patched inside hb.scope: models created become data-parallel "
    "(_patches/model_new.py)", None, "class")
TF_KERAS_MODEL_NEW = Internal(
    _TK + "engine.training:Model.__new__", "as KERAS3_MODEL_NEW",
    ("cls", "args", "kwargs"))
TF_KERAS_MODEL_SAVE = Internal(
    "tf_keras:Model.save", "as KERAS3_MODEL_SAVE",
    ("self", "filepath", "overwrite", "save_format", "kwargs"))
TF_KERAS_MODEL_SAVE_WEIGHTS = Internal(
    "tf_keras:Model.save_weights", "as KERAS3_MODEL_SAVE",
    ("self", "filepath", "overwrite", "save_format", "options"))
TF_KERAS_OPTIMIZER_SAVE_OWN_VARIABLES = Internal(
    _TK + "optimizers.optimizer:Optimizer.save_own_variables",
    "as KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES", ("self", "store"))
TF_KERAS_OPTIMIZER_LOAD_OWN_VARIABLES = Internal(
    _TK + "optimizers.optimizer:Optimizer.load_own_variables",
    "as KERAS3_OPTIMIZER_SAVE_OWN_VARIABLES", ("self", "store"))


# --- tapes ----------------------------------------------------------------------------

TAPE_COULD_RECORD = Internal(
    _TF + "eager.record:could_possibly_record",
    "whether a GradientTape is recording: a dynamic table's lookup under a "
    "tape is a training lookup, which sets the rows' versions "
    "(embedding/dynamic_table.py)", ())

@functools.lru_cache(maxsize=None)
def all_internals() -> List[Tuple[str, Internal]]:
    """Every entry of this module, as (constant name, entry), in order."""
    return [(name, value) for name, value in globals().items()
            if isinstance(value, Internal)]


def qualified_class_name(entry: Internal) -> str:
    """``module.Class`` of a class entry, as ``type.__module__`` and
    ``__name__`` spell it (for classifying a class without importing).

    Args:
        entry: a class entry.

    Returns:
        The dotted name.
    """
    module, _, name = entry.path.partition(":")
    return "%s.%s" % (module, name)


def loaded_or_none(entry: Internal) -> Optional[Any]:
    """``entry.load()``, or None when its package is not installed (an
    optional Keras); a renamed name inside an installed package still
    raises.

    Raises:
        InternalMissing: the package is installed but the name is gone.
    """
    try:
        importlib.import_module(entry.package)
    except ImportError:
        return None
    return entry.load()
