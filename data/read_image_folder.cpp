#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <torch/torch.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>

// root/<class>/<file>: one folder per class (named, sorted by name), images
// in PNG, JPEG, BMP, PPM/PGM (also TGA and GIF's first frame) decoded with
// stb_image on every core.
//
// Channels: the cluster's where its shape is given, else 1 where every image
// is grey and 3 otherwise (grey made RGB, alpha dropped). Size: the
// cluster's, else the most common one; images of another size are resized
// (stb_image_resize) where options.resize, else refused naming the file.
//
// Order: the classes' files in turn (the first of every class, then the
// second, ...; each class's by name), so that the first samples of a limit
// hold every class.
//
// Cache (options.cache_dir): the decoded set in one file, keyed by the file
// list with sizes and modification times and by the options that change what
// is decoded (shape, resize, on_bad_sample); the cluster's class list is
// applied after the reader (read_split) and so is not part of it. Layout, in
// this machine's byte order:
//
//   "EGIMGFC1", fingerprint u64, n c h w skipped i64, classes and warnings
//   u32 each, then each string (u32 length, bytes), labels i64[n],
//   pixels u8[n c h w], CRC-32 (zlib) of everything after the magic u32.
//
// Written to a temporary name and renamed; one that does not read back
// whole is warned of and rebuilt.

namespace eg::data {
namespace {

namespace fs = std::filesystem;

bool image_name(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || name[0] == '.')
    return false;
  std::string ext = name.substr(dot + 1);
  for (auto& c : ext)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* known : {"png", "jpg", "jpeg", "bmp", "ppm", "pgm", "pnm", "tga", "gif"})
    if (ext == known)
      return true;
  return false;
}

struct entry {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t label = 0;
};

struct listing {
  std::vector<std::string> classes;
  std::vector<entry> files;  ///< the reader's order
  std::vector<std::string> empty_classes;
  int64_t ignored = 0;  ///< files in class folders that are not images
};

/// The names of `dir`'s folders (dirs) or regular files, hidden ones left
/// out, sorted. readdir's entry types spare a stat per file (60,000 files
/// are listed in a few hundredths of a second); links and file systems
/// that give no type are stat'ed.
std::vector<std::string> sorted_entries(const std::string& dir, bool dirs) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d)
    throw data_error("'" + dir + "': cannot list: " + std::strerror(errno));
  std::vector<std::string> out;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d.get());
    if (!e) {
      if (errno != 0)
        throw data_error("'" + dir + "': cannot list: " + std::strerror(errno));
      break;
    }
    if (e->d_name[0] == '.')
      continue;
    bool is_dir = e->d_type == DT_DIR, is_file = e->d_type == DT_REG;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st {};
      const std::string p = dir + "/" + e->d_name;
      if (::stat(p.c_str(), &st) == 0) {
        is_dir = S_ISDIR(st.st_mode);
        is_file = S_ISREG(st.st_mode);
      }
    }
    if (dirs ? is_dir : is_file)
      out.emplace_back(e->d_name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

listing list(const std::string& dir, bool times) {
  if (!is_directory(dir))
    throw data_error("data directory '" + dir + "' does not exist");
  listing l;
  l.classes = sorted_entries(dir, true);
  if (l.classes.empty()) {
    auto files = sorted_entries(dir, false);
    const bool images = std::any_of(files.begin(), files.end(), image_name);
    throw data_error("'" + dir + "' holds no class folders" +
                     (images ? std::string(" (its images must be in one folder per class, "
                                           "root/<class>/<file>)")
                             : std::string()));
  }
  std::vector<std::vector<entry>> per_class(l.classes.size());
  for (size_t k = 0; k < l.classes.size(); ++k) {
    const std::string cdir = dir + "/" + l.classes[k];
    for (auto& name : sorted_entries(cdir, false)) {
      if (!image_name(name)) {
        ++l.ignored;
        continue;
      }
      entry e;
      e.path = cdir + "/" + name;
      struct stat st {};
      if (times && ::stat(e.path.c_str(), &st) == 0) {
        e.size = st.st_size;
        e.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      }
      e.label = static_cast<int64_t>(k);
      per_class[k].push_back(std::move(e));
    }
    if (per_class[k].empty())
      l.empty_classes.push_back(cdir);
  }
  size_t most = 0;
  for (auto& c : per_class)
    most = std::max(most, c.size());
  for (size_t i = 0; i < most; ++i)
    for (auto& c : per_class)
      if (i < c.size())
        l.files.push_back(std::move(c[i]));
  return l;
}

bool holds(const std::string& dir, split) {
  // A class folder with an image in it; split folders (train/, test/) hold
  // folders, not images, and so are not taken for classes.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code sec;
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || !it->is_directory(sec))
      continue;
    std::error_code cec;
    for (fs::directory_iterator f(it->path(), cec); !cec && f != end; f.increment(cec))
      if (image_name(f->path().filename().string()) && f->is_regular_file(sec))
        return true;
  }
  return false;
}

