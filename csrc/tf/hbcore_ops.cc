// TensorFlow front end of the core: AsyncOpKernels that enqueue into
// libhbcore through its C API and return at once. TF's thread never waits
// for other ranks; the core's background thread fills the outputs and
// completes the kernel (see Invocation for the thread `done` runs on).
// Outputs whose size depends on other ranks are allocated from the
// core's allocator callback, once the negotiation knows their shape.
//
// Tensor names arrive as a string input (not an attribute), so eager calls
// with fresh names reuse one cached kernel instead of instantiating one per
// name.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpu_placement.h"
#include "hbcore/c_api.h"
#include "output_pool.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hbcore_tf {

using tensorflow::AsyncOpKernel;
using tensorflow::DataType;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using Status = absl::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The one translation table from core status codes to TF error types
// (Horovod's mapping: cross-rank mismatch is FailedPrecondition; a runtime
// that shut down is Unknown, Horovod 0.28.1's SHUT_DOWN_ERROR. Not Aborted:
// TF's MonitoredSession takes an AbortedError for a preempted worker and
// creates its session again, and every step after a shutdown fails the
// same way, so the session restarted for ever).
Status ToTfStatus(int code, const char* message) {
  switch (code) {
    case HB_OK:
      return Status();
    case HB_ERR_INVALID_ARGUMENT:
    case HB_ERR_DUPLICATE_NAME:
    case HB_ERR_CONFIG:
      return absl::InvalidArgumentError(message);
    case HB_ERR_MISMATCH:
    case HB_ERR_NOT_INITIALIZED:
      return absl::FailedPreconditionError(message);
    case HB_ERR_SHUTDOWN:
      return absl::UnknownError(message);
    case HB_ERR_UNSUPPORTED:
      return absl::UnimplementedError(message);
    default:
      return absl::InternalError(message);
  }
}

int ToHbDtype(DataType dt) {
  switch (dt) {
    case tensorflow::DT_UINT8: return HB_UINT8;
    case tensorflow::DT_INT8: return HB_INT8;
    case tensorflow::DT_UINT16: return HB_UINT16;
    case tensorflow::DT_INT16: return HB_INT16;
    case tensorflow::DT_INT32: return HB_INT32;
    case tensorflow::DT_INT64: return HB_INT64;
    case tensorflow::DT_HALF: return HB_FLOAT16;
    case tensorflow::DT_BFLOAT16: return HB_BFLOAT16;
    case tensorflow::DT_FLOAT: return HB_FLOAT32;
    case tensorflow::DT_DOUBLE: return HB_FLOAT64;
    case tensorflow::DT_BOOL: return HB_BOOL;
    default: return -1;
  }
}

// State shared by the requests of one kernel invocation. The kernel's
// `done` runs once, after the last request finished; the first error wins.
//
// Where `done` runs: in a graph (tf.function, tf.compat.v1 session), on the
// executor's own thread pool, handed over through the context's runner, not
// on the core's background thread that finished the requests. TF's
// executor, told from a foreign thread that a node is done, schedules every
// ready consumer as its own task, and each task can wake a sleeping pool
// thread: a grouped allreduce of 204 one-element tensors, each with its
// own consumer, measured 43 pool-thread sleeps and wake-ups per step and
// 1.25 ms a step (2 ranks on 2 cores; 0.37 ms without the collective). Run
// on a pool thread, the same consumers go to that thread's own queue and
// run there in turn: 2 sleeps and 0.72 ms a step. Eager kernels keep
// calling `done` at once: their caller waits on it (AwaitEager), and one
// more hand-off would only add latency; so do join and barrier, which have
// at most one output.
class Invocation {
 public:
  // `via_runner`: hand `done` to the executor's runner (graph kernels with
  // outputs; see above) instead of calling it on the finishing thread.
  Invocation(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, int n,
             bool via_runner)
      : ctx_(ctx),
        done_(std::move(done)),
        runner_(via_runner ? ctx->runner() : nullptr),
        remaining_(n) {}

