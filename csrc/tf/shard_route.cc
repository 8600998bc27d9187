// The integer bookkeeping of the sharded embedding lookup
// (hbcore_tf/embedding/exchange.py), one kernel per side of the id
// exchange. In TF ops each side was about fifteen small kernels per table
// (unique, owner, dynamic_partition, gathers, cumsum, scatter_nd,
// boolean_mask, ...), each a pass over the ids and an executor dispatch,
// on every step's critical path before the first alltoall.
//
// Row partition (hbcore_tf/embedding/partition.py, the only other place
// that knows it): `num_rows` rows over `num_shards` shards in contiguous
// blocks; with q, rem = divmod(num_rows, num_shards), shard s owns q + 1
// rows when s < rem, else q, starting at s * q + min(s, rem).
//
// HbcoreShardRoute (sender):
//   ids [n] -> send: for each owner in shard order, the distinct ids it
//   owns (first-occurrence order), then one step flag; send_splits[s] =
//   that segment's length (ids + 1); restore[i] = the position of ids[i]'s
//   row among the rows the owners send back (the same layout without the
//   flags); invalid = the ids outside [0, num_rows), in input order, which
//   are routed as id 0 so that this rank still takes part in the exchange.
// HbcoreShardReceive (owner):
//   received, received_splits (the alltoall's outputs) -> distinct: local
//   row indices (global id - offset), deduplicated across all senders;
//   index [received ids]: position of each received id in distinct;
//   received_counts[s] = received_splits[s] - 1 (the flag dropped);
//   senders_with_data = the sum of the flags (float32 scalar).
// With unique=false nothing is deduplicated (distinct/index and the send
// segments then hold every id, as exchange.py documents for emb_unique).
//
// Hash partition (hash_partition=true, the dynamic tables of
// hbcore_tf/embedding/dynamic_table.py): ids are keys of any int64 value,
// none is invalid, and the owner of a key is MixKey(key) % num_shards
// (MixKey: the splitmix64 finalizer on the key's 64 bits, as unsigned);
// `num_rows` is ignored. The owner's `distinct` holds the keys themselves
// (no offset, no range check): its hash map turns them into rows.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace hbcore_tf {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;

// Deduplicates int64 keys: Insert returns the key's dense index (0, 1, ...
// in first-occurrence order). Open addressing with linear probing over a
// power-of-two table at most half full; one allocation per call.
class DenseIndex {
 public:
  explicit DenseIndex(int64_t expected) {
    size_t capacity = 16;
    shift_ = 60;
    while (capacity < static_cast<size_t>(expected) * 2) {
      capacity <<= 1;
      --shift_;
    }
    mask_ = capacity - 1;
    slots_.assign(capacity, Slot{0, -1});
  }

  int64_t Insert(int64_t key, std::vector<int64_t>* keys) {
    // Fibonacci hashing (the product's top bits): ids are often multiples
    // of a stride or hashed into a range, and the multiply spreads them.
    size_t at = static_cast<size_t>(
        (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
    for (;;) {
      Slot& slot = slots_[at];
      if (slot.index < 0) {
        slot = Slot{key, static_cast<int64_t>(keys->size())};
        keys->push_back(key);
        return slot.index;
      }
      if (slot.key == key) return slot.index;
      at = (at + 1) & mask_;
    }
  }

 private:
  struct Slot {
    int64_t key;
    int64_t index;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 60;  // 64 - log2(capacity)
};

// The splitmix64 finalizer: a bijection of 64-bit words that spreads
// sequential and strided keys evenly over the shards. Dynamic tables'
// initializer (hbcore_tf/embedding/dynamic_init.py) uses the same mix.
uint64_t MixKey(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Output `index` of the kernel: a copy of `values`, whose length is known
// only once the kernel has run.
absl::Status VectorOutput(OpKernelContext* c, int index,
                          const std::vector<int64_t>& values) {
  Tensor* out = nullptr;
  TF_RETURN_IF_ERROR(c->allocate_output(
      index, TensorShape({static_cast<int64_t>(values.size())}), &out));
  std::copy(values.begin(), values.end(), out->flat<int64_t>().data());
  return absl::Status();
}

class ShardRouteOp : public OpKernel {
 public:
  explicit ShardRouteOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("num_rows", &num_rows_));
    OP_REQUIRES_OK(c, c->GetAttr("num_shards", &num_shards_));
    OP_REQUIRES_OK(c, c->GetAttr("unique", &unique_));
    OP_REQUIRES_OK(c, c->GetAttr("hash_partition", &hash_partition_));
    OP_REQUIRES(c, num_shards_ >= 1 && num_rows_ >= 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "HbcoreShardRoute: num_rows (", num_rows_,
                    ") and num_shards (", num_shards_,
                    ") must be positive")));
    const int64_t q = num_rows_ / num_shards_;
    rem_ = num_rows_ % num_shards_;
    long_rows_ = q + 1;
    short_rows_ = q > 0 ? q : 1;
    cut_ = rem_ * long_rows_;
  }

