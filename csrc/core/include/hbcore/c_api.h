/*
 * hbcore C API: the only header front ends (the pybind11 module, the
 * TensorFlow op library) include from the core.
 *
 * Contract:
 *  - hb_init() creates the one runtime of this process (idempotent); every
 *    other call except hb_version, hb_mpi_library_version, hb_nccl_built,
 *    hb_knobs and hb_check_config needs it. hb_init is collective over the
 *    communicator it is given: every rank of it calls it.
 *  - Every number that crosses this boundary (status, dtype, op and
 *    reduce-op codes, knob types) is defined here and nowhere else; front
 *    ends use these names (the Python module exports them).
 *  - hb_enqueue() validates what can be checked locally and returns at once;
 *    it never waits for other ranks. The request's `done` callback is called
 *    exactly once, from the core's background thread, for every request that
 *    hb_enqueue accepted (HB_OK returned). For rejected requests it is never
 *    called.
 *  - Buffers (`input`, `output`) must stay valid until `done` runs.
 *  - Outputs whose size depends on other ranks (allgather, alltoall,
 *    reducescatter) are obtained through `alloc`, called on the background
 *    thread once the size is known. `alloc` must not block on other ranks.
 *  - Every rank must submit the same set of tensor names (in any order).
 */
#ifndef HBCORE_C_API_H_
#define HBCORE_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HB_API __attribute__((visibility("default")))
#else
#define HB_API
#endif

/* Status codes. Front ends map each onto one exception type. */
typedef enum {
  HB_OK = 0,
  HB_ERR_INVALID_ARGUMENT = 1, /* bad local input: shape, root, splits, dtype */
  HB_ERR_MISMATCH = 2,         /* ranks disagree on a tensor (precondition) */
  HB_ERR_NOT_INITIALIZED = 3,  /* call before hb_init */
  HB_ERR_SHUTDOWN = 4,         /* runtime shut down (locally or on any rank) */
  HB_ERR_DUPLICATE_NAME = 5,   /* a tensor with this name is already in flight */
  HB_ERR_INTERNAL = 6,         /* MPI failure or broken invariant */
  HB_ERR_CONFIG = 7,           /* bad configuration value (env or override) */
  HB_ERR_UNSUPPORTED = 8       /* valid request the runtime cannot serve */
} hb_status_code;

/* Numbering is part of the ABI: the Python and TF front ends use it. */
typedef enum {
  HB_UINT8 = 0,
  HB_INT8 = 1,
  HB_UINT16 = 2,
  HB_INT16 = 3,
  HB_INT32 = 4,
  HB_INT64 = 5,
  HB_FLOAT16 = 6,
  HB_FLOAT32 = 7,
  HB_FLOAT64 = 8,
  HB_BOOL = 9,
  HB_BFLOAT16 = 10
} hb_dtype;

typedef enum {
  HB_ALLREDUCE = 0,
  HB_ALLGATHER = 1,
  HB_BROADCAST = 2,
  HB_ALLTOALL = 3,
  HB_REDUCESCATTER = 4,
  HB_BARRIER = 5,
  HB_JOIN = 6
} hb_op_type;

/* Same numbers as Horovod's ReduceOp. */
typedef enum {
  HB_REDUCE_AVERAGE = 0,
  HB_REDUCE_SUM = 1,
  HB_REDUCE_ADASUM = 2,
  HB_REDUCE_MIN = 3,
  HB_REDUCE_MAX = 4,
  HB_REDUCE_PRODUCT = 5
} hb_reduce_op;

#define HB_DEVICE_CPU (-1)

/* Called on the background thread to obtain an output buffer of `shape`.
 * Returns NULL when allocation failed; the request then fails. */
typedef void* (*hb_alloc_fn)(void* user, int ndim, const int64_t* shape);

/* What a finished request reports besides its status. Pointers are valid
 * only during the callback. */
typedef struct {
  const int64_t* received_splits; /* alltoall: rows received from each rank */
  int num_received_splits;
  int last_joined_rank;           /* join: the last rank that called join */
} hb_result;

typedef void (*hb_done_fn)(void* user, int status, const char* message,
                           const hb_result* result);

