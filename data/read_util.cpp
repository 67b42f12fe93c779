#include "data/read_util.hpp"

#include "data/dataset.hpp"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

namespace eg::data {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<char> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f)
    throw data_error("'" + path + "': cannot open: " + std::strerror(errno));
  std::vector<char> out;
  struct stat st {};
  if (::fstat(::fileno(f.get()), &st) == 0 && st.st_size > 0)
    out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, f.get())) > 0;)
    out.insert(out.end(), buf, buf + got);
  if (std::ferror(f.get()))
    throw data_error("'" + path + "': read error: " + std::strerror(errno));
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> out;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f)
    return out;
  std::string line;
  auto flush = [&] {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
      line.pop_back();
    if (!line.empty())
      out.push_back(line);
    line.clear();
  };
  for (int c; (c = std::fgetc(f.get())) != EOF;) {
    if (c == '\n')
      flush();
    else
      line.push_back(static_cast<char>(c));
  }
  flush();
  return out;
}

void parallel_for(int64_t n, int threads,
                  const std::function<void(int64_t begin, int64_t end)>& body) {
  if (n <= 0)
    return;
  if (threads <= 0)
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Blocks small enough to even out files of unequal cost.
  const int64_t block = std::max<int64_t>(1, std::min<int64_t>(256, n / (8 * threads)));
  threads = static_cast<int>(std::min<int64_t>(threads, (n + block - 1) / block));
  if (threads <= 1) {
    body(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t b; (b = next.fetch_add(block)) < n;)
      body(b, std::min(n, b + block));
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (auto& t : pool)
    t.join();
}

void prefer_huge_pages(void* p, size_t n) {
  constexpr uintptr_t page = 4096;
  if (n < (size_t{4} << 20))
    return;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (end > begin)
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

std::string name_some(const std::vector<std::string>& items, size_t shown) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i)
    out += (i == 0 ? "'" : ", '") + items[i] + "'";
  if (items.size() > shown)
    out += " and " + std::to_string(items.size() - shown) + " more";
  return out;
}

} // namespace eg::data