  void Compute(OpKernelContext* c) override {
    const Tensor& ids_t = c->input(0);
    const Tensor& flag_t = c->input(1);
    OP_REQUIRES(c, ids_t.dims() == 1,
                absl::InvalidArgumentError(absl::StrCat(
                    "HbcoreShardRoute: ids must be a vector, got shape ",
                    ids_t.shape().DebugString())));
    OP_REQUIRES(c, flag_t.NumElements() == 1,
                absl::InvalidArgumentError(
                    "HbcoreShardRoute: step_flag must be a scalar"));
    const int64_t n = ids_t.NumElements();
    const int64_t* ids = ids_t.flat<int64_t>().data();
    const int64_t flag = flag_t.flat<int64_t>()(0);

    // Distinct ids (or every id) and each input id's index among them.
    std::vector<int64_t> keys;
    keys.reserve(n);
    std::vector<int64_t> invalid;
    Tensor* restore_t = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(2, TensorShape({n}), &restore_t));
    int64_t* restore = restore_t->flat<int64_t>().data();
    DenseIndex index(unique_ ? n : 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t id = ids[i];
      if (!hash_partition_ && (id < 0 || id >= num_rows_)) {
        invalid.push_back(id);
        id = 0;
      }
      if (unique_) {
        restore[i] = index.Insert(id, &keys);
      } else {
        restore[i] = i;
        keys.push_back(id);
      }
    }

    // Counting sort of the keys by owner, stable within each owner.
    const int64_t k = static_cast<int64_t>(keys.size());
    std::vector<int32_t> owner(k);
    std::vector<int64_t> counts(num_shards_, 0);
    for (int64_t u = 0; u < k; ++u) {
      owner[u] = Owner(keys[u]);
      ++counts[owner[u]];
    }
    std::vector<int64_t> next_row(num_shards_);  // position without flags
    int64_t rows = 0;
    for (int64_t s = 0; s < num_shards_; ++s) {
      next_row[s] = rows;
      rows += counts[s];
    }
    Tensor* send_t = nullptr;
    Tensor* splits_t = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(0, TensorShape({k + num_shards_}),
                                         &send_t));
    OP_REQUIRES_OK(c, c->allocate_output(1, TensorShape({num_shards_}),
                                         &splits_t));
    int64_t* send = send_t->flat<int64_t>().data();
    int64_t* splits = splits_t->flat<int64_t>().data();
    std::vector<int64_t> row_of(k);
    for (int64_t u = 0; u < k; ++u) {
      const int32_t s = owner[u];
      row_of[u] = next_row[s]++;
      // Segment s starts after the s flags of the segments before it.
      send[row_of[u] + s] = keys[u];
    }
    for (int64_t s = 0; s < num_shards_; ++s) {
      splits[s] = counts[s] + 1;
      send[next_row[s] + s] = flag;  // next_row[s] is now the segment's end
    }
    for (int64_t i = 0; i < n; ++i) restore[i] = row_of[restore[i]];

    OP_REQUIRES_OK(c, VectorOutput(c, 3, invalid));
  }

 private:
  int32_t Owner(int64_t id) const {
    if (hash_partition_) {
      return static_cast<int32_t>(MixKey(static_cast<uint64_t>(id)) %
                                  static_cast<uint64_t>(num_shards_));
    }
    return static_cast<int32_t>(id < cut_ ? id / long_rows_
                                          : rem_ + (id - cut_) / short_rows_);
  }

  int64_t num_rows_ = 0;
  int64_t num_shards_ = 0;
  bool unique_ = true;
  bool hash_partition_ = false;
  int64_t rem_ = 0, long_rows_ = 1, short_rows_ = 1, cut_ = 0;
};