typedef struct {
  const char* name;      /* unique among in-flight tensors; same on all ranks */
  int op;                /* hb_op_type */
  int reduce_op;         /* hb_reduce_op (allreduce, reducescatter) */
  int dtype;             /* hb_dtype */
  int ndim;
  const int64_t* shape;
  const void* input;     /* may equal output for in-place ops */
  void* output;          /* allreduce/broadcast: caller-provided; else NULL */
  int root_rank;         /* broadcast */
  double prescale_factor;
  double postscale_factor;
  const int64_t* splits; /* alltoall: rows sent to each rank, or NULL */
  int num_splits;
  int device;            /* HB_DEVICE_CPU or a GPU ordinal */
  hb_alloc_fn alloc;
  hb_done_fn done;
  void* user;
  /* The process set the collective runs over (hb_add_process_set); 0, the
   * value of a zero-initialised request, is the global set of every rank.
   * Only members may submit on a set; `root_rank` stays a global rank. */
  int process_set_id;
  /* GPU requests (device >= 0; buffers in that device's memory): the
   * core's streams wait, before reading the input, for `ready_event` (a
   * cudaEvent_t recorded after the input was written; it must stay valid
   * until `done`), or when it is NULL for all work queued so far on
   * `stream` (a cudaStream_t; NULL or 0x1 is the legacy default stream,
   * 0x2 the calling thread's default stream): hb_enqueue records an event
   * of its own there. `done` runs once the outputs are written (the core's
   * streams synchronized), so consumers need no further wait. Both are
   * ignored for CPU requests. */
  void* stream;
  void* ready_event;
} hb_request;

/* The communicator to run over, as the Fortran handle of an MPI
 * communicator (MPI_Comm_c2f; mpi4py's Comm.py2f()), or HB_COMM_WORLD for
 * every rank of MPI_COMM_WORLD. The core works on its own duplicate, so the
 * caller may free the communicator after init. */
#define HB_COMM_WORLD (-1)

/* Configuration knobs. Each is read, in this order of precedence, from a
 * programmatic override (hb_config_entry, keyed by `name`), the environment
 * variable `env` (HB_...), or its alias HOROVOD_ + the same suffix; else
 * `default_value` applies. One parser validates all three sources: a bad
 * value fails with HB_ERR_CONFIG naming the knob and where it came from. */
typedef enum {
  HB_KNOB_INTEGER = 0,   /* base-10 integer in [min, max] */
  HB_KNOB_NUMBER = 1,    /* finite decimal number in [min, max] */
  HB_KNOB_STRING = 2,    /* any text (a path) */
  HB_KNOB_BOOL = 3,      /* 0, 1, true or false */
  HB_KNOB_LOG_LEVEL = 4, /* TRACE, DEBUG, INFO, WARNING (WARN), ERROR, FATAL */
  HB_KNOB_CHOICE = 5     /* auto, 0, 1, true or false */
} hb_knob_type;

typedef struct {
  const char* name;          /* override key, e.g. "fusion_threshold" */
  const char* env;           /* environment variable, e.g. "HB_FUSION_THRESHOLD" */
  int type;                  /* hb_knob_type */
  const char* default_value; /* as text; "" when unset by default */
  double min;                /* bounds of integers and numbers */
  double max;                /* HUGE_VAL when unbounded */
  const char* unit;          /* "bytes", "milliseconds", "seconds", ... */
} hb_knob;

/* The knob table, valid without init and for the life of the process. */
HB_API const hb_knob* hb_knobs(int* count);

/* One programmatic override: a knob's name and its value as text. */
typedef struct {
  const char* name;
  const char* value;
} hb_config_entry;

/* Validates overrides alone (the environment is not read): HB_OK, or
 * HB_ERR_CONFIG with the reason in `err`. Valid without init. */
HB_API int hb_check_config(const hb_config_entry* config, int count,
                           char* err, size_t err_len);

/* Lifecycle. hb_init returns a status code; on failure `err` holds why.
 * `config` (may be NULL when `config_count` is 0) overrides the
 * environment for this runtime; it is ignored while a runtime exists: from
 * one hb_init to this rank's hb_shutdown, hb_init returns HB_OK at once,
 * also once a shutdown elsewhere stopped the runtime (its requests then
 * fail with that shutdown's error).
 * `set_ranks` holds `num_sets` process sets back to back, set i being its
 * next `set_sizes[i]` ranks of the communicator (see hb_add_process_set:
 * every rank passes the same sets in the same order, except that a rank
 * outside a set may pass it with size 0). They get ids 1, 2, ... */
HB_API int hb_init(int64_t comm, const hb_config_entry* config,
                   int config_count, const int* set_ranks,
                   const int* set_sizes, int num_sets, char* err,
                   size_t err_len);
/* Shut down, failing every pending request on every rank. Idempotent. */
HB_API int hb_shutdown(void);
HB_API int hb_is_initialized(void);

/* Topology; -1 before init. */
HB_API int hb_rank(void);
HB_API int hb_size(void);
HB_API int hb_local_rank(void);
HB_API int hb_local_size(void);
HB_API int hb_cross_rank(void);
HB_API int hb_cross_size(void);
HB_API int hb_mpi_threads_supported(void);
/* 1 when every host runs the same number of ranks, else 0 (-1 before
 * hb_init), as Horovod's is_homogeneous. */
