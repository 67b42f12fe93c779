// bench topk: the top-k selection every Sparse-Push and SCSP message makes
// (learning::top_k, a radix select per tensor) against torch::topk and a
// sort of the indices (what it replaced), on the parameters of each model
// of options::models, Fashion-MNIST's shape. Both select on the same
// vector (the model's initial parameters plus a step's worth of noise, as
// z - z^ is); the bench checks that they take the same magnitudes and
// prints microseconds per model and the ratio.

#include "bench/bench.hpp"

#include "algorithms/gossip/compression.hpp"
#include "models/model.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace eg::bench {

namespace {

/// What top_k selected before: torch::topk of the magnitudes per tensor,
/// the indices sorted.
learning::sparse_entries torch_top_k(const torch::Tensor& flat, const learning::flat_layout& l,
                                     double density) {
  learning::sparse_entries e;
  const float* v = flat.data_ptr<float>();
  for (size_t t = 0; t < l.tensors(); ++t) {
    const int64_t begin = l.offsets[t], n = l.offsets[t + 1] - begin;
    const int64_t k = learning::entries_for(n, density);
    const size_t first = e.indices.size();
    if (k == n) {
      for (int64_t i = 0; i < n; ++i)
        e.indices.push_back(static_cast<uint32_t>(begin + i));
      continue;
    }
    auto idx = std::get<1>(flat.narrow(0, begin, n).abs().topk(k, 0, true, false))
                 .to(torch::kInt64)
                 .contiguous();
    const int64_t* p = idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i)
      e.indices.push_back(static_cast<uint32_t>(begin + p[i]));
    std::sort(e.indices.begin() + static_cast<std::ptrdiff_t>(first), e.indices.end());
  }
  for (uint32_t i : e.indices)
    e.values.push_back(v[i]);
  return e;
}

/// Microseconds per call of f, over at least `seconds` of calls.
template <class F>
double microseconds(F&& f, double seconds = 0.5) {
  using clock = std::chrono::steady_clock;
  f();  // warm
  const auto start = clock::now();
  int64_t calls = 0;
  double elapsed = 0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - start).count();
  } while (elapsed < seconds);
  return elapsed * 1e6 / static_cast<double>(calls);
}

/// The sum of the magnitudes selected: equal for two selections of the k
/// largest (whatever they take among ties).
double taken(const learning::sparse_entries& e) {
  double s = 0;
  for (float x : e.values)
    s += std::fabs(static_cast<double>(x));
  return s;
}

} // namespace

int topk(const options& opt) {
  torch::NoGradGuard no_grad;
  if (opt.threads > 0)
    torch::set_num_threads(opt.threads);
  const learning::model_shape shape{data::sample_shape::image(1, 28, 28), 10};
  const double densities[] = {0.01, 0.02, 0.03, 0.1};
  std::printf("topk: the selection of a sparse message, learning::top_k against torch::topk "
              "with sorted indices (the baseline), per model of Fashion-MNIST's shape, %d "
              "thread(s)\n",
              torch::get_num_threads());
  std::printf("%-12s %10s %8s %12s %12s %8s\n", "model", "entries", "density", "torch us",
              "top_k us", "ratio");
  double worst = 0, best = 0;
  bool first = true;
  for (const auto& name : opt.models) {
    auto model = learning::make_classifier(name, 1, shape);
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    for (const auto& p : model->named_parameters()) {
      names.push_back(p.key());
      params.push_back(p.value());
    }
    const auto layout = learning::flat_layout::of(names, params);
    torch::Tensor flat;
    learning::flatten_into(params, 1.0, flat);
    torch::manual_seed(7);
    flat.add_(torch::randn_like(flat), 1e-3);
    for (double d : densities) {
      const auto a = torch_top_k(flat, layout, d), b = learning::top_k(flat, layout, d);
      if (a.indices.size() != b.indices.size() ||
          std::fabs(taken(a) - taken(b)) > 1e-6 * std::max(1.0, taken(a)))
        throw std::runtime_error("bench topk: top_k and torch::topk disagree on " + name +
                                 " at density " + std::to_string(d));
      const double before = microseconds([&] { torch_top_k(flat, layout, d); });
      const double now = microseconds([&] { learning::top_k(flat, layout, d); });
      const double ratio = before / now;
      std::printf("%-12s %10lld %8.2f %12.1f %12.1f %7.2fx\n", name.c_str(),
                  static_cast<long long>(layout.numel()), d, before, now, ratio);
      std::fflush(stdout);
      worst = first ? ratio : std::min(worst, ratio);
      best = first ? ratio : std::max(best, ratio);
      first = false;
    }
  }
  std::printf("summary: top_k %.2fx to %.2fx as fast as torch::topk with sorted indices, the "
              "same magnitudes selected\n",
              worst, best);
  return 0;
}

} // namespace eg::bench