class ShardReceiveOp : public OpKernel {
 public:
  explicit ShardReceiveOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("offset", &offset_));
    OP_REQUIRES_OK(c, c->GetAttr("rows", &rows_));
    OP_REQUIRES_OK(c, c->GetAttr("unique", &unique_));
    OP_REQUIRES_OK(c, c->GetAttr("hash_partition", &hash_partition_));
  }

  void Compute(OpKernelContext* c) override {
    const Tensor& received_t = c->input(0);
    const Tensor& splits_t = c->input(1);
    OP_REQUIRES(c, received_t.dims() == 1 && splits_t.dims() == 1,
                absl::InvalidArgumentError(
                    "HbcoreShardReceive: received and received_splits must "
                    "be vectors"));
    const int64_t* received = received_t.flat<int64_t>().data();
    const int64_t* splits = splits_t.flat<int64_t>().data();
    const int64_t senders = splits_t.NumElements();
    int64_t total = 0;
    for (int64_t s = 0; s < senders; ++s) {
      OP_REQUIRES(c, splits[s] >= 1,
                  absl::InvalidArgumentError(absl::StrCat(
                      "HbcoreShardReceive: sender ", s, "'s segment has ",
                      splits[s], " elements; every segment ends with the "
                      "sender's step flag")));
      total += splits[s];
    }
    OP_REQUIRES(c, total == received_t.NumElements(),
                absl::InvalidArgumentError(absl::StrCat(
                    "HbcoreShardReceive: received_splits add up to ", total,
                    ", but ", received_t.NumElements(), " ids arrived")));

    Tensor* index_t = nullptr;
    Tensor* counts_t = nullptr;
    Tensor* with_data_t = nullptr;
    OP_REQUIRES_OK(c, c->allocate_output(
                          1, TensorShape({total - senders}), &index_t));
    OP_REQUIRES_OK(c, c->allocate_output(2, TensorShape({senders}),
                                         &counts_t));
    OP_REQUIRES_OK(c, c->allocate_output(3, TensorShape({}), &with_data_t));
    int64_t* index = index_t->flat<int64_t>().data();
    int64_t* counts = counts_t->flat<int64_t>().data();
    std::vector<int64_t> distinct;
    distinct.reserve(total - senders);
    DenseIndex dense(unique_ ? total - senders : 0);
    int64_t flags = 0, at = 0, out = 0;
    for (int64_t s = 0; s < senders; ++s) {
      counts[s] = splits[s] - 1;
      for (int64_t j = 0; j < counts[s]; ++j, ++at, ++out) {
        const int64_t local =
            hash_partition_ ? received[at] : received[at] - offset_;
        OP_REQUIRES(c, hash_partition_ || (local >= 0 && local < rows_),
                    absl::InternalError(absl::StrCat(
                        "HbcoreShardReceive: sender ", s, " sent id ",
                        received[at], ", which this shard (rows ", offset_,
                        " to ", offset_ + rows_ - 1, ") does not own")));
        if (unique_) {
          index[out] = dense.Insert(local, &distinct);
        } else {
          index[out] = out;
          distinct.push_back(local);
        }
      }
      flags += received[at++];  // the segment's last element
    }
    with_data_t->scalar<float>()() = static_cast<float>(flags);
    OP_REQUIRES_OK(c, VectorOutput(c, 0, distinct));
  }

 private:
  int64_t offset_ = 0;
  int64_t rows_ = 0;
  bool unique_ = true;
  bool hash_partition_ = false;
};

absl::Status RouteShape(InferenceContext* c) {
  int64_t num_shards = 0;
  TF_RETURN_IF_ERROR(c->GetAttr("num_shards", &num_shards));
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Vector(num_shards));
  c->set_output(2, c->Vector(c->Dim(c->input(0), 0)));
  c->set_output(3, c->Vector(c->UnknownDim()));
  return absl::Status();
}

absl::Status ReceiveShape(InferenceContext* c) {
  c->set_output(0, c->Vector(c->UnknownDim()));
  c->set_output(1, c->Vector(c->UnknownDim()));
  c->set_output(2, c->Vector(c->Dim(c->input(1), 0)));
  c->set_output(3, c->Scalar());
  return absl::Status();
}

}  // namespace

REGISTER_OP("HbcoreShardRoute")
    .Input("ids: int64")
    .Input("step_flag: int64")
    .Output("send: int64")
    .Output("send_splits: int64")
    .Output("restore: int64")
    .Output("invalid: int64")
    .Attr("num_rows: int")
    .Attr("num_shards: int")
    .Attr("unique: bool = true")
    .Attr("hash_partition: bool = false")
    .SetShapeFn(RouteShape)
    .Doc("Sender side of the sharded lookup's id exchange (shard_route.cc).");

REGISTER_OP("HbcoreShardReceive")
    .Input("received: int64")
    .Input("received_splits: int64")
    .Output("distinct: int64")
    .Output("index: int64")
    .Output("received_counts: int64")
    .Output("senders_with_data: float")
    .Attr("offset: int")
    .Attr("rows: int")
    .Attr("unique: bool = true")
    .Attr("hash_partition: bool = false")
    .SetShapeFn(ReceiveShape)
    .Doc("Owner side of the sharded lookup's id exchange (shard_route.cc).");

REGISTER_KERNEL_BUILDER(Name("HbcoreShardRoute").Device(tensorflow::DEVICE_CPU),
                        ShardRouteOp);
REGISTER_KERNEL_BUILDER(
    Name("HbcoreShardReceive").Device(tensorflow::DEVICE_CPU), ShardReceiveOp);

}  // namespace hbcore_tf
