// The binary interface of the CUDA runtime (libcudart.so.12) and NCCL
// (libnccl.so.2) entry points that hbcore loads with dlopen, declared here
// so that nothing CUDA is needed to build hbcore. The numbers and layouts
// are those of the public cuda_runtime_api.h and nccl.h (CUDA 12, NCCL
// 2.18+); only what hbcore calls is declared. The fake libraries in
// tests/fake_gpu implement exactly this list.
#ifndef HBCORE_GPU_GPU_ABI_H_
#define HBCORE_GPU_GPU_ABI_H_

#include <cstddef>

// Function-pointer types of C entry points: GCC and Clang ignore language
// linkage on them, so they live in hbcore's namespace like the rest.
namespace hbcore {

// ---- CUDA runtime ----
typedef int cudaError_t;  // cudaSuccess = 0
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

constexpr cudaError_t kCudaSuccess = 0;
constexpr cudaError_t kCudaErrorNotReady = 600;  // cudaErrorNotReady
constexpr unsigned kCudaStreamNonBlocking = 0x01;
constexpr unsigned kCudaEventDisableTiming = 0x02;
constexpr int kCudaMemcpyDeviceToDevice = 3;  // cudaMemcpyKind
constexpr int kCudaMemcpyDefault = 4;

typedef cudaError_t (*cudaGetDeviceCount_fn)(int* count);
typedef cudaError_t (*cudaSetDevice_fn)(int device);
typedef cudaError_t (*cudaGetDevice_fn)(int* device);
// The device's PCI bus id, "domain:bus:device.function" (hex): what names
// one GPU across the processes of a machine, whatever their device
// numbering (CUDA_VISIBLE_DEVICES), as NCCL's own check of duplicates does.
typedef cudaError_t (*cudaDeviceGetPCIBusId_fn)(char* bus_id, int len,
                                                int device);
typedef cudaError_t (*cudaRuntimeGetVersion_fn)(int* version);
typedef cudaError_t (*cudaMalloc_fn)(void** ptr, size_t bytes);
typedef cudaError_t (*cudaFree_fn)(void* ptr);
typedef cudaError_t (*cudaMemcpyAsync_fn)(void* dst, const void* src,
                                          size_t bytes, int kind,
                                          cudaStream_t stream);
typedef cudaError_t (*cudaMemsetAsync_fn)(void* ptr, int value, size_t bytes,
                                          cudaStream_t stream);
typedef cudaError_t (*cudaStreamCreateWithFlags_fn)(cudaStream_t* stream,
                                                    unsigned flags);
typedef cudaError_t (*cudaStreamDestroy_fn)(cudaStream_t stream);
typedef cudaError_t (*cudaStreamSynchronize_fn)(cudaStream_t stream);
typedef cudaError_t (*cudaStreamQuery_fn)(cudaStream_t stream);
typedef cudaError_t (*cudaStreamWaitEvent_fn)(cudaStream_t stream,
                                              cudaEvent_t event,
                                              unsigned flags);
typedef cudaError_t (*cudaEventCreateWithFlags_fn)(cudaEvent_t* event,
                                                   unsigned flags);
typedef cudaError_t (*cudaEventDestroy_fn)(cudaEvent_t event);
typedef cudaError_t (*cudaEventRecord_fn)(cudaEvent_t event,
                                          cudaStream_t stream);
typedef cudaError_t (*cudaEventQuery_fn)(cudaEvent_t event);
typedef const char* (*cudaGetErrorString_fn)(cudaError_t error);

// ---- NCCL ----
typedef int ncclResult_t;  // ncclSuccess = 0
typedef struct ncclComm* ncclComm_t;
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
constexpr int kNcclUniqueIdBytes = 128;
typedef struct {
  char internal[kNcclUniqueIdBytes];
} ncclUniqueId;

constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
// ncclDataType_t
constexpr ncclDataType_t kNcclInt8 = 0;
constexpr ncclDataType_t kNcclUint8 = 1;
constexpr ncclDataType_t kNcclInt32 = 2;
constexpr ncclDataType_t kNcclUint32 = 3;
constexpr ncclDataType_t kNcclInt64 = 4;
constexpr ncclDataType_t kNcclUint64 = 5;
constexpr ncclDataType_t kNcclFloat16 = 6;
constexpr ncclDataType_t kNcclFloat32 = 7;
constexpr ncclDataType_t kNcclFloat64 = 8;
constexpr ncclDataType_t kNcclBfloat16 = 9;
// ncclRedOp_t
constexpr ncclRedOp_t kNcclSum = 0;
constexpr ncclRedOp_t kNcclProd = 1;
constexpr ncclRedOp_t kNcclMax = 2;
constexpr ncclRedOp_t kNcclMin = 3;
constexpr ncclRedOp_t kNcclAvg = 4;
// ncclScalarResidence_t
constexpr int kNcclScalarHostImmediate = 1;

typedef ncclResult_t (*ncclGetVersion_fn)(int* version);
typedef ncclResult_t (*ncclGetUniqueId_fn)(ncclUniqueId* id);
typedef ncclResult_t (*ncclCommInitRank_fn)(ncclComm_t* comm, int nranks,
                                            ncclUniqueId id, int rank);
typedef ncclResult_t (*ncclCommDestroy_fn)(ncclComm_t comm);
typedef ncclResult_t (*ncclCommAbort_fn)(ncclComm_t comm);
typedef ncclResult_t (*ncclCommGetAsyncError_fn)(ncclComm_t comm,
                                                 ncclResult_t* error);
typedef const char* (*ncclGetErrorString_fn)(ncclResult_t result);
typedef ncclResult_t (*ncclRedOpCreatePreMulSum_fn)(ncclRedOp_t* op,
                                                    void* scalar,
                                                    ncclDataType_t dtype,
                                                    int residence,
                                                    ncclComm_t comm);
typedef ncclResult_t (*ncclRedOpDestroy_fn)(ncclRedOp_t op, ncclComm_t comm);
typedef ncclResult_t (*ncclAllReduce_fn)(const void* send, void* recv,
                                         size_t count, ncclDataType_t dtype,
                                         ncclRedOp_t op, ncclComm_t comm,
                                         cudaStream_t stream);
typedef ncclResult_t (*ncclBroadcast_fn)(const void* send, void* recv,
                                         size_t count, ncclDataType_t dtype,
                                         int root, ncclComm_t comm,
                                         cudaStream_t stream);
typedef ncclResult_t (*ncclReduce_fn)(const void* send, void* recv,
                                      size_t count, ncclDataType_t dtype,
                                      ncclRedOp_t op, int root,
                                      ncclComm_t comm, cudaStream_t stream);
typedef ncclResult_t (*ncclAllGather_fn)(const void* send, void* recv,
                                         size_t send_count,
                                         ncclDataType_t dtype,
                                         ncclComm_t comm, cudaStream_t stream);
typedef ncclResult_t (*ncclReduceScatter_fn)(const void* send, void* recv,
                                             size_t recv_count,
                                             ncclDataType_t dtype,
                                             ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream);
typedef ncclResult_t (*ncclSend_fn)(const void* send, size_t count,
                                    ncclDataType_t dtype, int peer,
                                    ncclComm_t comm, cudaStream_t stream);
typedef ncclResult_t (*ncclRecv_fn)(void* recv, size_t count,
                                    ncclDataType_t dtype, int peer,
                                    ncclComm_t comm, cudaStream_t stream);
typedef ncclResult_t (*ncclGroupStart_fn)();
typedef ncclResult_t (*ncclGroupEnd_fn)();

}  // namespace hbcore