  OpKernelContext* ctx() const { return ctx_; }

  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = s;
  }

  // Returns true for the call that finished the invocation.
  bool FinishOne() { return remaining_.fetch_sub(1) == 1; }

  void Complete() {
    ctx_->SetStatus(status_);
    if (runner_ != nullptr && *runner_) {
      (*runner_)(std::move(done_));
      return;
    }
    done_();
    completed_.store(true, std::memory_order_release);
  }

  // Spins (yielding) until the invocation completed or `limit` passed.
  void SpinUntilComplete(std::chrono::microseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!completed_.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  }

 private:
  OpKernelContext* ctx_;
  AsyncOpKernel::DoneCallback done_;
  // The executor's runner (graphs), or null: see the class comment.
  std::function<void(std::function<void()>)>* runner_;
  std::atomic<int> remaining_;
  std::atomic<bool> completed_{false};
  std::mutex mu_;
  Status status_;
};

// What one request's callbacks see.
struct Slot {
  std::shared_ptr<Invocation> invocation;
  int output_index = 0;
  // Called in the done callback before completion (alltoall splits, join).
  std::function<Status(const hb_result*)> finish;
};

void* AllocateOutput(void* user, int ndim, const int64_t* shape) {
  Slot* slot = static_cast<Slot*>(user);
  TensorShape tf_shape;
  for (int i = 0; i < ndim; ++i) tf_shape.AddDim(shape[i]);
  Tensor* out = nullptr;
  Status s = slot->invocation->ctx()->allocate_output(slot->output_index,
                                                      tf_shape, &out);
  if (!s.ok()) {
    slot->invocation->Fail(s);
    return nullptr;
  }
  // A zero-size tensor may have no buffer; the core never touches it.
  static char empty;
  return out->NumElements() == 0 ? &empty : out->data();
}

void RequestDone(void* user, int code, const char* message,
                 const hb_result* result) {
  std::unique_ptr<Slot> slot(static_cast<Slot*>(user));
  if (code != HB_OK) {
    slot->invocation->Fail(ToTfStatus(code, message));
  } else if (slot->finish) {
    Status s = slot->finish(result);
    if (!s.ok()) slot->invocation->Fail(s);
  }
  if (slot->invocation->FinishOne()) slot->invocation->Complete();
}

// `process_set_id`: the op's attribute of that name (0: every rank).
// `placement`: where the kernel's tensors live (gpu_placement.h).
hb_request BaseRequest(const std::string& name, int op, int process_set_id,
                       const Placement& placement = Placement()) {
  hb_request r{};
  r.name = name.c_str();
  r.op = op;
  r.process_set_id = process_set_id;
  r.reduce_op = HB_REDUCE_SUM;
  r.prescale_factor = 1.0;
  r.postscale_factor = 1.0;
  r.device = placement.device;
  r.stream = placement.stream;
  r.done = &RequestDone;
  return r;
}

// Submits prepared requests; on rejection fails the kernel at once (no
// callback will run for them) and returns false.
bool Submit(std::vector<hb_request>* requests,
            std::vector<std::unique_ptr<Slot>>* slots, OpKernelContext* ctx,
            const AsyncOpKernel::DoneCallback& done) {
  for (size_t i = 0; i < requests->size(); ++i) {
    (*requests)[i].user = (*slots)[i].get();
  }
  char err[1024] = {0};
  int code = hb_enqueue(requests->data(), static_cast<int>(requests->size()),
                        err, sizeof(err));
  if (code != HB_OK) {
    ctx->SetStatus(ToTfStatus(code, err));
    done();
    return false;
  }
  for (auto& s : *slots) s.release();  // owned by the core until RequestDone
  return true;
}

// Eager execution blocks the calling thread on the op. Its requests are
// the whole burst, so the core negotiates them at once (hb_flush), and a
// short spin here usually sees them complete before TF's wait for `done`
// would put the thread to sleep (saving a sleep and a wake-up, tens of
// microseconds on a VM). Never used in graphs: there the thread belongs to
// TF's executor, and other ops of the step may be ready to run on it.
//
// The spin is free only when the host has a CPU for it besides the
// threads that finish the collective: every local rank's background
// thread and waiting thread, 2 * local_size in all. With fewer CPUs the
// spinning waiter takes the CPU those threads need (measured, 4 B eager
// allreduce on 2 cores: 1 rank 20 us with the spin, 56 us without; 2 ranks
// 55 us with it, 46 us without), so it sleeps at once. The core decides
// (hb_spin_wait), for every front end alike.
constexpr auto kEagerSpin = std::chrono::microseconds(200);

