/* Free host blocks kept for reuse by the front ends' output pools (the
 * numpy API's HostOutputPool, the TF ops' OutputPool): header-only C++,
 * on top of the C API's hb_host_malloc / hb_host_free.
 *
 * A pool hands out blocks for output arrays or tensors and takes them back
 * when the last reference is gone; the next output of the same byte size
 * reuses one instead of fresh pages (a page fault and zeroing per page).
 * This class is the pool's free list:
 *  - a block is found by its exact byte size, most recently returned
 *    first;
 *  - the free bytes never exceed the bound the caller passes with each
 *    returned block: to admit it, the least recently returned blocks are
 *    freed first (the sizes of a past phase of the program would otherwise
 *    keep the current sizes out for good); a block larger than the bound
 *    alone is freed.
 * Not synchronized: the owning pool calls it under its own lock. */
#ifndef HBCORE_FREE_BLOCKS_H_
#define HBCORE_FREE_BLOCKS_H_

#include <cstddef>
#include <iterator>
#include <list>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hbcore/c_api.h"

namespace hbcore {

class FreeBlocks {
 public:
  struct Deleter {
    void operator()(void* p) const { hb_host_free(p); }
  };
  using Block = std::unique_ptr<void, Deleter>;

  // A free block of exactly `bytes`, or null when there is none.
  Block Take(size_t bytes) {
    auto it = by_size_.find(bytes);
    if (it == by_size_.end()) return nullptr;
    List::iterator entry = it->second.back();
    Block block = std::move(entry->block);
    it->second.pop_back();
    if (it->second.empty()) by_size_.erase(it);
    list_.erase(entry);
    bytes_ -= bytes;
    return block;
  }

  // Keeps `block` (of `bytes`) for reuse within `bound` free bytes in all.
  void Put(Block block, size_t bytes, size_t bound) {
    if (bytes > bound) return;  // `block` frees it
    while (bytes_ + bytes > bound) EvictOldest();
    list_.push_back(Entry{bytes, std::move(block)});
    by_size_[bytes].push_back(std::prev(list_.end()));
    bytes_ += bytes;
  }

  // The bytes of all free blocks.
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    size_t bytes;
    Block block;
  };
  using List = std::list<Entry>;

  void EvictOldest() {
    List::iterator oldest = list_.begin();
    // The oldest block is the oldest of its size: first in that size's
    // list.
    auto same = by_size_.find(oldest->bytes);
    same->second.erase(same->second.begin());
    if (same->second.empty()) by_size_.erase(same);
    bytes_ -= oldest->bytes;
    list_.erase(oldest);  // frees the block
  }

  List list_;  // least recently returned first
  // Each size's free blocks, most recently returned last.
  std::unordered_map<size_t, std::vector<List::iterator>> by_size_;
  size_t bytes_ = 0;
};

}  // namespace hbcore

#endif  // HBCORE_FREE_BLOCKS_H_