// -- the cache -------------------------------------------------------------------

constexpr char cache_magic[8] = {'E', 'G', 'I', 'M', 'G', 'F', 'C', '1'};

/// FNV-1a, 64 bits.
struct fnv {
  uint64_t h = 1469598103934665603ull;
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i)
      h = (h ^ b[i]) * 1099511628211ull;
  }
  void add(const std::string& s) {
    add_int(static_cast<int64_t>(s.size()));
    add(s.data(), s.size());
  }
  void add_int(int64_t v) { add(&v, sizeof v); }
};

/// What makes the decoded set another one.
std::string options_text(const read_options& o) {
  return std::string("shape=") + (o.shape ? o.shape->to_string() : "own") +
         " resize=" + (o.resize ? "1" : "0") + " bad=" + o.on_bad_sample;
}

uint64_t fingerprint(const listing& l, const read_options& o) {
  fnv f;
  f.add(std::string(cache_magic, sizeof cache_magic));
  f.add(options_text(o));
  for (auto& c : l.classes)
    f.add(c);
  f.add_int(static_cast<int64_t>(l.files.size()));
  for (auto& e : l.files) {
    f.add(e.path);
    f.add_int(e.size);
    f.add_int(e.mtime_ns);
    f.add_int(e.label);
  }
  return f.h;
}

std::string cache_path(const std::string& dir, const read_options& o) {
  std::error_code ec;
  auto abs = fs::weakly_canonical(fs::absolute(dir, ec), ec).string();
  if (abs.empty())
    abs = dir;
  fnv f;
  f.add(abs);
  f.add(options_text(o));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(f.h));
  return o.cache_dir + "/image-folder-" + hex + ".cache";
}

struct cache_file {
  std::unique_ptr<FILE, int (*)(FILE*)> f{nullptr, std::fclose};
  uLong crc = crc32(0L, Z_NULL, 0);
  bool write(const void* p, size_t n) {
    crc = crc32_z(crc, static_cast<const Bytef*>(p), n);
    return std::fwrite(p, 1, n, f.get()) == n;
  }
  bool read(void* p, size_t n) {
    if (std::fread(p, 1, n, f.get()) != n)
      return false;
    crc = crc32_z(crc, static_cast<const Bytef*>(p), n);
    return true;
  }
  template <class T>
  bool write_value(T v) { return write(&v, sizeof v); }
  template <class T>
  bool read_value(T& v) { return read(&v, sizeof v); }
  bool write_string(const std::string& s) {
    return write_value(static_cast<uint32_t>(s.size())) && write(s.data(), s.size());
  }
  bool read_string(std::string& s, uint32_t most) {
    uint32_t n = 0;
    if (!read_value(n) || n > most)
      return false;
    s.resize(n);
    return read(s.data(), n);
  }
};

