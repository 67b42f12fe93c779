#include "models/pooling.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace eg::learning {

namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The widest plane the fast path takes (a row's winners live on the stack).
constexpr int64_t max_width = 1024;

// torch's rule for a window's maximum, scanning in row-major order: a later
// value wins when it is greater or NaN. Taking the pairs of a row first and
// then the two rows gives the same winner as the scan.
inline int later_wins(float earlier, float later) {
  return static_cast<int>(later > earlier) | static_cast<int>(later != later);
}

// a if pick_b is 0, b if it is 1, by the bits: no branch, no dependent load.
inline float pick(float a, float b, int pick_b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, sizeof ua);
  std::memcpy(&ub, &b, sizeof ub);
  const uint32_t u = ua ^ ((ua ^ ub) & (0u - static_cast<uint32_t>(pick_b)));
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

/// Pools planes [begin, end) of x (planes of h x w) into out; with `index`,
/// also the winner of each window: 0, 1 (top row), 2, 3 (bottom row).
/// Branch-free: the comparisons of trained activations are unpredictable.
void pool_planes(const float* x, float* out, uint8_t* index, int64_t begin, int64_t end,
                 int64_t h, int64_t w) {
  const int64_t h2 = h / 2, w2 = w / 2;
  for (int64_t p = begin; p < end; ++p) {
    for (int64_t i = 0; i < h2; ++i) {
      const float* top = x + (p * h + 2 * i) * w;
      const float* bottom = top + w;
      float* o = out + (p * h2 + i) * w2;
      if (!index) {
        for (int64_t j = 0; j < w2; ++j) {
          const float a = top[2 * j], b = top[2 * j + 1], c = bottom[2 * j], d = bottom[2 * j + 1];
          const float mt = pick(a, b, later_wins(a, b)), mb = pick(c, d, later_wins(c, d));
          o[j] = pick(mt, mb, later_wins(mt, mb));
        }
        continue;
      }
      // The winners go through int32 lanes first: a loop that stores
      // float and uint8 at once is not vectorised.
      int32_t winners[max_width / 2];
      for (int64_t j = 0; j < w2; ++j) {
        const float a = top[2 * j], b = top[2 * j + 1], c = bottom[2 * j], d = bottom[2 * j + 1];
        const int t = later_wins(a, b);
        const int u = later_wins(c, d);
        const float mt = pick(a, b, t), mb = pick(c, d, u);
        const int lower = later_wins(mt, mb);
        o[j] = pick(mt, mb, lower);
        winners[j] = t + lower * (2 + u - t);
      }
      uint8_t* k = index + (p * h2 + i) * w2;
      for (int64_t j = 0; j < w2; ++j)
        k[j] = static_cast<uint8_t>(winners[j]);
    }
  }
}

/// The gradient of planes [begin, end): each window's gradient goes to its
/// winner, the other three get 0.
void unpool_planes(const float* grad, const uint8_t* index, float* grad_x, int64_t begin,
                   int64_t end, int64_t h, int64_t w) {
  const int64_t h2 = h / 2, w2 = w / 2;
  std::fill(grad_x + begin * h * w, grad_x + end * h * w, 0.f);
  for (int64_t p = begin; p < end; ++p) {
    const float* g = grad + p * h2 * w2;
    const uint8_t* k = index + p * h2 * w2;
    float* gx = grad_x + p * h * w;
    for (int64_t i = 0; i < h2; ++i)
      for (int64_t j = 0; j < w2; ++j) {
        const uint8_t q = k[i * w2 + j];
        gx[(2 * i + (q >> 1)) * w + 2 * j + (q & 1)] = g[i * w2 + j];
      }
  }
}

// Planes per task of at::parallel_for: a LeNet-5 plane is at most 3 KiB.
constexpr int64_t planes_per_task = 16;

Tensor pool(const Tensor& x, Tensor* index) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  auto out = torch::empty({n, c, h / 2, w / 2}, x.options());
  if (index)
    *index = torch::empty({n, c, h / 2, w / 2}, x.options().dtype(torch::kUInt8));
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  uint8_t* k = index ? index->data_ptr<uint8_t>() : nullptr;
  at::parallel_for(0, n * c, planes_per_task, [=](int64_t begin, int64_t end) {
    pool_planes(in, o, k, begin, end, h, w);
  });
  return out;
}

struct max_pool_2x2_function : torch::autograd::Function<max_pool_2x2_function> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor index;
    auto out = pool(x, &index);
    ctx->save_for_backward({index});
    ctx->saved_data["h"] = x.size(2);
    ctx->saved_data["w"] = x.size(3);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto index = ctx->get_saved_variables()[0];
    const auto grad = grads[0].contiguous();
    const int64_t h = ctx->saved_data["h"].toInt(), w = ctx->saved_data["w"].toInt();
    auto grad_x = torch::empty({grad.size(0), grad.size(1), h, w}, grad.options());
    const float* g = grad.data_ptr<float>();
    const uint8_t* k = index.data_ptr<uint8_t>();
    float* gx = grad_x.data_ptr<float>();
    at::parallel_for(0, grad.size(0) * grad.size(1), planes_per_task,
                     [=](int64_t begin, int64_t end) { unpool_planes(g, k, gx, begin, end, h, w); });
    return {grad_x};
  }
};

} // namespace

Tensor max_pool_2x2(const Tensor& x) {
  const bool fast = x.dim() == 4 && x.device().is_cpu() && x.scalar_type() == torch::kFloat32
                    && x.is_contiguous() && x.numel() > 0 && x.size(2) % 2 == 0
                    && x.size(3) % 2 == 0 && x.size(3) <= max_width;
  if (!fast)
    return torch::max_pool2d(x, 2);
  if (torch::GradMode::is_enabled() && x.requires_grad())
    return max_pool_2x2_function::apply(x);
  return pool(x, nullptr);
}

} // namespace eg::learning