void AwaitEager(const Invocation& invocation) {
  hb_flush();
  if (hb_spin_wait()) invocation.SpinUntilComplete(kEagerSpin);
}

// The output of an allreduce or broadcast, which has its input's shape:
// the input's own buffer when TF lets the op take it over (no other reader:
// the collective runs in place and nothing is allocated), else a recycled
// buffer for a large output, else one from TF's allocator.
// (The pool holds host memory: GPU outputs come from TF's allocator.)
Status SameShapeOutput(OpKernelContext* ctx, int i, OutputPool* pool,
                       bool gpu, Tensor** out) {
  const Tensor& in = ctx->input(i);
  if (ctx->forward_input_to_output_with_shape(i, i, in.shape(), out)) {
    return Status();
  }
  if (!gpu && in.TotalBytes() >= OutputPool::kMinPooledBytes) {
    Tensor pooled;
    if (pool->Allocate(in.dtype(), in.shape(), &pooled)) {
      ctx->set_output(i, std::move(pooled));
      *out = ctx->mutable_output(i);
      return Status();
    }
  }
  return ctx->allocate_output(i, in.shape(), out);
}

// Allreduce, allgather, broadcast and reducescatter of a list of tensors of
// any types, announced together so they negotiate in one cycle and fuse.
class CollectiveOp : public AsyncOpKernel {
 public:
  explicit CollectiveOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs() - 1;
    const Tensor& names = ctx->input(n);
    OP_REQUIRES_ASYNC(ctx, names.NumElements() == n,
                      absl::InvalidArgumentError(absl::StrCat(
                          "expected ", n, " tensor names, got ",
                          names.NumElements())),
                      done);
    auto invocation = std::make_shared<Invocation>(ctx, done, n, !eager_);
    std::vector<std::string> name_copies(n);
    std::vector<std::vector<int64_t>> shapes(n);
    std::vector<hb_request> requests(n);
    std::vector<std::unique_ptr<Slot>> slots(n);
    const bool sized_by_peers =
        op_ == HB_ALLGATHER || op_ == HB_REDUCESCATTER;
    const Placement placement = PlacementOf(ctx);
    if (!sized_by_peers && !placement.gpu()) {
      size_t pooled = 0;
      for (int i = 0; i < n; ++i) {
        const size_t bytes = ctx->input(i).TotalBytes();
        if (bytes >= OutputPool::kMinPooledBytes) pooled += bytes;
      }
      if (pooled > 0) pool_->Reserve(pooled);
    }
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      name_copies[i] = names.flat<tensorflow::tstring>()(i);
      hb_request& r = requests[i];
      r = BaseRequest(name_copies[i], op_, process_set_id_, placement);
      r.dtype = ToHbDtype(in.dtype());
      OP_REQUIRES_ASYNC(ctx, r.dtype >= 0,
                        absl::InvalidArgumentError(absl::StrCat(
                            "hbcore does not support dtype ",
                            tensorflow::DataTypeString(in.dtype()))),
                        done);
      for (int d = 0; d < in.dims(); ++d) shapes[i].push_back(in.dim_size(d));
      r.ndim = in.dims();
      r.shape = shapes[i].data();
      r.input = in.NumElements() ? in.data() : nullptr;
      r.reduce_op = reduce_op_;
      r.root_rank = root_rank_;
      r.prescale_factor = prescale_;
      r.postscale_factor = postscale_;
      slots[i] = std::make_unique<Slot>();
      slots[i]->invocation = invocation;
      slots[i]->output_index = i;
      if (sized_by_peers) {
        r.alloc = &AllocateOutput;
      } else {
        Tensor* out = nullptr;
        OP_REQUIRES_OK_ASYNC(
            ctx, SameShapeOutput(ctx, i, pool_.get(), placement.gpu(), &out),
            done);
        r.output = out->NumElements() ? out->data() : nullptr;
      }
    }
    if (Submit(&requests, &slots, ctx, done) && eager_) {
      AwaitEager(*invocation);
    }
  }

 private:
  bool eager_ = false;
  int op_ = HB_ALLREDUCE;
  // Shared with the buffers it handed out, which may outlive the kernel.
  std::shared_ptr<OutputPool> pool_ = std::make_shared<OutputPool>();
  int reduce_op_ = HB_REDUCE_SUM;
  int root_rank_ = 0;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int process_set_id_ = 0;
};