HB_API int hb_is_homogeneous(void);
/* 1 when a thread waiting for a result may spin briefly before it blocks:
 * when this host has a CPU for each local rank's background and calling
 * threads (a spinning waiter would otherwise take the CPU from the threads
 * it waits for); else 0, and 0 before hb_init. HB_IDLE_SPIN=auto applies
 * the same rule to the background thread. */
HB_API int hb_spin_wait(void);

/* Submit `count` requests atomically: they are announced to the other ranks
 * in the same negotiation cycle (so a group fuses). Either all are accepted
 * (HB_OK) or none (error code, message in `err`). */
HB_API int hb_enqueue(const hb_request* requests, int count, char* err,
                      size_t err_len);

/* A hint that the calling thread is about to block on results: negotiate
 * what is queued now instead of waiting for the end of a burst of
 * submissions (the burst rule in runtime.cc). Never blocks; a no-op
 * before init or with nothing queued. */
HB_API void hb_flush(void);

/* Process sets: subsets of the ranks that run collectives among
 * themselves, each negotiated on its own communicator with its own
 * response cache (see runtime.h). Set 0 is the global set.
 *
 * hb_add_process_set and hb_remove_process_set are collective over EVERY
 * rank (members or not), called in the same order everywhere; they block
 * until the background threads agreed. They need HB_DYNAMIC_PROCESS_SETS=1
 * (else HB_ERR_INVALID_ARGUMENT). hb_add_process_set: `ranks` (any order,
 * no repeats) are the members; a rank that does not know the members (an
 * mpi4py communicator that is MPI_COMM_NULL there) may pass n = 0 if it is
 * not one. Returns the new set's id in `*id`; HB_ERR_INVALID_ARGUMENT for a
 * set with the same ranks as an existing one, HB_ERR_MISMATCH when ranks
 * disagree about the members. hb_remove_process_set: `*removed` is 1, or 0
 * for id 0 and for an unknown id; collectives pending on the set fail. */
HB_API int hb_add_process_set(const int* ranks, int n, int* id, char* err,
                              size_t err_len);
HB_API int hb_remove_process_set(int id, int* removed, char* err,
                                 size_t err_len);
/* This rank's view of set `id` (local, never blocks): its size, this
 * rank's rank in it (-1 if not a member) and up to `max_ranks` of its
 * members (ascending global ranks). HB_ERR_INVALID_ARGUMENT for an unknown
 * id, HB_ERR_NOT_INITIALIZED before init. */
/* Horovod's start_timeline / stop_timeline: rank 0 starts writing a
 * Chrome-trace timeline to `path` (truncated; a file already being written
 * is finished first), with CYCLE_START markers when `mark_cycles`; other
 * ranks write none and return HB_OK. Local calls (no communication),
 * allowed whatever HB_TIMELINE is set to. hb_stop_timeline finishes the
 * file (valid JSON); without one it does nothing. */
HB_API int hb_start_timeline(const char* path, int mark_cycles, char* err,
                             size_t err_len);
HB_API int hb_stop_timeline(char* err, size_t err_len);

HB_API int hb_process_set_info(int id, int* size, int* rank, int* ranks,
                               int max_ranks);
/* The ids of the sets that exist, ascending (0 first); returns how many
 * there are (copies at most `max_ids`), or -1 before init. */
HB_API int hb_process_set_ids(int* ids, int max_ids);

/* Build facts, valid without init. */
HB_API const char* hb_version(void);
HB_API const char* hb_mpi_library_version(void);
/* 1 when this process's runtime serves GPU requests (NCCL and the CUDA
 * runtime were loaded at init), else 0; 0 before init. */
HB_API int hb_nccl_built(void);

/* Loads NCCL and the CUDA runtime as hb_init would, from the given paths
 * (NULL or "": the HB_NCCL_LIBRARY / HB_CUDA_RUNTIME_LIBRARY environment
 * variables, else the default sonames libnccl.so.2 and libcudart.so.12),
 * unloads them again, and describes what was found as "KEY=value" lines:
 * nccl_library, nccl_version (e.g. 2.23.4), cuda_runtime_library,
 * cuda_runtime_version, cuda_devices (only with `count_devices`: counting
 * initialises the CUDA driver, after which a fork()ed child cannot use
 * CUDA), error (why loading failed). Copies at most buf_len-1 bytes into
 * `buf`. Returns 1 when both libraries loaded, else 0. Valid without
 * init. */
HB_API int hb_probe_gpu(const char* nccl_library,
                        const char* cuda_runtime_library, int count_devices,
                        char* buf, size_t buf_len);

