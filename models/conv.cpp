#include "models/conv.hpp"
#include "common/error.hpp"
#include "models/variant_compat.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// The kernels need GCC's vector types (__builtin_shuffle is GCC's) and
// per-function targets on x86-64; elsewhere everything goes to torch.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EG_CONV_KERNELS 1
#else
#define EG_CONV_KERNELS 0
#endif

namespace eg::learning {

namespace {

using torch::Tensor;

constexpr int64_t kernel = 5;
constexpr int64_t taps = kernel * kernel;

// Rows layout: a vector holds V neighbouring outputs of a row; a block is
// `rows_vectors` vectors of a row for `rows_channels` channels, 12
// accumulators, each tap's input vectors loaded once for all the channels.
constexpr int rows_channels = 6;
constexpr int rows_vectors = 2;
// Channels layout (AVX-512 only): a vector holds the 16 output channels of
// a pixel; a block is `lane_pixels` pixels of a row, 10 accumulators.
// With AVX2's 16 registers they and the shared inputs spill (9 us a point
// for LeNet-5's second convolution, three times torch's).
constexpr int channels_width = 16;
constexpr int lane_pixels = 10;
// Below this share of the lanes holding wanted outputs, torch's
// convolution is left to do it: with AVX2, LeNet-5's second convolution in
// the rows layout (55 %) takes 9.5 us a point, three times torch's.
constexpr double min_lane_use = 0.75;

enum class layout { rows, channels };

/// One call: the input, the weights (as the layout wants them), the output.
struct conv_job {
  const float* x; // [n][cin][h][wd]
  const float* w; // rows: [cout rounded up][cin][25]; channels: [cout / 16][cin][25][16]
  const float* b; // [cout rounded up]
  float* out;     // [n][cout][ho][wo]
  int64_t cin, h, wd, pad, cout, ho, wo;
  layout kind;
};

#if EG_CONV_KERNELS

// Vectors of V floats, as GCC's vector types rather than a plain loop over
// a row left to the auto-vectoriser: that one kept its accumulators and
// weights on the stack, and the first convolution's loops took 1.9 us a
// point against these 1.2.
template <int V>
struct simd {
  typedef float vec __attribute__((vector_size(V * sizeof(float))));
};

/// Copies a row of n floats (n >= V) with whole vectors, the last one
/// overlapping the one before: no call to memcpy for 112 bytes.
template <int V>
__attribute__((always_inline)) inline void copy_row(float* __restrict dst,
                                                    const float* __restrict src, int64_t n) {
  using vec = typename simd<V>::vec;
  for (int64_t j = 0; j < n; j += V) {
    const int64_t at = std::min(j, n - V);
    vec v;
    std::memcpy(&v, src + at, sizeof v);
    std::memcpy(dst + at, &v, sizeof v);
  }
}

/// Rows layout, one output row: `channels` (<= rows_channels) channels from
/// w [channel][cin][25], at the columns xs[j] .. xs[j] + V - 1. `in` is the
/// padded input at this row (planes of `plane` floats, rows of wp), `out`
/// the first channel's output row (planes of out_plane floats).
template <int V>
__attribute__((always_inline)) inline void rows_block(const float* __restrict in, int64_t cin,
                                                      int64_t plane, int64_t wp,
                                                      const float* __restrict w,
                                                      const float* __restrict b,
                                                      float* __restrict out, int64_t out_plane,
                                                      int64_t channels, const int64_t* xs) {
  using vec = typename simd<V>::vec;
  constexpr int G = rows_channels, X = rows_vectors;
  vec acc[G][X];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int j = 0; j < X; ++j)
      acc[g][j] = vec{} + b[g];
  for (int64_t ci = 0; ci < cin; ++ci) {
    const float* src = in + ci * plane;
    const float* k = w + ci * taps;
    for (int ky = 0; ky < kernel; ++ky) {
#pragma GCC unroll 5
      for (int kx = 0; kx < kernel; ++kx) {
        vec v[X];
#pragma GCC unroll 4
        for (int j = 0; j < X; ++j)
          std::memcpy(&v[j], src + ky * wp + xs[j] + kx, sizeof(vec));
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
          const float weight = k[g * cin * taps + ky * kernel + kx];
#pragma GCC unroll 4
          for (int j = 0; j < X; ++j)
            acc[g][j] += weight * v[j];
        }
      }
    }
  }
  // ReLU as torch's: negatives become 0, NaN stays.
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    if (g >= channels)
      break;
#pragma GCC unroll 4
    for (int j = 0; j < X; ++j) {
      vec s = acc[g][j];
      s = s < 0.f ? vec{} : s;
      std::memcpy(out + g * out_plane + xs[j], &s, sizeof s);
    }
  }
}