/// The cached set, or nothing (a reason in `why` where the file is there
/// but is not a whole cache of this listing; empty where it is one of other
/// files, or there is none).
std::optional<read_result> load_cache(const std::string& path, uint64_t want, std::string& why) {
  cache_file c;
  c.f.reset(std::fopen(path.c_str(), "rb"));
  if (!c.f)
    return std::nullopt;
  struct stat st {};
  if (::fstat(::fileno(c.f.get()), &st) != 0)
    return std::nullopt;
  const auto file_size = static_cast<uint64_t>(st.st_size);
  char magic[sizeof cache_magic];
  if (std::fread(magic, 1, sizeof magic, c.f.get()) != sizeof magic ||
      std::memcmp(magic, cache_magic, sizeof magic) != 0) {
    why = "not a cache of this version";
    return std::nullopt;
  }
  uint64_t print = 0;
  int64_t n = 0, ch = 0, h = 0, w = 0, skipped = 0;
  uint32_t classes = 0, warnings = 0;
  if (!c.read_value(print) || !c.read_value(n) || !c.read_value(ch) || !c.read_value(h) ||
      !c.read_value(w) || !c.read_value(skipped) || !c.read_value(classes) ||
      !c.read_value(warnings)) {
    why = "truncated header";
    return std::nullopt;
  }
  if (print != want)
    return std::nullopt;  // made from other files: rebuilt without a word
  const uint64_t limit = file_size;
  if (n < 0 || ch < 1 || ch > 4 || h < 1 || w < 1 || h > 65536 || w > 65536 || skipped < 0 ||
      classes == 0 || classes > limit || warnings > limit ||
      static_cast<uint64_t>(n) > limit / static_cast<uint64_t>(8 + ch * h * w)) {
    why = "impossible sizes in its header";
    return std::nullopt;
  }
  read_result r;
  auto& d = r.data;
  d.classes.resize(classes);
  for (auto& s : d.classes)
    if (!c.read_string(s, 1 << 16)) {
      why = "truncated class names";
      return std::nullopt;
    }
  r.warnings.resize(warnings);
  for (auto& s : r.warnings)
    if (!c.read_string(s, 1 << 20)) {
      why = "truncated warnings";
      return std::nullopt;
    }
  const uint64_t payload = static_cast<uint64_t>(n) * 8 + static_cast<uint64_t>(n * ch * h * w);
  const auto at = static_cast<uint64_t>(std::ftell(c.f.get()));
  if (at + payload + 4 != file_size) {
    why = std::to_string(file_size) + " bytes where its header makes " +
          std::to_string(at + payload + 4);
    return std::nullopt;
  }
  d.labels = torch::empty({n}, torch::kInt64);
  d.samples = torch::empty({n, ch, h, w}, torch::kUInt8);
  prefer_huge_pages(d.samples.data_ptr(), static_cast<size_t>(d.samples.numel()));
  if (!c.read(d.labels.data_ptr<int64_t>(), static_cast<size_t>(n) * 8) ||
      !c.read(d.samples.data_ptr<uint8_t>(), static_cast<size_t>(n * ch * h * w))) {
    why = "truncated data";
    return std::nullopt;
  }
  const uLong computed = c.crc;
  uint32_t stored = 0;
  if (std::fread(&stored, 1, sizeof stored, c.f.get()) != sizeof stored || stored != computed) {
    why = "its checksum does not match";
    return std::nullopt;
  }
  if (n > 0) {
    const auto lo = d.labels.min().item<int64_t>(), hi = d.labels.max().item<int64_t>();
    if (lo < 0 || hi >= static_cast<int64_t>(classes)) {
      why = "labels out of range";
      return std::nullopt;
    }
  }
  d.shape = sample_shape::image(ch, h, w);
  d.numbered_classes = false;
  r.skipped = skipped;
  return r;
}

/// Writes the cache; a reason where it could not.
std::string save_cache(const std::string& path, uint64_t print, const read_result& r,
                       const std::vector<std::string>& warnings) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  static std::atomic<uint64_t> serial{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(serial.fetch_add(1));
  cache_file c;
  c.f.reset(std::fopen(tmp.c_str(), "wb"));
  if (!c.f)
    return std::string("cannot create '") + tmp + "': " + std::strerror(errno);
  const auto& d = r.data;
  auto samples = d.samples.contiguous();
  auto labels = d.labels.contiguous();
  bool ok = std::fwrite(cache_magic, 1, sizeof cache_magic, c.f.get()) == sizeof cache_magic &&
            c.write_value(print) && c.write_value(d.size()) && c.write_value(d.shape.channels) &&
            c.write_value(d.shape.height) && c.write_value(d.shape.width) &&
            c.write_value(r.skipped) && c.write_value(static_cast<uint32_t>(d.classes.size())) &&
            c.write_value(static_cast<uint32_t>(warnings.size()));
  for (auto& s : d.classes)
    ok = ok && c.write_string(s);
  for (auto& s : warnings)
    ok = ok && c.write_string(s);
  ok = ok && c.write(labels.data_ptr<int64_t>(), static_cast<size_t>(labels.numel()) * 8) &&
       c.write(samples.data_ptr<uint8_t>(), static_cast<size_t>(samples.numel()));
  const auto crc = static_cast<uint32_t>(c.crc);
  ok = ok && std::fwrite(&crc, 1, sizeof crc, c.f.get()) == sizeof crc;
  const int err = errno;
  ok = std::fclose(c.f.release()) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : err);
    std::remove(tmp.c_str());
    return "cannot write '" + path + "': " + reason;
  }
  return {};
}