/* Device memory through the CUDA runtime the runtime loaded, for front
 * ends without a CUDA allocator of their own (the numpy API's DLPack
 * outputs). hb_gpu_malloc returns HB_OK, or HB_ERR_UNSUPPORTED (no GPU
 * support loaded) / HB_ERR_INTERNAL (CUDA failed) with the reason in
 * `err`. hb_gpu_free is a no-op for NULL and after shutdown. */
HB_API int hb_gpu_malloc(int device, size_t bytes, void** ptr, char* err,
                         size_t err_len);
HB_API void hb_gpu_free(int device, void* ptr);

/* Host memory as the runtime allocates its own large buffers (fusion
 * buffers), for front ends that keep output buffers of their own: aligned
 * to 64 bytes; a block of 2 MiB or more is aligned to 2 MiB and advised
 * onto transparent huge pages (MADV_HUGEPAGE, where the kernel allows it).
 * MPI's single-copy transfers between processes pin the pages they read:
 * across two emulated hosts one 19.2 MB allreduce took 1.9-2.2 ms on huge
 * pages against 3.8-4.0 ms on 4 KiB pages (docs/benchmarks.md).
 * hb_host_malloc returns NULL when memory ran out; release with
 * hb_host_free (a no-op for NULL). Valid without init. */
HB_API void* hb_host_malloc(size_t bytes);
HB_API void hb_host_free(void* ptr);

/* Autotune (HB_AUTOTUNE; the protocol is in csrc/core/src/runtime/autotune.h).
 * The core measures and applies; rank 0's tuner (the Python front end's
 * hbcore.autotune) reads each sample's score and proposes the next
 * parameters, which every rank applies at the same cycle. */
typedef struct {
  int64_t fusion_threshold;     /* bytes (HB_FUSION_THRESHOLD) */
  double cycle_time;            /* milliseconds (HB_CYCLE_TIME) */
  int cache_enabled;            /* 0 or 1 (HB_CACHE_CAPACITY's slots or 0) */
  int hierarchical_allreduce;   /* 0 or 1, where the layout built the path */
  int hierarchical_allgather;   /* 0 or 1, likewise */
  int ring_allreduce;           /* 0 or 1, likewise */
  int64_t pipeline_piece_bytes; /* 0: the backend's own */
} hb_tuning;

/* One bit per field of hb_tuning, for hb_autotune_state's mask. */
enum {
  HB_TUNE_FUSION_THRESHOLD = 1,
  HB_TUNE_CYCLE_TIME = 2,
  HB_TUNE_CACHE_ENABLED = 4,
  HB_TUNE_HIERARCHICAL_ALLREDUCE = 8,
  HB_TUNE_HIERARCHICAL_ALLGATHER = 16,
  HB_TUNE_RING_ALLREDUCE = 32,
  HB_TUNE_PIPELINE_PIECE_BYTES = 64
};

/* The parameters in force on this rank, and which ones the tuner may
 * change (they apply to the job's layout and were not set explicitly).
 * After hb_shutdown, until the next hb_init, this and hb_autotune_history
 * report the last runtime's final record (complete: its loop has ended,
 * after the same cycle on every rank). */
HB_API int hb_autotune_state(hb_tuning* current, unsigned* tunable);
/* Rank 0 with HB_AUTOTUNE=1: waits at most `timeout_s` for the next
 * closed sample. HB_OK with *got = 1 and the sample (its parameters, its
 * score in bytes per second, its wall time in seconds), or *got = 0 on
 * timeout; HB_ERR_SHUTDOWN once the runtime has stopped (no sample will
 * come); HB_ERR_INVALID_ARGUMENT elsewhere. Blocks no other API call. */
HB_API int hb_autotune_wait_sample(double timeout_s, int* got,
                                   hb_tuning* params, double* score,
                                   double* seconds, char* err,
                                   size_t err_len);
/* Rank 0 with HB_AUTOTUNE=1: the parameters to apply next (every rank,
 * at the same cycle); `final` != 0 ends tuning with them. */
HB_API int hb_autotune_propose(const hb_tuning* next, int final, char* err,
                               size_t err_len);
/* The proposals this rank applied, in order: fills at most `max` cycle
 * numbers and parameters and returns how many there are. */
HB_API int hb_autotune_history(int64_t* cycles, hb_tuning* applied,
                               int max);

/* Effective configuration as "KEY=value" lines; empty before init. Copies at
 * most buf_len-1 bytes and returns the full length. */
HB_API size_t hb_config_string(char* buf, size_t buf_len);

#ifdef __cplusplus
}
#endif

#endif /* HBCORE_C_API_H_ */