class AlltoallOp : public AsyncOpKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("eager", &eager_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& in = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    const std::string name(ctx->input(2).scalar<tensorflow::tstring>()());
    auto invocation = std::make_shared<Invocation>(ctx, done, 1, !eager_);
    std::vector<int64_t> shape;
    for (int d = 0; d < in.dims(); ++d) shape.push_back(in.dim_size(d));
    std::vector<int64_t> split_values;
    auto flat = splits.flat<int64_t>();
    for (int64_t i = 0; i < flat.size(); ++i) split_values.push_back(flat(i));

    std::vector<hb_request> requests(
        1, BaseRequest(name, HB_ALLTOALL, process_set_id_, PlacementOf(ctx)));
    hb_request& r = requests[0];
    r.dtype = ToHbDtype(in.dtype());
    OP_REQUIRES_ASYNC(ctx, r.dtype >= 0,
                      absl::InvalidArgumentError(absl::StrCat(
                          "hbcore does not support dtype ",
                          tensorflow::DataTypeString(in.dtype()))),
                      done);
    r.ndim = in.dims();
    r.shape = shape.data();
    r.input = in.NumElements() ? in.data() : nullptr;
    r.splits = split_values.empty() ? nullptr : split_values.data();
    r.num_splits = static_cast<int>(split_values.size());
    r.alloc = &AllocateOutput;
    std::vector<std::unique_ptr<Slot>> slots;
    slots.push_back(std::make_unique<Slot>());
    slots[0]->invocation = invocation;
    slots[0]->finish = [ctx](const hb_result* result) {
      Tensor* received = nullptr;
      Status s = ctx->allocate_output(
          1, TensorShape({result->num_received_splits}), &received);
      if (!s.ok()) return s;
      auto out = received->flat<int64_t>();
      for (int i = 0; i < result->num_received_splits; ++i) {
        out(i) = result->received_splits[i];
      }
      return Status();
    };
    if (Submit(&requests, &slots, ctx, done) && eager_) {
      AwaitEager(*invocation);
    }
  }

 private:
  bool eager_ = false;
  int process_set_id_ = 0;
};

