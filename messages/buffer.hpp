#pragma once
// Message bytes that are neither zero-filled nor freshly mapped for every
// message. glibc hands out every block over 32 MiB as a fresh mmap, so each
// 40 or 250 MB model message paid a page fault (and the kernel's zeroing)
// for every page, on both sides, before a byte was copied (bench transport).
// A buffer's storage comes from a process-wide cache of large blocks and
// goes back to it when the buffer is destroyed, so the weights of one
// gossip exchange land in memory the previous exchange already touched.

#include <cstddef>
#include <memory>

namespace eg::messages {

class buffer {
public:
  buffer() = default;
  /// `size` bytes, 8-byte aligned (a Cap'n Proto word), contents undefined.
  explicit buffer(size_t size);
  buffer(buffer&& other) noexcept;
  buffer& operator=(buffer&& other) noexcept;
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer();

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

/// Immutable once filled; shared by the actors a message passes through in
/// one process (sender's mixer, the lane, receiver's mixer and platform).
using shared_buffer = std::shared_ptr<const buffer>;

/// The cache behind every buffer: blocks of at least `min_cached_bytes`
/// whose owners are gone, at most `max_cached_bytes` in all.
struct buffer_cache_stats {
  size_t blocks = 0;       ///< cached now
  size_t bytes = 0;        ///< cached now
  size_t reused = 0;       ///< buffers served from the cache so far
  size_t allocated = 0;    ///< buffers that needed new storage so far
};
buffer_cache_stats buffer_cache();
inline constexpr size_t min_cached_bytes = size_t{1} << 20;
inline constexpr size_t max_cached_bytes = size_t{1} << 30;

} // namespace eg::messages
