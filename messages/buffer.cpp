#include "messages/buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <vector>

namespace eg::messages {
namespace {

constexpr size_t huge_page = size_t{2} << 20;

struct block {
  char* data;
  size_t capacity;
};

struct cache {
  std::mutex mutex;
  std::vector<block> free;  // at most a few: a node holds a handful of messages at once
  buffer_cache_stats stats;

  ~cache() {
    for (auto& b : free)
      std::free(b.data);
  }

  /// The smallest cached block that holds `size` bytes, or new storage.
  block take(size_t size) {
    if (size >= min_cached_bytes) {
      std::lock_guard<std::mutex> lock(mutex);
      size_t best = free.size();
      for (size_t i = 0; i < free.size(); ++i)
        if (free[i].capacity >= size
            && (best == free.size() || free[i].capacity < free[best].capacity))
          best = i;
      // A block more than twice as large stays for a message of its size.
      if (best < free.size() && free[best].capacity <= 2 * size) {
        block b = free[best];
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(best));
        stats.bytes -= b.capacity;
        ++stats.reused;
        return b;
      }
      ++stats.allocated;
    }
    return allocate(size);
  }

  static block allocate(size_t size) {
    size_t capacity = (std::max<size_t>(size, 8) + 7) & ~size_t{7};
    void* p = nullptr;
    if (capacity >= 2 * huge_page) {
      // Whole huge pages, asked for as such (the machine's THP mode may be
      // "madvise"); advice only, errors are ignored.
      capacity = (capacity + huge_page - 1) & ~(huge_page - 1);
      p = std::aligned_alloc(huge_page, capacity);
      if (p)
        ::madvise(p, capacity, MADV_HUGEPAGE);
    } else {
      p = std::aligned_alloc(8, capacity);
    }
    if (!p)
      throw std::bad_alloc();
    return {static_cast<char*>(p), capacity};
  }

  void give(block b) {
    if (b.capacity >= min_cached_bytes && b.capacity <= max_cached_bytes) {
      std::lock_guard<std::mutex> lock(mutex);
      // Oldest blocks go first when the cache would grow past its bound.
      while (!free.empty() && stats.bytes + b.capacity > max_cached_bytes) {
        stats.bytes -= free.front().capacity;
        std::free(free.front().data);
        free.erase(free.begin());
      }
      free.push_back(b);
      stats.bytes += b.capacity;
      return;
    }
    std::free(b.data);
  }
};

cache& the_cache() {
  static cache* c = new cache;  // outlives every static buffer's destructor
  return *c;
}

} // namespace

buffer::buffer(size_t size) {
  if (size == 0)
    return;
  auto b = the_cache().take(size);
  data_ = b.data;
  capacity_ = b.capacity;
  size_ = size;
}

buffer::buffer(buffer&& other) noexcept
    : data_(other.data_), size_(other.size_), capacity_(other.capacity_) {
  other.data_ = nullptr;
  other.size_ = other.capacity_ = 0;
}

buffer& buffer::operator=(buffer&& other) noexcept {
  if (this != &other) {
    this->~buffer();
    data_ = other.data_;
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.data_ = nullptr;
    other.size_ = other.capacity_ = 0;
  }
  return *this;
}

buffer::~buffer() {
  if (data_)
    the_cache().give({data_, capacity_});
  data_ = nullptr;
}

buffer_cache_stats buffer_cache() {
  auto& c = the_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto s = c.stats;
  s.blocks = c.free.size();
  return s;
}

} // namespace eg::messages