// -- decoding --------------------------------------------------------------------

/// The most common (height, width) of `info` where `use`; among equals, the
/// largest. {0, 0} where none.
std::pair<int64_t, int64_t> most_common(const std::vector<image_info>& info,
                                        const std::vector<char>& use, int64_t* count) {
  std::map<std::pair<int64_t, int64_t>, int64_t> sizes;
  for (size_t i = 0; i < info.size(); ++i)
    if (use[i])
      ++sizes[{info[i].height, info[i].width}];
  std::pair<int64_t, int64_t> best{0, 0};
  int64_t most = 0;
  for (auto& [hw, c] : sizes)
    if (c > most || (c == most && hw.first * hw.second > best.first * best.second)) {
      most = c;
      best = hw;
    }
  if (count)
    *count = most;
  return best;
}

enum : char { ok = 0, bad = 1, other_size = 2, pending = 3 };

/// After the sizes are known: images of another size than the most common
/// one (`height` x `width`, `common` images) are resized, said once in
/// `warnings`, or refused where resizing is off; images too large to hold
/// are refused.
void check_sizes(const std::string& dir, const listing& l, const std::vector<image_info>& info,
                 const std::vector<char>& readable, int channels, int64_t height, int64_t width,
                 int64_t common, const read_options& options, std::vector<std::string>& warnings) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  auto text = [](int64_t c, int64_t h, int64_t w) { return sample_shape::image(c, h, w).to_string(); };
  int64_t first = -1, others = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& g = info[static_cast<size_t>(i)];
    if (readable[static_cast<size_t>(i)] && (g.height != height || g.width != width)) {
      ++others;
      if (first < 0)
        first = i;
    }
  }
  if (first >= 0) {
    const auto& f = info[static_cast<size_t>(first)];
    const std::string example = "'" + l.files[static_cast<size_t>(first)].path + "' is " + text(channels, f.height, f.width);
    if (!options.resize)
      throw data_error(example + ", " + std::to_string(common) + " other images of '" + dir +
                       "' are " + text(channels, height, width) +
                       " (mixed sizes; resizing is off)");
    warnings.push_back("'" + dir + "': " + std::to_string(others) +
                       " images of other sizes resized to the most common size, " +
                       text(channels, height, width) + " (" + example + ")");
  }
  if (height > 16384 || width > 16384)
    throw data_error("'" + dir + "': images of " + text(channels, height, width) +
                     " are too large to be held whole");
}

/// The images that could not be decoded (state bad): the run fails on the
/// first where data.on_bad_sample says "fail", or when none is left; else
/// the first five are named in `warnings`, and the rest counted.
std::vector<std::string> undecodable(const std::string& dir, const listing& l,
                                     const std::vector<char>& state,
                                     const std::vector<std::string>& why,
                                     const read_options& options,
                                     std::vector<std::string>& warnings) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  std::vector<std::string> skipped;
  for (int64_t i = 0; i < n; ++i)
    if (state[static_cast<size_t>(i)] == bad) {
      if (options.on_bad_sample == "fail")
        throw data_error("'" + l.files[static_cast<size_t>(i)].path + "' cannot be decoded: " + why[static_cast<size_t>(i)]);
      if (skipped.size() < 5)
        warnings.push_back("'" + l.files[static_cast<size_t>(i)].path + "' skipped: it cannot be decoded (" +
                           why[static_cast<size_t>(i)] + ")");
      skipped.push_back(l.files[static_cast<size_t>(i)].path);
    }
  if (skipped.size() > 5)
    warnings.push_back("'" + dir + "': " + std::to_string(skipped.size() - 5) +
                       " more images skipped that cannot be decoded (" +
                       std::to_string(skipped.size()) + " in all)");
  if (!skipped.empty() && static_cast<int64_t>(skipped.size()) == n)
    throw data_error("'" + dir + "': none of its " + std::to_string(n) +
                     " images can be decoded (" + name_some(skipped, 3) + ")");

  return skipped;
}

