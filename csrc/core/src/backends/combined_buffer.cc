#include "backends/combined_buffer.h"

#include <cstddef>
#include <cstring>

#include "backends/reduce_kernels.h"

namespace hbcore {
namespace {

struct Header {
  // Set by CombineBuffers when the two buffers' layouts differ, and kept
  // by every later combination, so the result tells every rank (an MPI
  // operation cannot return an error).
  uint64_t broken;
  uint64_t words;
  uint64_t payload_bytes;
  uint64_t segments;
};

struct Segment {
  int64_t dtype;
  int64_t offset;
  int64_t count;
};

size_t WordsOffset(const Header& h) {
  return sizeof(Header) + h.segments * sizeof(Segment);
}

size_t PayloadOffset(const Header& h) {
  return WordsOffset(h) + h.words * sizeof(uint64_t);
}

}  // namespace

std::vector<uint8_t> PackCombined(const std::vector<uint64_t>& words,
                                  const std::vector<uint8_t>& payload,
                                  const std::vector<PayloadSegment>& segments) {
  Header h{0, words.size(), payload.size(), segments.size()};
  std::vector<uint8_t> buffer(PayloadOffset(h) + payload.size());
  std::memcpy(buffer.data(), &h, sizeof(h));
  Segment* out = reinterpret_cast<Segment*>(buffer.data() + sizeof(Header));
  for (size_t i = 0; i < segments.size(); ++i) {
    out[i] = Segment{static_cast<int64_t>(segments[i].dtype),
                     segments[i].offset, segments[i].count};
  }
  std::memcpy(buffer.data() + WordsOffset(h), words.data(),
              words.size() * sizeof(uint64_t));
  if (!payload.empty()) {
    std::memcpy(buffer.data() + PayloadOffset(h), payload.data(),
                payload.size());
  }
  return buffer;
}

size_t CombinedSize(const uint8_t* buffer) {
  Header h;
  std::memcpy(&h, buffer, sizeof(h));
  return PayloadOffset(h) + h.payload_bytes;
}

bool CombineBuffers(const uint8_t* in, uint8_t* inout) {
  Header h;
  std::memcpy(&h, inout, sizeof(h));
  const size_t layout_bytes = WordsOffset(h);
  const size_t layout_begin = offsetof(Header, words);
  if (CombinedBroken(in) || h.broken != 0 ||
      std::memcmp(in + layout_begin, inout + layout_begin,
                  layout_bytes - layout_begin) != 0) {
    const uint64_t broken = 1;
    std::memcpy(inout + offsetof(Header, broken), &broken, sizeof(broken));
    return false;
  }
  const uint64_t* a = reinterpret_cast<const uint64_t*>(in + layout_bytes);
  uint64_t* b = reinterpret_cast<uint64_t*>(inout + layout_bytes);
  for (uint64_t i = 0; i < h.words; ++i) b[i] &= a[i];
  const Segment* segments =
      reinterpret_cast<const Segment*>(inout + sizeof(Header));
  const uint8_t* pa = in + PayloadOffset(h);
  uint8_t* pb = inout + PayloadOffset(h);
  for (uint64_t i = 0; i < h.segments; ++i) {
    const Segment& s = segments[i];
    const DataType dtype = static_cast<DataType>(s.dtype);
    if (!Reduce(pb + s.offset, pb + s.offset, pa + s.offset, s.count, dtype,
                ReduceOp::kSum)) {
      return false;
    }
  }
  return true;
}

bool CombinedBroken(const uint8_t* buffer) {
  Header h;
  std::memcpy(&h, buffer, sizeof(h));
  return h.broken != 0;
}

void UnpackCombined(const uint8_t* buffer, std::vector<uint64_t>* words,
                    std::vector<uint8_t>* payload) {
  Header h;
  std::memcpy(&h, buffer, sizeof(h));
  words->resize(h.words);
  std::memcpy(words->data(), buffer + WordsOffset(h),
              h.words * sizeof(uint64_t));
  payload->resize(h.payload_bytes);
  if (h.payload_bytes > 0) {
    std::memcpy(payload->data(), buffer + PayloadOffset(h), h.payload_bytes);
  }
}

}  // namespace hbcore
