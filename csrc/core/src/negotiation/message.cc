#include "negotiation/message.h"

#include <cstring>

namespace hbcore {
namespace {

class Writer {
 public:
  template <typename T>
  void Pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void Str(const std::string& s) {
    Pod<uint64_t>(s.size());
    out_.append(s);
  }
  void Ints(const std::vector<int64_t>& v) {
    Pod<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()),
                v.size() * sizeof(int64_t));
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fail-soft: after the first short read every call returns false.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  bool Pod(T* v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Str(std::string* s) {
    uint64_t n = 0;
    if (!Pod(&n) || pos_ + n > in_.size()) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Ints(std::vector<int64_t>* v) {
    uint64_t n = 0;
    if (!Pod(&n) || pos_ + n * sizeof(int64_t) > in_.size()) return false;
    v->resize(n);
    if (n) std::memcpy(v->data(), in_.data() + pos_, n * sizeof(int64_t));
    pos_ += n * sizeof(int64_t);
    return true;
  }
  bool Done() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

void Write(Writer* w, const Request& r) {
  w->Pod(r.rank);
  w->Str(r.name);
  w->Pod(static_cast<int32_t>(r.op));
  w->Pod(static_cast<int32_t>(r.reduce_op));
  w->Pod(static_cast<int32_t>(r.dtype));
  w->Ints(r.shape);
  w->Pod(r.root_rank);
  w->Pod(r.prescale);
  w->Pod(r.postscale);
  w->Ints(r.splits);
  w->Pod(r.device);
}

bool Read(Reader* in, Request* r) {
  int32_t op = 0, reduce = 0, dtype = 0;
  return in->Pod(&r->rank) && in->Str(&r->name) && in->Pod(&op) &&
         in->Pod(&reduce) && in->Pod(&dtype) && in->Ints(&r->shape) &&
         in->Pod(&r->root_rank) && in->Pod(&r->prescale) &&
         in->Pod(&r->postscale) && in->Ints(&r->splits) &&
         in->Pod(&r->device) && (IsValidOpType(op) || IsInternalOpType(op)) &&
         IsValidReduceOp(reduce) && IsValidDataType(dtype) &&
         (r->op = static_cast<OpType>(op),
          r->reduce_op = static_cast<ReduceOp>(reduce),
          r->dtype = static_cast<DataType>(dtype), true);
}

void Write(Writer* w, const Response& r) {
  w->Pod(static_cast<int32_t>(r.op));
  w->Str(r.name);
  w->Str(r.error);
  w->Pod(r.error_code);
  w->Pod(static_cast<int32_t>(r.reduce_op));
  w->Pod(static_cast<int32_t>(r.dtype));
  w->Ints(r.shape);
  w->Pod(r.root_rank);
  w->Pod(r.prescale);
  w->Pod(r.postscale);
  w->Pod(r.device);
  w->Ints(r.rank_dims);
}

bool Read(Reader* in, Response* r) {
  int32_t op = 0, reduce = 0, dtype = 0;
  return in->Pod(&op) && in->Str(&r->name) && in->Str(&r->error) &&
         in->Pod(&r->error_code) && in->Pod(&reduce) && in->Pod(&dtype) &&
         in->Ints(&r->shape) && in->Pod(&r->root_rank) &&
         in->Pod(&r->prescale) && in->Pod(&r->postscale) &&
         in->Pod(&r->device) && in->Ints(&r->rank_dims) &&
         (IsValidOpType(op) || IsInternalOpType(op)) &&
         IsValidReduceOp(reduce) &&
         IsValidDataType(dtype) &&
         (r->op = static_cast<OpType>(op),
          r->reduce_op = static_cast<ReduceOp>(reduce),
          r->dtype = static_cast<DataType>(dtype), true);
}

}  // namespace

bool Request::SameSignature(const Request& o) const {
  return name == o.name && op == o.op && reduce_op == o.reduce_op &&
         dtype == o.dtype && shape == o.shape && root_rank == o.root_rank &&
         prescale == o.prescale && postscale == o.postscale &&
         splits == o.splits && device == o.device;
}

std::string Serialize(const RequestList& list) {
  Writer w;
  w.Pod<uint64_t>(list.requests.size());
  for (const Request& r : list.requests) Write(&w, r);
  w.Pod<uint8_t>(list.shutdown);
  w.Str(list.shutdown_reason);
  w.Pod<uint8_t>(list.stall_check);
  w.Pod<uint64_t>(list.pending_names.size());
  for (size_t i = 0; i < list.pending_names.size(); ++i) {
    w.Str(list.pending_names[i]);
    w.Pod(list.pending_ages[i]);
  }
  w.Str(list.tuning);
  return w.Take();
}

std::string Serialize(const ResponseList& list) {
  Writer w;
  w.Pod<uint64_t>(list.responses.size());
  for (const Response& r : list.responses) Write(&w, r);
  w.Pod<uint8_t>(list.shutdown);
  w.Str(list.shutdown_reason);
  w.Str(list.tuning);
  return w.Take();
}

bool Deserialize(const std::string& bytes, RequestList* list) {
  Reader in(bytes);
  uint64_t n = 0;
  if (!in.Pod(&n)) return false;
  list->requests.resize(n);
  for (Request& r : list->requests) {
    if (!Read(&in, &r)) return false;
  }
  uint8_t shutdown = 0, stall = 0;
  if (!in.Pod(&shutdown) || !in.Str(&list->shutdown_reason) ||
      !in.Pod(&stall) || !in.Pod(&n)) {
    return false;
  }
  list->shutdown = shutdown != 0;
  list->stall_check = stall != 0;
  list->pending_names.resize(n);
  list->pending_ages.resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!in.Str(&list->pending_names[i]) || !in.Pod(&list->pending_ages[i])) {
      return false;
    }
  }
  if (!in.Str(&list->tuning)) return false;
  return in.Done();
}

bool Deserialize(const std::string& bytes, ResponseList* list) {
  Reader in(bytes);
  uint64_t n = 0;
  if (!in.Pod(&n)) return false;
  list->responses.resize(n);
  for (Response& r : list->responses) {
    if (!Read(&in, &r)) return false;
  }
  uint8_t shutdown = 0;
  if (!in.Pod(&shutdown) || !in.Str(&list->shutdown_reason) ||
      !in.Str(&list->tuning)) {
    return false;
  }
  list->shutdown = shutdown != 0;
  return in.Done();
}

}  // namespace hbcore