/// The samples decoded (every state but bad), moved down over the skipped
/// ones, with their labels, as the read's data set.
void assemble(read_result& r, const listing& l, const std::vector<char>& state,
              torch::Tensor samples, int channels, int64_t height, int64_t width) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  uint8_t* out = samples.data_ptr<uint8_t>();
  const int64_t per = channels * height * width;
  auto labels = torch::empty({n}, torch::kInt64);
  int64_t* lab = labels.data_ptr<int64_t>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (state[static_cast<size_t>(i)] == bad)
      continue;
    if (kept != i)
      std::memmove(out + kept * per, out + i * per, static_cast<size_t>(per));
    lab[kept++] = l.files[static_cast<size_t>(i)].label;
  }
  auto& d = r.data;
  d.samples = kept == n ? samples : samples.narrow(0, 0, kept).clone();
  d.labels = kept == n ? labels : labels.narrow(0, 0, kept).clone();
  d.shape = sample_shape::image(channels, height, width);
  d.classes = l.classes;
  d.numbered_classes = false;
}

/// Decodes the listing's files; throws data_error.
///
/// With the cluster's shape: one pass, each image decoded into its slot in
/// that shape. Without: the size and channels are guessed from the headers
/// of a few files spread over the list, and one pass decodes every image of
/// that size into its slot; the others are only measured, then decoded
/// again in a second pass once the most common size and the channels of all
/// are known (a second pass over all of them only where the guess was not
/// the most common size).
read_result decode(const std::string& dir, const listing& l, const read_options& options,
                   int threads) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  std::vector<std::string> why(static_cast<size_t>(n));
  std::vector<char> state(static_cast<size_t>(n), ok);
  std::vector<image_info> info(static_cast<size_t>(n));
  std::vector<std::string> warnings;
  auto path = [&](int64_t i) -> const std::string& { return l.files[static_cast<size_t>(i)].path; };
  auto text = [](int64_t c, int64_t h, int64_t w) { return sample_shape::image(c, h, w).to_string(); };

  const bool fixed = options.shape.has_value();
  int channels = 1;
  int64_t height = 0, width = 0;
  if (fixed) {
    const auto& s = *options.shape;
    if (s.flat)
      throw data_error("'" + dir + "' holds images, the cluster's samples are " + s.to_string());
    if (s.channels < 1 || s.channels > 4)
      throw data_error("'" + dir + "': images cannot be decoded into " +
                       std::to_string(s.channels) + " channels (the cluster's shape is " +
                       s.to_string() + ")");
    channels = static_cast<int>(s.channels);
    height = s.height;
    width = s.width;
  } else {
    const int64_t probes = std::min<int64_t>(n, 32);
    std::vector<image_info> seen(static_cast<size_t>(probes));
    std::vector<char> read_ok(static_cast<size_t>(probes), 0);
    for (int64_t k = 0; k < probes; ++k) {
      std::string ignored;
      read_ok[static_cast<size_t>(k)] =
        probe_image(path(k * n / probes), seen[static_cast<size_t>(k)], ignored);
      if (read_ok[static_cast<size_t>(k)])
        channels = std::max(channels, kept_channels(seen[static_cast<size_t>(k)].channels));
    }
    std::tie(height, width) = most_common(seen, read_ok, nullptr);
  }

  auto allocate = [&](int64_t c, int64_t h, int64_t w) {
    try {
      auto t = torch::empty({n, c, h, w}, torch::kUInt8);
      prefer_huge_pages(t.data_ptr(), static_cast<size_t>(t.numel()));
      return t;
    } catch (const c10::Error&) {
      throw data_error("'" + dir + "': cannot allocate " + std::to_string(n) + " images of " +
                       text(c, h, w));
    }
  };
  auto samples = allocate(channels, height, width);
  auto run = [&](char which, bool as_stored) {
    uint8_t* out = samples.data_ptr<uint8_t>();
    const int64_t per = channels * height * width;
    parallel_for(n, threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto k = static_cast<size_t>(i);
        if (state[k] != which)
          continue;
        const auto status =
          as_stored ? decode_image_as_stored(path(i), channels, static_cast<int>(height),
                                             static_cast<int>(width), out + i * per, info[k], why[k])
                    : decode_image_into(path(i), channels, static_cast<int>(height),
                                        static_cast<int>(width), fixed ? options.resize : true,
                                        out + i * per, info[k], why[k]);
        state[k] = status == decoded::ok           ? ok
                   : status == decoded::unreadable ? bad
                   : as_stored                     ? pending
                                                   : other_size;
      }
    });
  };
  run(ok, !fixed);

  if (fixed) {
    for (int64_t i = 0; i < n; ++i)
      if (state[static_cast<size_t>(i)] == other_size) {
        const auto& g = info[static_cast<size_t>(i)];
        throw data_error("'" + path(i) + "' is " + text(kept_channels(g.channels), g.height, g.width) +
                         ", the cluster's samples are " + text(channels, height, width) +
                         " (resizing is off)");
      }
  } else {
    // Every image's size and channels are known now.
    std::vector<char> readable(static_cast<size_t>(n));
    int all_channels = 1;
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      readable[k] = state[k] != bad;
      if (readable[k])
        all_channels = std::max(all_channels, kept_channels(info[k].channels));
    }
    int64_t common = 0;
    const auto [h, w] = most_common(info, readable, &common);
    if (h != height || w != width) {
      // The guess was not the most common size: decode all again.
      height = h;
      width = w;
      channels = all_channels;
      samples = allocate(channels, height, width);
      for (auto& s : state)
        if (s == ok)
          s = pending;
    } else if (all_channels != channels) {
      samples = convert_channels(samples, all_channels, "'" + dir + "'");
      channels = all_channels;
    }
    check_sizes(dir, l, info, readable, channels, height, width, common, options, warnings);
    run(pending, false);
  }

  read_result r;
  const auto skipped = undecodable(dir, l, state, why, options, warnings);
  assemble(r, l, state, samples, channels, height, width);
  r.skipped = static_cast<int64_t>(skipped.size());
  r.warnings = std::move(warnings);
  return r;
}

