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

// An op type on the wire: int32, read back only if it names a known op.
void WriteOp(Writer* w, OpType op) { w->Pod(static_cast<int32_t>(op)); }

bool ReadOp(Reader* in, OpType* op) {
  int32_t v = 0;
  if (!in->Pod(&v) || !(IsValidOpType(v) || IsInternalOpType(v))) {
    return false;
  }
  *op = static_cast<OpType>(v);
  return true;
}

// The collective's parameters that Request and Response both carry, written
// once for both and in this order in both encodings: reduce op, dtype,
// shape, root rank, prescale, postscale. M is Request or Response.
template <typename M>
void WriteCollectiveFields(Writer* w, const M& m) {
  w->Pod(static_cast<int32_t>(m.reduce_op));
  w->Pod(static_cast<int32_t>(m.dtype));
  w->Ints(m.shape);
  w->Pod(m.root_rank);
  w->Pod(m.prescale);
  w->Pod(m.postscale);
}

// Reads what WriteCollectiveFields wrote; false on a short read or an enum
// value this build does not know.
template <typename M>
bool ReadCollectiveFields(Reader* in, M* m) {
  int32_t reduce = 0, dtype = 0;
  if (!in->Pod(&reduce) || !in->Pod(&dtype) || !in->Ints(&m->shape) ||
      !in->Pod(&m->root_rank) || !in->Pod(&m->prescale) ||
      !in->Pod(&m->postscale) || !IsValidReduceOp(reduce) ||
      !IsValidDataType(dtype)) {
    return false;
  }
  m->reduce_op = static_cast<ReduceOp>(reduce);
  m->dtype = static_cast<DataType>(dtype);
  return true;
}

void Write(Writer* w, const Request& r) {
  w->Pod(r.rank);
  w->Str(r.name);
  WriteOp(w, r.op);
  WriteCollectiveFields(w, r);
  w->Ints(r.splits);
  w->Pod(r.device);
}

bool Read(Reader* in, Request* r) {
  return in->Pod(&r->rank) && in->Str(&r->name) && ReadOp(in, &r->op) &&
         ReadCollectiveFields(in, r) && in->Ints(&r->splits) &&
         in->Pod(&r->device);
}

void Write(Writer* w, const Response& r) {
  WriteOp(w, r.op);
  w->Str(r.name);
  w->Str(r.error);
  w->Pod(r.error_code);
  WriteCollectiveFields(w, r);
  w->Pod(r.device);
  w->Ints(r.rank_dims);
}

bool Read(Reader* in, Response* r) {
  return ReadOp(in, &r->op) && in->Str(&r->name) && in->Str(&r->error) &&
         in->Pod(&r->error_code) && ReadCollectiveFields(in, r) &&
         in->Pod(&r->device) && in->Ints(&r->rank_dims);
}

// A list of messages (Request or Response): its length, then each one.
template <typename M>
void WriteAll(Writer* w, const std::vector<M>& messages) {
  w->Pod<uint64_t>(messages.size());
  for (const M& m : messages) Write(w, m);
}

template <typename M>
bool ReadAll(Reader* in, std::vector<M>* messages) {
  uint64_t n = 0;
  if (!in->Pod(&n)) return false;
  messages->resize(n);
  for (M& m : *messages) {
    if (!Read(in, &m)) return false;
  }
  return true;
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
  WriteAll(&w, list.requests);
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
  WriteAll(&w, list.responses);
  w.Pod<uint8_t>(list.shutdown);
  w.Str(list.shutdown_reason);
  w.Str(list.tuning);
  return w.Take();
}

bool Deserialize(const std::string& bytes, RequestList* list) {
  Reader in(bytes);
  if (!ReadAll(&in, &list->requests)) return false;
  uint64_t n = 0;
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
  if (!ReadAll(&in, &list->responses)) return false;
  uint8_t shutdown = 0;
  if (!in.Pod(&shutdown) || !in.Str(&list->shutdown_reason) ||
      !in.Str(&list->tuning)) {
    return false;
  }
  list->shutdown = shutdown != 0;
  return in.Done();
}

}  // namespace hbcore
