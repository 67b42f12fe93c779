#pragma once
// Small helpers the readers share: whole files, text lines, a parallel loop.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace eg::data {

/// Whether `path` is a regular file (symbolic links followed).
bool is_file(const std::string& path);
/// Whether `path` is a directory (symbolic links followed).
bool is_directory(const std::string& path);

/// The whole of `path`; throws data_error naming it.
std::vector<char> read_file(const std::string& path);

/// Lines of a text file (trailing spaces and carriage returns dropped, blank
/// lines skipped); empty where there is no such file.
std::vector<std::string> read_lines(const std::string& path);

/// Runs body(begin, end) over blocks of [0, n) on `threads` threads (0:
/// every core); the body must not throw.
void parallel_for(int64_t n, int threads,
                  const std::function<void(int64_t begin, int64_t end)>& body);

/// Asks the kernel for transparent huge pages over [p, p + n) (where it
/// gives them on request): a large buffer about to be written once then
/// takes a page fault every 2 MiB instead of every 4 KiB. A hint only.
void prefer_huge_pages(void* p, size_t n);

/// "'a', 'b', 'c' and 2 more" from up to `shown` items.
std::string name_some(const std::vector<std::string>& items, size_t shown = 5);

} // namespace eg::data