/// Rows layout, one image: in is padded ([cin][hp][wp]), wo >= V. The
/// columns past a multiple of V are done by a vector ending at the row's
/// end, overlapping the one before (same values written twice).
template <int V>
__attribute__((always_inline)) inline void rows_image(const float* in, int64_t cin, int64_t hp,
                                                      int64_t wp, const float* weights,
                                                      const float* b, int64_t cout, float* out,
                                                      int64_t ho, int64_t wo) {
  const int64_t plane = ho * wo;
  const int64_t vectors = (wo + V - 1) / V;
  for (int64_t g = 0; g < cout; g += rows_channels) {
    const float* w = weights + g * cin * taps;
    const int64_t channels = std::min<int64_t>(rows_channels, cout - g);
    for (int64_t y = 0; y < ho; ++y)
      for (int64_t j = 0; j < vectors; j += rows_vectors) {
        int64_t xs[rows_vectors];
        for (int q = 0; q < rows_vectors; ++q)
          xs[q] = std::min((j + q) * V, wo - V);
        rows_block<V>(in + y * wp, cin, hp * wp, wp, w, b + g, out + g * plane + y * wo, plane,
                      channels, xs);
      }
  }
}

/// Channels layout: V channels (weights w [cin][25][V]) of lane_pixels
/// pixels of an output row, starting at `in` (the padded input there); the
/// ReLU'd sums go to tile [pixel][channel]. The tap loops unrolled, GCC
/// loads each input once for the taps that share it.
template <int V>
__attribute__((always_inline)) inline void channels_block(const float* __restrict in, int64_t cin,
                                                          int64_t plane, int64_t wp,
                                                          const float* __restrict w,
                                                          const float* __restrict b,
                                                          float* __restrict tile) {
  using vec = typename simd<V>::vec;
  constexpr int P = lane_pixels;
  vec acc[P];
  vec bias;
  std::memcpy(&bias, b, sizeof bias);
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
    acc[p] = bias;
  for (int64_t ci = 0; ci < cin; ++ci) {
    const float* src = in + ci * plane;
    for (int ky = 0; ky < kernel; ++ky) {
      const float* k = w + (ci * taps + ky * kernel) * V;
#pragma GCC unroll 5
      for (int kx = 0; kx < kernel; ++kx) {
        vec weight;
        std::memcpy(&weight, k + kx * V, sizeof weight);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
          acc[p] += src[ky * wp + p + kx] * weight;
      }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    vec s = acc[p];
    s = s < 0.f ? vec{} : s;
    std::memcpy(tile + p * V, &s, sizeof s);
  }
}

/// 16 x 16 transpose of r (a row a vector), in four rounds: round K swaps
/// the off-diagonal K x K blocks of each 2K x 2K block. Of the pair
/// (a, b) = (r[i], r[i + K]), the new r[i] keeps a's lanes without bit K
/// and takes b's lanes l - K for the others; the new r[i + K] the rest.
template <int K>
struct transpose_round {
  typedef int32_t index __attribute__((vector_size(16 * sizeof(int32_t))));
  static constexpr int32_t upper(int l) { return (l & K) ? 16 + l - K : l; }
  static constexpr int32_t lower(int l) { return (l & K) ? 16 + l : l + K; }
  template <int... L>
  static constexpr std::array<int32_t, 32> lanes(std::integer_sequence<int, L...>) {
    return {upper(L)..., lower(L)...};
  }
  static constexpr std::array<int32_t, 32> masks = lanes(std::make_integer_sequence<int, 16>{});

  template <class vec>
  __attribute__((always_inline)) static inline void apply(vec (&r)[16]) {
    index up, low;
    std::memcpy(&up, masks.data(), sizeof up);
    std::memcpy(&low, masks.data() + 16, sizeof low);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      if (!(i & K)) {
        const vec a = r[i], b = r[i + K];
        r[i] = __builtin_shuffle(a, b, up);
        r[i + K] = __builtin_shuffle(a, b, low);
      }
  }
};

/// Channels layout, one image (AVX-512: 16 channels a vector): blocks of
/// lane_pixels pixels of a row, the last block of a row ending at the
/// row's end and overlapping the one before, into pixels [pixel][16]; then
/// 16 x 16 transposes into the output planes.
template <int V>
__attribute__((always_inline)) inline void channels_image(const float* in, int64_t cin,
                                                          int64_t hp, int64_t wp,
                                                          const float* weights, const float* b,
                                                          int64_t cout, float* out, int64_t ho,
                                                          int64_t wo, float* pixels) {
  static_assert(V == 16, "the channels layout transposes 16 x 16 blocks");
  using vec = typename simd<V>::vec;
  const int64_t plane = ho * wo;
  for (int64_t g = 0; g < cout; g += V) {
    const float* w = weights + g * cin * taps;
    const int64_t channels = std::min<int64_t>(V, cout - g);
    for (int64_t y = 0; y < ho; ++y)
      for (int64_t x = 0; x < wo; x += lane_pixels) {
        const int64_t at = std::min<int64_t>(x, wo - lane_pixels);
        channels_block<V>(in + y * wp + at, cin, hp * wp, wp, w, b + g,
                          pixels + (y * wo + at) * V);
      }
    // plane >= 16: lane_use() sees to it.
    for (int64_t p = 0; p < plane; p += V) {
      const int64_t at = std::min<int64_t>(p, plane - V);
      vec r[V];
#pragma GCC unroll 16
      for (int i = 0; i < V; ++i)
        std::memcpy(&r[i], pixels + (at + i) * V, sizeof(vec));
      transpose_round<8>::apply(r);
      transpose_round<4>::apply(r);
      transpose_round<2>::apply(r);
      transpose_round<1>::apply(r);
      float* o = out + g * plane + at;
#pragma GCC unroll 16
      for (int c = 0; c < V; ++c)
        if (c < channels)
          std::memcpy(o + c * plane, &r[c], sizeof(vec));
    }
  }
}

/// Images [begin, end) of the job: padded into a scratch plane when the
/// convolution pads, then convolved in layout L. CIN and WO, when not 0,
/// are the input channels and output width known at compile time: for
/// LeNet-5's convolutions this turns the vectors' columns into constant
/// offsets from one pointer, about 0.15 us a point less for the first.
template <int V, layout L, int CIN, int WO>
__attribute__((always_inline)) inline void run_images(const conv_job& job, int64_t begin,
                                                      int64_t end) {
  const int64_t cin = CIN ? CIN : job.cin, wo = WO ? WO : job.wo;
  const int64_t hp = job.h + 2 * job.pad, wp = wo + kernel - 1;
  const int64_t in_size = cin * job.h * job.wd, out_size = job.cout * job.ho * wo;
  // The border stays zero: only the interior is written, image after image.
  std::vector<float> padded(job.pad > 0 ? static_cast<size_t>(cin * hp * wp) : 0, 0.f);
  std::vector<float> pixels(L == layout::channels ? static_cast<size_t>(job.ho * wo * V) : 0);
  for (int64_t i = begin; i < end; ++i) {
    const float* in = job.x + i * in_size;
    if (job.pad > 0) {
      for (int64_t ci = 0; ci < cin; ++ci)
        for (int64_t y = 0; y < job.h; ++y) {
          float* dst = padded.data() + (ci * hp + y + job.pad) * wp + job.pad;
          const float* src = in + (ci * job.h + y) * job.wd;
          if (job.wd >= V)
            copy_row<V>(dst, src, job.wd);
          else
            std::memcpy(dst, src, static_cast<size_t>(job.wd) * sizeof(float));
        }
      in = padded.data();
    }
    float* out = job.out + i * out_size;
    if constexpr (L == layout::rows)
      rows_image<V>(in, cin, hp, wp, job.w, job.b, job.cout, out, job.ho, wo);
    else
      channels_image<V>(in, cin, hp, wp, job.w, job.b, job.cout, out, job.ho, wo,
                        pixels.data());
  }
}

/// The job in its layout, with LeNet-5's shapes compiled in. The channels
/// layout is only chosen with AVX-512 (V = 16).
template <int V>
__attribute__((always_inline)) inline void run_job(const conv_job& job, int64_t begin,
                                                   int64_t end) {
  if (job.kind == layout::rows) {
    if (job.cin == 1 && job.wo == 28)
      run_images<V, layout::rows, 1, 28>(job, begin, end);
    else
      run_images<V, layout::rows, 0, 0>(job, begin, end);
  } else if constexpr (V == 16) {
    if (job.cin == 6 && job.wo == 10)
      run_images<V, layout::channels, 6, 10>(job, begin, end);
    else
      run_images<V, layout::channels, 0, 0>(job, begin, end);
  }
}

__attribute__((target("avx512f,fma"))) void run_avx512(const conv_job& job, int64_t begin,
                                                      int64_t end) {
  run_job<16>(job, begin, end);
}

__attribute__((target("avx2,fma"))) void run_avx2(const conv_job& job, int64_t begin,
                                                 int64_t end) {
  run_job<8>(job, begin, end);
}

/// Floats per vector of the code this processor runs, best first: 16
/// (AVX-512), 8 (AVX2 with FMA); none: torch does the convolution.
const std::vector<int>& vector_widths() {
  static const std::vector<int> widths = [] {
    __builtin_cpu_init();
    std::vector<int> w;
    if (__builtin_cpu_supports("avx512f"))
      w.push_back(16);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      w.push_back(8);
    return w;
  }();
  return widths;
}

#else

const std::vector<int>& vector_widths() {
  static const std::vector<int> none;
  return none;
}

#endif

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/// The padding of a module the kernels can do (stride 1, no dilation, one
/// group, zeros, a bias, 5 x 5, equal padding on both axes), or -1.
int64_t kernel_padding(const torch::nn::Conv2dImpl& conv) {
  const auto& o = conv.options;
  const auto* pad = compat::get_if<torch::ExpandingArray<2>>(&o.padding());
  if (!pad || (*pad)->at(0) != (*pad)->at(1) || (*pad)->at(0) < 0)
    return -1;
  const bool plain = o.stride()->at(0) == 1 && o.stride()->at(1) == 1 &&
                     o.dilation()->at(0) == 1 && o.dilation()->at(1) == 1 && o.groups() == 1 &&
                     !o.transposed() && compat::get_if<torch::enumtype::kZeros>(&o.padding_mode()) &&
                     o.kernel_size()->at(0) == kernel && o.kernel_size()->at(1) == kernel &&
                     o.bias() && conv.bias.defined();
  return plain ? (*pad)->at(0) : -1;
}

bool plain_float(const Tensor& t) {
  return t.device().is_cpu() && t.layout() == torch::kStrided &&
         t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

/// The share of a layout's lanes that hold wanted outputs; 0 where it
/// cannot do the shape.
double lane_use(layout kind, int width, int64_t cout, int64_t ho, int64_t wo) {
  const auto share = [](int64_t n, int64_t block) {
    return static_cast<double>(n) / static_cast<double>(round_up(n, block));
  };
  if (kind == layout::rows)
    return wo >= width ? share(wo, width) * share(cout, rows_channels) : 0.0;
  // The transposes take 16 pixels of a plane at a time.
  const bool fits = width == channels_width && wo >= lane_pixels && ho * wo >= channels_width;
  return fits ? share(cout, channels_width) * share(wo, lane_pixels) : 0.0;
}

} // namespace

std::vector<int> conv_vector_widths() { return vector_widths(); }

Tensor conv2d_relu(const torch::nn::Conv2d& conv, const Tensor& x) {
  const auto& widths = vector_widths();
  return conv2d_relu(conv, x, widths.empty() ? 0 : widths.front());
}

Tensor conv2d_relu(const torch::nn::Conv2d& conv, const Tensor& x, int width) {
  const auto& widths = vector_widths();
  if (width != 0 && std::find(widths.begin(), widths.end(), width) == widths.end())
    throw argument_error("conv2d_relu: this processor runs no kernels of " +
                                std::to_string(width) + " floats a vector");
  // Torch's own convolution and ReLU, for what the kernels do not take.
  const auto torch_path = [&] { return torch::relu(conv.ptr()->forward(x)); };
  const auto& m = *conv.ptr();
  const Tensor& weight = m.weight;
  const Tensor& bias = m.bias;
  const int64_t pad = kernel_padding(m);
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  const bool ours = width > 0 && pad >= 0 && !grad && x.dim() == 4 && plain_float(x) &&
                    plain_float(weight) && plain_float(bias) && x.numel() > 0 &&
                    x.size(1) == weight.size(1) && bias.numel() == weight.size(0) &&
                    x.size(2) + 2 * pad >= kernel && x.size(3) + 2 * pad >= kernel;
  if (!ours)
    return torch_path();
  const int64_t n = x.size(0), cin = x.size(1), cout = weight.size(0);
  const int64_t ho = x.size(2) + 2 * pad - kernel + 1, wo = x.size(3) + 2 * pad - kernel + 1;
  const double rows_use = lane_use(layout::rows, width, cout, ho, wo);
  const double channels_use = lane_use(layout::channels, width, cout, ho, wo);
  if (std::max(rows_use, channels_use) < min_lane_use)
    return torch_path();

#if EG_CONV_KERNELS
  const layout kind = rows_use >= channels_use ? layout::rows : layout::channels;
  // Weights and biases padded with zeros to whole blocks of channels; the
  // channels layout wants each block's weights as [cin][25][16].
  const int64_t block = kind == layout::rows ? rows_channels : channels_width;
  const int64_t padded_cout = round_up(cout, block), per_channel = cin * taps;
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  std::vector<float> w_padded, b_padded;
  if (kind == layout::channels || padded_cout != cout) {
    w_padded.assign(static_cast<size_t>(padded_cout * per_channel), 0.f);
    b_padded.assign(static_cast<size_t>(padded_cout), 0.f);
    std::copy(b, b + cout, b_padded.begin());
    if (kind == layout::rows)
      std::copy(w, w + cout * per_channel, w_padded.begin());
    else
      for (int64_t c = 0; c < cout; ++c) {
        float* dst = w_padded.data() + (c / block) * per_channel * block + c % block;
        for (int64_t t = 0; t < per_channel; ++t)
          dst[t * block] = w[c * per_channel + t];
      }
    w = w_padded.data();
    b = b_padded.data();
  }

  auto out = torch::empty({n, cout, ho, wo}, x.options());
  const conv_job job{x.data_ptr<float>(), w, b, out.data_ptr<float>(),
                     cin, x.size(2), x.size(3), pad, cout, ho, wo, kind};
  // Tasks of whole images; no threads for less than ~1M multiply-adds.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 20) / (cout * per_channel * ho * wo));
  at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    if (width == 16)
      run_avx512(job, begin, end);
    else
      run_avx2(job, begin, end);
  });
  return out;
#else
  return torch_path();
#endif
}

} // namespace eg::learning