read_result read(const std::string& dir, const read_options& options) {
  return read_image_folder(dir, options, 0);
}

} // namespace

read_result read_image_folder(const std::string& dir, const read_options& options, int threads) {
  if (options.on_bad_sample != "skip" && options.on_bad_sample != "fail")
    throw data_error("on_bad_sample is '" + options.on_bad_sample + "': it is skip or fail");
  const auto l = list(dir, !options.cache_dir.empty());
  std::vector<std::string> warnings;
  if (static_cast<size_t>(l.empty_classes.size()) == l.classes.size())
    throw data_error("'" + dir + "' holds no images: its class folders " +
                     name_some(l.empty_classes) + " are empty");
  for (auto& e : l.empty_classes)
    warnings.push_back("class folder '" + e + "' holds no images (the class is kept, with none)");
  if (l.ignored > 0)
    warnings.push_back("'" + dir + "': " + std::to_string(l.ignored) +
                       " files in its class folders are not images (PNG, JPEG, BMP, PPM/PGM, "
                       "TGA, GIF) and were left out");

  std::string path;
  uint64_t print = 0;
  if (!options.cache_dir.empty()) {
    path = cache_path(dir, options);
    print = fingerprint(l, options);
    std::string why;
    if (auto hit = load_cache(path, print, why)) {
      warnings.insert(warnings.end(), hit->warnings.begin(), hit->warnings.end());
      hit->warnings = std::move(warnings);
      return std::move(*hit);
    }
    if (!why.empty())
      warnings.push_back("the image cache '" + path + "' is damaged (" + why +
                         "); the images are decoded again");
  }
  auto r = decode(dir, l, options, threads);
  if (!path.empty()) {
    auto why = save_cache(path, print, r, r.warnings);
    if (!why.empty())
      warnings.push_back("the image cache is not kept: " + why);
  }
  warnings.insert(warnings.end(), r.warnings.begin(), r.warnings.end());
  r.warnings = std::move(warnings);
  return r;
}

std::vector<std::string> image_folder_files(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : list(dir, false).files)
    out.push_back(e.path);
  return out;
}

reader image_folder_reader() { return {"image-folder", holds, read}; }

} // namespace eg::data
