// `edgegossip bench data`: the data layer against baselines measured in the
// same run, on Fashion-MNIST's training images written out as an image
// folder of PNG files (stb_image_write):
//
//   decoding   the image-folder reader (one thread, and every core) against a
//              bare loop of stbi_load over the same files (goal >= 0.9);
//   start-up   the reader from a warm cache of those images (goal <= 2 s);
//   memory     resident memory per sample of the set loaded from the cache,
//              against its bytes (goal <= 1.2x);
//   training   LeNet-5 steps fed by dataset::batch (bytes normalised per
//              batch) against float32 tensors normalised beforehand and
//              index_select'ed (today's way; goal >= 0.95), the same batches
//              in alternating rounds, on one thread unless --threads.
//
// Decoding and training are timed by the wall clock and by CPU time (this
// thread's, or the process's where several threads work): on a machine that
// other work shares, the CPU time is the steadier figure. The load average
// is printed at the start and the end.

#include "bench/bench.hpp"

#include "actors/node/runtime.hpp"
#include "data/dataset.hpp"
#include "data/image.hpp"
#include "data/read_util.hpp"
#include "data/readers.hpp"

#include <ATen/Parallel.h>
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#include <torch/torch.h>

#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace eg::bench {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

/// CPU seconds of this thread, or of the whole process.
double cpu_seconds(bool process) {
  timespec ts{};
  ::clock_gettime(process ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Wall and CPU time of one measurement.
struct timing {
  double wall = 0;
  double cpu = 0;
};

/// Times `body` by the wall clock and by this thread's (or the process's)
/// CPU time: the CPU time is what other processes' load on the machine
/// changes least.
template <class F>
timing timed(bool process, F&& body) {
  const double c = cpu_seconds(process);
  const auto t = clock_type::now();
  body();
  return {seconds_since(t), cpu_seconds(process) - c};
}

/// The machine's load average over the last minute.
double load_average() {
  double l[1] = {0};
  return ::getloadavg(l, 1) == 1 ? l[0] : -1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// This process's resident memory (VmRSS), in bytes.
int64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stoll(line.substr(6)) * 1024;
  return -1;
}

/// `images` [N, 1, H, W] written as root/<label>/<index>.png on every core.
void write_folder(const data::dataset& d, int64_t n, const std::string& root) {
  const auto labels = d.label_vector();
  for (auto& c : d.classes)
    fs::create_directories(root + "/" + c);
  auto images = d.samples.contiguous();
  const int64_t h = d.shape.height, w = d.shape.width;
  const uint8_t* px = images.data_ptr<uint8_t>();
  std::atomic<bool> failed{false};
  data::parallel_for(n, 0, [&](int64_t b, int64_t e) {
    char name[32];
    for (int64_t i = b; i < e; ++i) {
      std::snprintf(name, sizeof name, "/%05lld.png", static_cast<long long>(i));
      const std::string path =
        root + "/" + d.classes[static_cast<size_t>(labels[static_cast<size_t>(i)])] + name;
      if (!stbi_write_png(path.c_str(), static_cast<int>(w), static_cast<int>(h), 1,
                          px + i * h * w, static_cast<int>(w)))
        failed = true;
    }
  });
  if (failed)
    throw data::data_error("bench data: cannot write the PNG files in '" + root + "'");
}

/// A bare loop of stbi_load over `files`, on this thread.
timing bare_decode(const std::vector<std::string>& files) {
  return timed(false, [&] {
    for (auto& f : files) {
      int w = 0, h = 0, c = 0;
      stbi_uc* p = stbi_load(f.c_str(), &w, &h, &c, 0);
      if (!p)
        throw data::data_error("bench data: stbi_load failed on '" + f + "'");
      stbi_image_free(p);
    }
  });
}

/// The image-folder reader, no cache, on `threads` threads (1: this thread).
timing reader_decode(const std::string& root, int threads, int64_t expected) {
  int64_t got = 0;
  auto t = timed(threads > 1, [&] {
    data::read_options o;
    got = data::read_image_folder(root, o, threads).data.size();
  });
  if (got != expected)
    throw data::data_error("bench data: the reader gave " + std::to_string(got) + " images of " +
                           std::to_string(expected));
  return t;
}

/// LeNet-5: two 5x5 convolutions (6 and 16 channels, max pooling), three
/// fully connected layers (120, 84, classes).
struct lenetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  lenetImpl(int64_t channels, int64_t side, int64_t classes) {
    conv1 = register_module("conv1",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, 6, 5).padding(2)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 16, 5)));
    const int64_t after = ((side / 2) - 4) / 2;
    fc1 = register_module("fc1", torch::nn::Linear(16 * after * after, 120));
    fc2 = register_module("fc2", torch::nn::Linear(120, 84));
    fc3 = register_module("fc3", torch::nn::Linear(84, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = x.flatten(1);
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
};
TORCH_MODULE(lenet);

struct trainer {
  lenet model;
  torch::optim::SGD sgd;
  trainer(const data::dataset& d)
      : model((torch::manual_seed(1), lenet(d.shape.channels, d.shape.height, d.num_classes()))),
        sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)) {}
  void step(const torch::Tensor& x, const torch::Tensor& y) {
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    sgd.step();
    loss.item<double>();
  }
};

