// Helpers shared by libfakecudart and libfakenccl (header only; each
// library gets its own copy, none of it is exported).
//
// NoDestructor<T>: a process-lifetime global that is never destroyed. The
//   fakes' registries are such globals because stream worker threads may
//   still run (and touch the registries) while static destructors run at
//   exit; a destroyed mutex there would be undefined behaviour.
// HandleTable<T>: maps opaque C handles (cudaStream_t, cudaEvent_t,
//   ncclComm_t) to shared_ptr<T>. Handles come from a counter and are never
//   reused, so a stale handle (used after destroy) is reported as an error
//   instead of silently naming a newer object. Lookups return a shared_ptr,
//   so an object stays alive for a caller that found it even if another
//   thread removes it meanwhile.
#ifndef HBCORE_TESTS_FAKE_GPU_FAKE_HANDLES_H_
#define HBCORE_TESTS_FAKE_GPU_FAKE_HANDLES_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fakegpu {

template <typename T>
class NoDestructor {
 public:
  template <typename... Args>
  explicit NoDestructor(Args&&... args) {
    new (storage_) T(std::forward<Args>(args)...);
  }
  NoDestructor(const NoDestructor&) = delete;
  NoDestructor& operator=(const NoDestructor&) = delete;
  T* get() { return std::launder(reinterpret_cast<T*>(storage_)); }
  T* operator->() { return get(); }
  T& operator*() { return *get(); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

template <typename T>
class HandleTable {
 public:
  // `base` keeps the handle ranges of different tables apart (and away
  // from the special stream values 0, 1 and 2).
  explicit HandleTable(uintptr_t base) : next_(base) {}

  uintptr_t Add(std::shared_ptr<T> object) {
    std::lock_guard<std::mutex> lock(mu_);
    uintptr_t handle = next_;
    next_ += 16;  // aligned like a real pointer
    objects_.emplace(handle, std::move(object));
    return handle;
  }

  std::shared_ptr<T> Find(uintptr_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    return it == objects_.end() ? nullptr : it->second;
  }

  // Removes and returns the object (null when the handle is unknown).
  std::shared_ptr<T> Remove(uintptr_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

  std::vector<std::shared_ptr<T>> All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(objects_.size());
    for (auto& entry : objects_) out.push_back(entry.second);
    return out;
  }

 private:
  std::mutex mu_;
  uintptr_t next_;
  std::unordered_map<uintptr_t, std::shared_ptr<T>> objects_;
};

}  // namespace fakegpu

#endif  // HBCORE_TESTS_FAKE_GPU_FAKE_HANDLES_H_
