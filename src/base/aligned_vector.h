// std::vector with storage aligned to 64 bytes (a cache line, and the widest SIMD vector), for
// activation buffers the kernels read with aligned vector loads: rows whose width is a multiple
// of 16 floats then start on a vector boundary and need no aligned copy.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace epserve {

template <class T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlign}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{kAlign}); }
  template <class U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace epserve