// Every entry point hbcore resolves, each listed once as X(field, symbol):
// GpuLibraries declares the member `symbol##_fn field` and dlsym's
// `symbol` from one line of these lists.
#define HB_CUDA_ENTRY_POINTS(X)                         \
  X(GetDeviceCount, cudaGetDeviceCount)                 \
  X(SetDevice, cudaSetDevice)                           \
  X(GetDevice, cudaGetDevice)                           \
  X(DeviceGetPCIBusId, cudaDeviceGetPCIBusId)           \
  X(RuntimeGetVersion, cudaRuntimeGetVersion)           \
  X(Malloc, cudaMalloc)                                 \
  X(Free, cudaFree)                                     \
  X(MemcpyAsync, cudaMemcpyAsync)                       \
  X(MemsetAsync, cudaMemsetAsync)                       \
  X(StreamCreateWithFlags, cudaStreamCreateWithFlags)   \
  X(StreamDestroy, cudaStreamDestroy)                   \
  X(StreamSynchronize, cudaStreamSynchronize)           \
  X(StreamQuery, cudaStreamQuery)                       \
  X(StreamWaitEvent, cudaStreamWaitEvent)               \
  X(EventCreateWithFlags, cudaEventCreateWithFlags)     \
  X(EventDestroy, cudaEventDestroy)                     \
  X(EventRecord, cudaEventRecord)                       \
  X(EventQuery, cudaEventQuery)                         \
  X(GetErrorString, cudaGetErrorString)

#define HB_NCCL_ENTRY_POINTS(X)                         \
  X(GetVersion, ncclGetVersion)                         \
  X(GetUniqueId, ncclGetUniqueId)                       \
  X(CommInitRank, ncclCommInitRank)                     \
  X(CommDestroy, ncclCommDestroy)                       \
  X(CommAbort, ncclCommAbort)                           \
  X(CommGetAsyncError, ncclCommGetAsyncError)           \
  X(GetErrorString, ncclGetErrorString)                 \
  X(RedOpCreatePreMulSum, ncclRedOpCreatePreMulSum)     \
  X(RedOpDestroy, ncclRedOpDestroy)                     \
  X(AllReduce, ncclAllReduce)                           \
  X(Broadcast, ncclBroadcast)                           \
  X(Reduce, ncclReduce)                                 \
  X(AllGather, ncclAllGather)                           \
  X(ReduceScatter, ncclReduceScatter)                   \
  X(Send, ncclSend)                                     \
  X(Recv, ncclRecv)                                     \
  X(GroupStart, ncclGroupStart)                         \
  X(GroupEnd, ncclGroupEnd)

#endif  // HBCORE_GPU_GPU_ABI_H_