// Join and barrier: no data; join outputs the last rank that joined.
class ControlOp : public AsyncOpKernel {
 public:
  explicit ControlOp(OpKernelConstruction* c)
      : AsyncOpKernel(c),
        op_(c->def().op() == "HbcoreJoin" ? HB_JOIN : HB_BARRIER) {
    if (op_ == HB_BARRIER) {
      OP_REQUIRES_OK(c, c->GetAttr("process_set_id", &process_set_id_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const std::string name(ctx->input(0).scalar<tensorflow::tstring>()());
    auto invocation = std::make_shared<Invocation>(
        ctx, done, 1, /*via_runner=*/false);
    std::vector<hb_request> requests(1,
                                     BaseRequest(name, op_, process_set_id_));
    requests[0].dtype = HB_UINT8;
    std::vector<std::unique_ptr<Slot>> slots;
    slots.push_back(std::make_unique<Slot>());
    slots[0]->invocation = invocation;
    if (op_ == HB_JOIN) {
      slots[0]->finish = [ctx](const hb_result* result) {
        Tensor* out = nullptr;
        Status s = ctx->allocate_output(0, TensorShape({}), &out);
        if (s.ok()) out->scalar<int32_t>()() = result->last_joined_rank;
        return s;
      };
    }
    Submit(&requests, &slots, ctx, done);
  }

 private:
  const int op_;
  int process_set_id_ = 0;
};

// rank/size/local_rank/local_size/cross_rank/cross_size, read when the op
// runs (a graph may be built before init).
class TopologyOp : public tensorflow::OpKernel {
 public:
  explicit TopologyOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("what", &what_));
  }

  void Compute(OpKernelContext* ctx) override {
    int value = -1;
    if (what_ == "rank") value = hb_rank();
    else if (what_ == "size") value = hb_size();
    else if (what_ == "local_rank") value = hb_local_rank();
    else if (what_ == "local_size") value = hb_local_size();
    else if (what_ == "cross_rank") value = hb_cross_rank();
    else if (what_ == "cross_size") value = hb_cross_size();
    OP_REQUIRES(ctx, value >= 0,
                absl::FailedPreconditionError(
                    "hbcore has not been initialized; use hvd.init()."));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  std::string what_;
};

Status CollectiveShape(InferenceContext* c) {
  int op = HB_ALLREDUCE;
  TF_RETURN_IF_ERROR(c->GetAttr("op", &op));
  for (int i = 0; i < c->num_outputs(); ++i) {
    ShapeHandle in = c->input(i);
    if (op == HB_ALLGATHER || op == HB_REDUCESCATTER) {
      ShapeHandle out;
      if (c->RankKnown(in) && c->Rank(in) > 0) {
        TF_RETURN_IF_ERROR(
            c->ReplaceDim(in, 0, c->UnknownDim(), &out));
      } else {
        out = c->UnknownShape();
      }
      c->set_output(i, out);
    } else {
      c->set_output(i, in);
    }
  }
  return Status();
}

#define HB_TF_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"

REGISTER_OP("HbcoreCollective")
    .Input("tensors: T")
    .Input("names: string")
    .Output("outputs: T")
    .Attr("T: list(" HB_TF_TYPES ") >= 1")
    .Attr("op: int")  // hb_op_type
    .Attr(absl::StrCat("reduce_op: int = ", HB_REDUCE_SUM))  // hb_reduce_op
    .Attr("root_rank: int = 0")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("eager: bool = false")  // called eagerly: see AwaitEager
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(CollectiveShape)
    .Doc("Allreduce/allgather/broadcast/reducescatter of tensors announced "
         "together to the hbcore runtime.");

REGISTER_OP("HbcoreAlltoall")
    .Input("tensor: T")
    .Input("splits: int64")
    .Input("tensor_name: string")
    .Output("output: T")
    .Output("received_splits: int64")
    .Attr("T: " HB_TF_TYPES)
    .Attr("eager: bool = false")  // called eagerly: see AwaitEager
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle out;
      if (c->RankKnown(c->input(0)) && c->Rank(c->input(0)) > 0) {
        TF_RETURN_IF_ERROR(
            c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      } else {
        out = c->UnknownShape();
      }
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return Status();
    });

REGISTER_OP("HbcoreJoin")
    .Input("tensor_name: string")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_OP("HbcoreBarrier")
    .Input("tensor_name: string")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::NoOutputs);

REGISTER_OP("HbcoreTopology")
    .Output("value: int32")
    .Attr("what: {'rank', 'size', 'local_rank', 'local_size', 'cross_rank', "
          "'cross_size'}")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_KERNEL_BUILDER(Name("HbcoreCollective").Device(tensorflow::DEVICE_CPU),
                        CollectiveOp);
REGISTER_KERNEL_BUILDER(Name("HbcoreAlltoall").Device(tensorflow::DEVICE_CPU),
                        AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("HbcoreJoin").Device(tensorflow::DEVICE_CPU),
                        ControlOp);
REGISTER_KERNEL_BUILDER(Name("HbcoreBarrier").Device(tensorflow::DEVICE_CPU),
                        ControlOp);
REGISTER_KERNEL_BUILDER(Name("HbcoreTopology").Device(tensorflow::DEVICE_CPU),
                        TopologyOp);

// GPU kernels: the same kernels, with GPU tensors handed to the core's NCCL
// backend on TensorFlow's stream (gpu_placement.h). A TensorFlow without
// CUDA has no GPU device, so it never picks them. Names and splits stay in
// host memory.
REGISTER_KERNEL_BUILDER(Name("HbcoreCollective")
                            .Device(tensorflow::DEVICE_GPU)
                            .HostMemory("names"),
                        CollectiveOp);
REGISTER_KERNEL_BUILDER(Name("HbcoreAlltoall")
                            .Device(tensorflow::DEVICE_GPU)
                            .HostMemory("splits")
                            .HostMemory("tensor_name")
                            .HostMemory("received_splits"),
                        AlltoallOp);

}  // namespace hbcore_tf