struct training_figures {
  double bytes = 0;      ///< samples/s fed by dataset::batch (wall clock)
  double floats = 0;     ///< samples/s fed by index_select of float32
  double ratio = 0;      ///< bytes / floats: median of the rounds' ratios (wall clock)
  double cpu_ratio = 0;  ///< the same by the process's CPU time
};

/// The same steps (same order, same initial model) fed both ways, in
/// alternating rounds so that both see the same machine.
training_figures training(const data::dataset& d, int rounds, int steps) {
  const int64_t batch = 64;
  const auto pre = d.all();  // float32, normalised beforehand
  std::vector<int64_t> order(static_cast<size_t>(d.size()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(1);
  std::shuffle(order.begin(), order.end(), rng);
  trainer from_bytes(d), from_floats(d);
  int64_t at = 0;
  auto next = [&] {
    if (at + batch > d.size())
      at = 0;
    auto idx = torch::from_blob(order.data() + at, {batch}, torch::kInt64).clone();
    at += batch;
    return idx;
  };
  // A few steps first: allocator and thread pool warm for both.
  for (int i = 0; i < 10; ++i) {
    auto idx = next();
    from_bytes.step(d.batch(idx), d.labels.index_select(0, idx));
    from_floats.step(pre.index_select(0, idx), d.labels.index_select(0, idx));
  }
  double bytes_s = 0, floats_s = 0;
  std::vector<double> ratios, cpu_ratios;
  for (int r = 0; r < rounds; ++r) {
    const int64_t round_start = at;
    const auto b = timed(true, [&] {
      for (int i = 0; i < steps; ++i) {
        auto idx = next();
        from_bytes.step(d.batch(idx), d.labels.index_select(0, idx));
      }
    });
    at = round_start;  // the same batches
    const auto f = timed(true, [&] {
      for (int i = 0; i < steps; ++i) {
        auto idx = next();
        from_floats.step(pre.index_select(0, idx), d.labels.index_select(0, idx));
      }
    });
    bytes_s += b.wall;
    floats_s += f.wall;
    ratios.push_back(f.wall / b.wall);
    cpu_ratios.push_back(f.cpu / b.cpu);
  }
  const double samples = static_cast<double>(rounds) * steps * batch;
  return {samples / bytes_s, samples / floats_s, median(ratios), median(cpu_ratios)};
}

/// Reads the first `wanted` (at most all) Fashion-MNIST training images of
/// `data_dir` and writes them as a PNG image folder; returns how many.
int64_t write_images(const std::string& data_dir, int64_t wanted, const std::string& folder) {
  int64_t n = 0;
  {
    data::read_options o;
    auto train = data::read_split(data_dir, "idx", o).data;
    n = std::min<int64_t>(wanted, train.size());
    const auto t = clock_type::now();
    write_folder(train, n, folder);
    std::printf("wrote %lld Fashion-MNIST training images as PNG files in %.1f s (%s)\n",
                static_cast<long long>(n), seconds_since(t), folder.c_str());
  }
  return n;
}

/// The reader's decoding rate on one thread against the bare loop.
struct decode_figures {
  double ratio = 0;      ///< by the wall clock
  double cpu_ratio = 0;  ///< by CPU time
};

/// Decoding: the bare loop, the reader on one thread and on `cores`, median
/// of 5 runs each; prints them.
decode_figures decoding(const std::string& folder, int64_t n, int cores) {
  const auto files = data::image_folder_files(folder);
  std::vector<timing> bare, one, all;
  for (int r = 0; r < 5; ++r) {
    bare.push_back(bare_decode(files));
    one.push_back(reader_decode(folder, 1, n));
    all.push_back(reader_decode(folder, cores, n));
  }
  auto rate = [&](const std::vector<timing>& t, bool cpu) {
    std::vector<double> v;
    for (auto& x : t)
      v.push_back(static_cast<double>(n) / (cpu ? x.cpu : x.wall));
    return median(v);
  };
  const double decode_ratio = rate(one, false) / rate(bare, false);
  const double decode_cpu_ratio = rate(one, true) / rate(bare, true);
  std::printf("\ndecoding %lld PNG images (28x28 grey), median of 5 runs; rate by the wall clock "
              "(by CPU time)\n",
              static_cast<long long>(n));
  std::printf("  %-40s %8.0f images/s (%6.0f)\n", "bare stbi_load loop, 1 thread",
              rate(bare, false), rate(bare, true));
  std::printf("  %-40s %8.0f images/s (%6.0f)  %.2fx (%.2fx; goal >= 0.9)\n",
              "image-folder reader, 1 thread", rate(one, false), rate(one, true), decode_ratio,
              decode_cpu_ratio);
  std::printf("  %-40s %8.0f images/s (%6.0f)  %.2fx by the wall clock\n",
              ("image-folder reader, " + std::to_string(cores) + " threads").c_str(),
              rate(all, false), rate(all, true), rate(all, false) / rate(bare, false));
  return {decode_ratio, decode_cpu_ratio};
}

/// Start-up: a cold read that writes the cache, then 3 reads from it;
/// prints them and returns the median of the warm ones.
double startup(const std::string& folder, const data::read_options& cached, int64_t n) {
  double cold = 0;
  {
    const auto t = clock_type::now();
    data::read_split(folder, "image-folder", cached);
    cold = seconds_since(t);
  }
  std::vector<double> warm;
  for (int r = 0; r < 3; ++r) {
    const auto t = clock_type::now();
    auto d = data::read_split(folder, "image-folder", cached).data;
    warm.push_back(seconds_since(t));
    if (d.size() != n)
      throw data::data_error("bench data: the cache gave " + std::to_string(d.size()) +
                             " images of " + std::to_string(n));
  }
  std::printf("\nstart-up of %lld images (listing, fingerprint, load, check)\n",
              static_cast<long long>(n));
  std::printf("  %-44s %10.2f s\n", "decoded, cache written", cold);
  std::printf("  %-44s %10.2f s  (median of 3, worst %.2f; goal <= 2 s)\n", "from the warm cache",
              median(warm), *std::max_element(warm.begin(), warm.end()));
  return median(warm);
}

/// The set loaded from the cache and the memory it holds.
struct memory_figures {
  data::dataset loaded;
  double sample_bytes = 0;  ///< pixels of one sample
  double ratio = 0;         ///< resident bytes per sample / sample_bytes
};

/// Memory: resident memory before and after loading the set from the cache;
/// prints it.
memory_figures memory(const std::string& folder, const data::read_options& cached, int64_t n) {
  // The allocator keeps freed memory (tune_allocator's trim threshold): it
  // is handed back before each reading, so that what is measured is what the
  // set holds, not the listing's memory freed after the load.
  malloc_trim(0);
  const int64_t before = resident_bytes();
  auto loaded = data::read_split(folder, "image-folder", cached).data;
  const int64_t untrimmed = resident_bytes();
  malloc_trim(0);
  const int64_t after = resident_bytes();
  const double per_sample = static_cast<double>(after - before) / static_cast<double>(n);
  const double sample_bytes = static_cast<double>(loaded.shape.numel());
  const double memory_ratio = per_sample / sample_bytes;
  std::printf("\nresident memory of the set loaded from the cache (VmRSS %lld -> %lld kB; "
              "%lld kB before the freed memory of the load was handed back)\n",
              static_cast<long long>(before / 1024), static_cast<long long>(after / 1024),
              static_cast<long long>(untrimmed / 1024));
  std::printf("  %-44s %10.0f bytes (%.0f before)\n", "per sample", per_sample,
              static_cast<double>(untrimmed - before) / static_cast<double>(n));
  std::printf("  %-44s %10.0f bytes + 8 of its label\n", "its pixels", sample_bytes);
  std::printf("  %-44s %10.2fx (goal <= 1.2)\n", "ratio", memory_ratio);
  return {std::move(loaded), sample_bytes, memory_ratio};
}

/// Training throughput from bytes against float32 on `loaded`; prints it.
training_figures training_throughput(const options& opt, data::dataset& loaded,
                                     double sample_bytes, int64_t n) {
  // One thread unless --threads says otherwise: a platform trains on its own
  // thread, and two threads of one small model on a shared machine measure
  // the scheduler more than the input pipeline.
  const int train_threads = opt.threads > 0 ? opt.threads : 1;
  at::set_num_threads(train_threads);
  loaded.norm = loaded.local_moments().finish();
  const int rounds = 5, steps = 100;
  const auto tr = training(loaded, rounds, steps);
  std::printf("\nLeNet-5 training, batch 64, %d rounds of %d steps each way, %d thread(s)\n",
              rounds, steps, train_threads);
  std::printf("  %-44s %10.0f samples/s\n", "float32 normalised beforehand, index_select",
              tr.floats);
  std::printf("  %-44s %10.0f samples/s  %.2fx (%.2fx by CPU time; median of the rounds; "
              "goal >= 0.95)\n",
              "bytes, dataset::batch", tr.bytes, tr.ratio, tr.cpu_ratio);
  std::printf("  %-44s %10.0f MB against %.0f MB of float32\n", "held", sample_bytes * n / 1e6,
              sample_bytes * 4 * n / 1e6);
  return tr;
}

} // namespace

int data(const options& opt) {
  actors::tune_allocator();  // the same allocator settings as the nodes
  const int cores = opt.threads > 0 ? opt.threads
                                    : static_cast<int>(std::thread::hardware_concurrency());
  const int64_t wanted = opt.samples > 0 ? opt.samples : 60000;
  std::printf("data: the data layer against baselines in the same run (%d cores; load average "
              "%.1f at the start)\n",
              cores, load_average());

  const fs::path root = fs::temp_directory_path() /
                        ("edgegossip-bench-data-" + std::to_string(::getpid()));
  struct cleanup {
    fs::path p;
    ~cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove_at_end{root};
  const std::string folder = (root / "images").string();
  const std::string cache = (root / "cache").string();

  const int64_t n = write_images(opt.data_dir, wanted, folder);

  // -- decoding ----------------------------------------------------------------------
  const auto dec = decoding(folder, n, cores);

  // -- start-up from a warm cache -----------------------------------------------------------
  data::read_options cached;
  cached.cache_dir = cache;
  const double warm = startup(folder, cached, n);

  // -- memory ------------------------------------------------------------------------------
  auto mem = memory(folder, cached, n);

  // -- training throughput -------------------------------------------------------------------
  const auto tr = training_throughput(opt, mem.loaded, mem.sample_bytes, n);

  std::printf("summary: data: decoding %.2fx a bare stbi_load loop (%.2fx by CPU time; goal >= "
              "0.9), warm-cache start %.2f s for %lld images (goal <= 2 s), resident %.2fx the "
              "sample bytes (goal <= 1.2), training from bytes %.2fx float32 (%.2fx by CPU time; "
              "goal >= 0.95); load average %.1f at the end\n",
              dec.ratio, dec.cpu_ratio, warm, static_cast<long long>(n),
              mem.ratio, tr.ratio, tr.cpu_ratio, load_average());
  std::fflush(stdout);
  return 0;
}

} // namespace eg::bench
