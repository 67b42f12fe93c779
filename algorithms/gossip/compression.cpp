#include "algorithms/gossip/compression.hpp"
#include "common/error.hpp"

#include "messages/sparse.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

namespace eg::learning {

flat_layout flat_layout::of(const std::vector<std::string>& names,
                            const std::vector<torch::Tensor>& params) {
  if (names.size() != params.size())
    throw mismatch_error("flat_layout: " + std::to_string(names.size()) + " names for " +
                                std::to_string(params.size()) + " tensors");
  flat_layout l;
  // FNV-1a over names and shapes: stable across builds and machines.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  };
  for (size_t i = 0; i < params.size(); ++i) {
    l.offsets.push_back(l.offsets.back() + params[i].numel());
    mix(names[i].data(), names[i].size() + 1);
    for (int64_t d : params[i].sizes())
      mix(&d, sizeof d);
  }
  l.fingerprint = h;
  return l;
}

void flatten_into(const std::vector<torch::Tensor>& params, double scale, torch::Tensor& out) {
  torch::NoGradGuard no_grad;
  int64_t n = 0;
  for (auto& p : params)
    n += p.numel();
  if (!out.defined() || out.numel() != n)
    out = torch::empty({n}, torch::kFloat32);
  int64_t at = 0;
  for (auto& p : params) {
    auto slice = out.narrow(0, at, p.numel());
    slice.copy_(p.reshape({-1}));
    if (scale != 1)
      slice.mul_(scale);
    at += p.numel();
  }
}

void unflatten_into(const torch::Tensor& flat, double scale,
                    const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (auto& p : params) {
    auto slice = flat.narrow(0, at, p.numel()).view(p.sizes());
    if (scale == 1)
      p.copy_(slice);
    else
      p.copy_(slice * scale);
    at += p.numel();
  }
  if (at != flat.numel())
    throw mismatch_error("unflatten_into: a flat vector of " +
                                std::to_string(flat.numel()) + " entries for " +
                                std::to_string(at) + " parameters");
}

int64_t entries_for(int64_t numel, double density) {
  if (numel <= 0)
    return 0;
  auto k = static_cast<int64_t>(std::llround(density * static_cast<double>(numel)));
  return std::clamp<int64_t>(k, 1, numel);
}

namespace {

/// The buffers of largest_magnitudes, kept across the tensors of a model.
struct selection_scratch {
  std::vector<uint32_t> keys, count, in_bucket;
};

/// The k entries of largest magnitude of v[0, n) (0 < k < n), their indices
/// (plus `base`) appended to `out` in ascending order: a radix select on the
/// bits of |x|, which order as the magnitudes do for finite floats (a NaN's
/// are above infinity's, so a NaN is taken first, as torch's topk does).
/// Two passes over v and a selection among the entries of one bucket:
/// 2-8x as fast as torch::topk with the indices sorted on the zoo's models
/// (`edgegossip bench topk`). Ties at the k-th magnitude go to the lowest
/// indices.
void largest_magnitudes(const float* v, int64_t n, int64_t k, uint32_t base,
                        std::vector<uint32_t>& out, selection_scratch& scratch) {
  constexpr int shift = 19;  // 4096 buckets: the exponent and 4 bits of mantissa
  constexpr size_t buckets = size_t{1} << (31 - shift);
  auto& [keys, count, in_bucket] = scratch;
  count.assign(buckets, 0);
  keys.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, v + i, sizeof b);
    b &= 0x7fffffffu;
    keys[static_cast<size_t>(i)] = b;
    ++count[b >> shift];
  }
  // The bucket that holds the k-th largest: the buckets above it hold
  // `above` < k entries, and `need` more come from it.
  size_t bucket = buckets;
  int64_t above = 0;
  while (bucket-- > 0) {
    if (above + static_cast<int64_t>(count[bucket]) >= k)
      break;
    above += count[bucket];
  }
  const int64_t need = k - above;
  // The need-th largest key in that bucket (the threshold), and how many
  // entries equal to it may still go.
  in_bucket.clear();
  for (uint32_t key : keys)
    if ((key >> shift) == bucket)
      in_bucket.push_back(key);
  std::nth_element(in_bucket.begin(), in_bucket.begin() + (need - 1), in_bucket.end(),
                   std::greater<uint32_t>());
  const uint32_t threshold = in_bucket[static_cast<size_t>(need - 1)];
  int64_t ties = need;
  for (uint32_t key : in_bucket)
    if (key > threshold)
      --ties;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = keys[static_cast<size_t>(i)];
    if (key > threshold || (key == threshold && ties-- > 0))
      out.push_back(base + static_cast<uint32_t>(i));
  }
}

} // namespace

sparse_entries top_k(const torch::Tensor& flat, const flat_layout& layout, double density) {
  if (!(density > 0 && density <= 1))
    throw argument_error("top_k: density " + std::to_string(density) +
                                " is not in (0, 1]");
  if (flat.numel() != layout.numel() || flat.scalar_type() != torch::kFloat32)
    throw mismatch_error("top_k: a flat vector that does not fit the layout");
  const auto contiguous = flat.contiguous();
  sparse_entries e;
  const float* v = contiguous.data_ptr<float>();
  selection_scratch scratch;
  for (size_t l = 0; l < layout.tensors(); ++l) {
    const int64_t begin = layout.offsets[l], n = layout.offsets[l + 1] - begin;
    const int64_t k = entries_for(n, density);
    if (k == n) {
      for (int64_t i = 0; i < n; ++i)
        e.indices.push_back(static_cast<uint32_t>(begin + i));
    } else {
      largest_magnitudes(v + begin, n, k, static_cast<uint32_t>(begin), e.indices, scratch);
    }
  }
  e.values.reserve(e.indices.size());
  for (uint32_t i : e.indices)
    e.values.push_back(v[i]);
  return e;
}

messages::sparse_part encoded_part::view() const {
  messages::sparse_part p;
  p.layout = layout;
  p.numel = numel;
  p.count = count;
  p.coding = coding;
  p.values = values;
  p.indices = index_bytes.data();
  p.index_bytes = index_bytes.size();
  p.value_data = value_bytes.data();
  p.value_bytes = value_bytes.size();
  return p;
}

namespace {

/// float8 (E5M2) bits of x: binary16 (rounded to nearest), then its high
/// byte rounded to nearest even. A finite x beyond the largest float8
/// (57344) becomes the largest, so that only a non-number is refused.
uint8_t to_float8(float x) {
  const uint16_t h = c10::Half(x).x;
  const uint16_t sign = h & 0x8000u;
  if ((h & 0x7C00u) == 0x7C00u) {  // infinity or not a number in binary16
    if ((h & 0x03FFu) != 0)
      return static_cast<uint8_t>((h >> 8) | 0x02u);  // stays a NaN
    if (std::isfinite(x))
      return static_cast<uint8_t>((sign >> 8) | 0x7Bu);
    return static_cast<uint8_t>(h >> 8);
  }
  uint16_t high = h >> 8;
  const uint16_t low = h & 0xFFu;
  if (low > 0x80u || (low == 0x80u && (high & 1u)))
    ++high;  // a carry moves into the exponent, as rounding should
  if ((high & 0x7Cu) == 0x7Cu)  // rounded up to infinity
    high = static_cast<uint16_t>((sign >> 8) | 0x7Bu);
  return static_cast<uint8_t>(high);
}

float from_float8(uint8_t b) {
  return static_cast<float>(c10::Half(static_cast<uint16_t>(b << 8), c10::Half::from_bits()));
}

/// Calls f(first, last) for the entries [first, last) of each tensor of
/// `layout` that has entries, in order (the indices ascending, < numel).
template <class F>
void for_each_tensor(const std::vector<uint32_t>& indices, const flat_layout& layout, F f) {
  size_t first = 0, l = 0;
  while (first < indices.size()) {
    while (static_cast<int64_t>(indices[first]) >= layout.offsets[l + 1])
      ++l;
    size_t last = first;
    while (last < indices.size() && static_cast<int64_t>(indices[last]) < layout.offsets[l + 1])
      ++last;
    f(first, last);
    first = last;
  }
}

/// A sign part's scale for values [first, last): the mean magnitude (what
/// minimizes the squared error of sign times scale), as binary16 bits.
uint16_t sign_scale(const std::vector<float>& values, size_t first, size_t last) {
  double sum = 0;
  for (size_t i = first; i < last; ++i)
    sum += std::fabs(static_cast<double>(values[i]));
  return c10::Half(static_cast<float>(sum / static_cast<double>(last - first))).x;
}

float from_half(uint16_t bits) {
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
}

} // namespace

void round_as_sent(sparse_entries& e, const flat_layout& layout, messages::value_type type) {
  switch (type) {
    case messages::value_type::float32: return;
    case messages::value_type::float16:
      for (auto& x : e.values)
        x = static_cast<float>(c10::Half(x));
      return;
    case messages::value_type::float8:
      for (auto& x : e.values)
        x = from_float8(to_float8(x));
      return;
    case messages::value_type::sign:
      for_each_tensor(e.indices, layout, [&](size_t first, size_t last) {
        const float scale = from_half(sign_scale(e.values, first, last));
        for (size_t i = first; i < last; ++i)
          e.values[i] = std::signbit(e.values[i]) ? -scale : scale;
      });
      return;
  }
  throw argument_error("unknown value type " + std::to_string(static_cast<int>(type)));
}

encoded_part encode(const sparse_entries& e, const flat_layout& layout,
                    messages::value_type type) {
  if (e.indices.size() != e.values.size())
    throw argument_error("encode: " + std::to_string(e.indices.size()) + " indices for " +
                                std::to_string(e.values.size()) + " values");
  encoded_part p;
  p.layout = layout.fingerprint;
  p.numel = static_cast<uint64_t>(layout.numel());
  p.count = static_cast<uint32_t>(e.indices.size());
  p.values = type;
  p.index_bytes = messages::encode_indices(e.indices.data(), e.indices.size(), p.numel, p.coding);
  if (type == messages::value_type::sign) {
    std::vector<uint16_t> scales;
    for_each_tensor(e.indices, layout, [&](size_t first, size_t last) {
      scales.push_back(sign_scale(e.values, first, last));
    });
    p.value_bytes.assign(messages::sign_value_bytes(e.values.size(), scales.size()), 0);
    std::memcpy(p.value_bytes.data(), scales.data(), 2 * scales.size());
    uint8_t* bits = p.value_bytes.data() + 2 * scales.size();
    for (size_t i = 0; i < e.values.size(); ++i)
      if (std::signbit(e.values[i]))
        bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | (1u << (i % 8)));
    return p;
  }
  p.value_bytes.resize(e.values.size() * messages::element_size(type));
  if (type == messages::value_type::float16) {
    auto* out = p.value_bytes.data();
    for (size_t i = 0; i < e.values.size(); ++i) {
      const uint16_t bits = c10::Half(e.values[i]).x;
      std::memcpy(out + 2 * i, &bits, 2);
    }
  } else if (type == messages::value_type::float8) {
    for (size_t i = 0; i < e.values.size(); ++i)
      p.value_bytes[i] = to_float8(e.values[i]);
  } else if (!e.values.empty()) {
    std::memcpy(p.value_bytes.data(), e.values.data(), p.value_bytes.size());
  }
  return p;
}

sparse_entries decode(const messages::sparse_part& part, const flat_layout& layout) {
  if (part.layout != layout.fingerprint)
    throw mismatch_error("a sparse part for another model (layout fingerprint differs)");
  if (part.numel != static_cast<uint64_t>(layout.numel()))
    throw mismatch_error("a sparse part over " + std::to_string(part.numel) +
                                " parameters, the model has " + std::to_string(layout.numel()));
  const bool sign = part.values == messages::value_type::sign;
  if (!sign &&
      part.value_bytes != static_cast<size_t>(part.count) * messages::element_size(part.values))
    throw mismatch_error("a sparse part of " + std::to_string(part.count) +
                                " entries carries " + std::to_string(part.value_bytes) +
                                " value bytes");
  sparse_entries e;
  e.indices.resize(part.count);
  try {
    messages::decode_indices(part.indices, part.index_bytes, part.coding, part.count, part.numel,
                             e.indices.data());
  } catch (const messages::codec_error& err) {
    throw argument_error(std::string("sparse indices: ") + err.what());
  }
  e.values.resize(part.count);
  if (sign) {
    size_t tensors = 0;
    for_each_tensor(e.indices, layout, [&](size_t, size_t) { ++tensors; });
    if (part.value_bytes != messages::sign_value_bytes(part.count, tensors))
      throw mismatch_error("a sparse part of " + std::to_string(part.count) +
                                  " sign values in " + std::to_string(tensors) +
                                  " tensors carries " + std::to_string(part.value_bytes) +
                                  " value bytes (" +
                                  std::to_string(messages::sign_value_bytes(part.count, tensors)) +
                                  " expected)");
    const uint8_t* bits = part.value_data + 2 * tensors;
    if (part.count % 8 != 0 && (bits[part.count / 8] >> (part.count % 8)) != 0)
      throw argument_error("sparse sign values: nonzero padding bits");
    size_t t = 0;
    for_each_tensor(e.indices, layout, [&](size_t first, size_t last) {
      uint16_t h;
      std::memcpy(&h, part.value_data + 2 * t, 2);
      const float scale = from_half(h);
      if (!std::isfinite(scale) || std::signbit(scale))
        throw argument_error("sparse sign values: tensor " + std::to_string(t) +
                             "'s scale is not a finite number of at least 0 (" +
                             std::to_string(scale) + ")");
      for (size_t i = first; i < last; ++i)
        e.values[i] = (bits[i / 8] >> (i % 8)) & 1u ? -scale : scale;
      ++t;
    });
    return e;
  }
  for (size_t i = 0; i < part.count; ++i) {
    float x;
    if (part.values == messages::value_type::float16) {
      uint16_t bits;
      std::memcpy(&bits, part.value_data + 2 * i, 2);
      x = static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
    } else if (part.values == messages::value_type::float8) {
      x = from_float8(part.value_data[i]);
    } else {
      std::memcpy(&x, part.value_data + 4 * i, 4);
    }
    if (!std::isfinite(x))
      throw argument_error("sparse value " + std::to_string(i) + " is not a number");
    e.values[i] = x;
  }
  return e;
}

edge_copies::edge_copies(flat_layout layout, double density, messages::value_type values)
    : layout_(std::move(layout)), density_(density), values_(values) {
  if (!(density > 0 && density <= 1))
    throw argument_error("edge copies: density " + std::to_string(density) +
                                " is not in (0, 1]");
  initial_ = torch::zeros({layout_.numel()}, torch::kFloat32);
}

void edge_copies::start(const torch::Tensor& initial) {
  if (initial.numel() != layout_.numel())
    throw mismatch_error("edge copies: an initial model that does not fit the layout");
  initial_ = initial.reshape({-1}).to(torch::kFloat32).clone();
  out_.clear();
  in_.clear();
}

encoded_part edge_copies::send(const std::string& to, const torch::Tensor& v, bool keyframe,
                               double* captured) {
  torch::NoGradGuard no_grad;
  auto [it, fresh] = out_.try_emplace(to);
  if (fresh)
    it->second = initial_.clone();
  auto& copy = it->second;
  if (keyframe)
    copy.zero_();
  auto lack = v - copy;
  auto e = top_k(lack, layout_, keyframe ? 1.0 : density_);
  // A keyframe carries the whole model: as signs it would restart the copy
  // far from it, so it goes as float16 at least.
  const auto type = keyframe && values_ == messages::value_type::sign
                      ? messages::value_type::float16 : values_;
  const std::vector<float> exact = e.values;
  round_as_sent(e, layout_, type);
  float* c = copy.data_ptr<float>();
  // What the copy lacked, less what it still lacks: sum over the entries of
  // v^2 - (v - q)^2, where q is v as sent.
  double removed = 0;
  for (size_t i = 0; i < e.indices.size(); ++i) {
    const double x = exact[i], err = x - static_cast<double>(e.values[i]);
    removed += x * x - err * err;
    c[e.indices[i]] += e.values[i];
  }
  if (captured) {
    const double all = lack.pow(2).sum().item<double>();
    *captured = all > 0 ? std::clamp(removed / all, 0.0, 1.0) : 1.0;
  }
  return encode(e, layout_, type);
}

void edge_copies::withdraw(const std::string& to, const sparse_entries& e) {
  auto it = out_.find(to);
  if (it == out_.end())
    return;
  float* c = it->second.data_ptr<float>();
  for (size_t i = 0; i < e.indices.size(); ++i)
    c[e.indices[i]] -= e.values[i];
}

edge_copies::residuals edge_copies::residuals_after(const std::string& to,
                                                    const torch::Tensor& v) const {
  torch::NoGradGuard no_grad;
  residuals r;
  const auto d = v.reshape({-1}) - out_.at(to);
  r.left = d.pow(2).sum().item<double>();
  for (const auto& [peer, copy] : out_) {
    if (peer == to)
      continue;
    r.cross += (v.reshape({-1}) - copy).dot(d).item<double>();
    ++r.others;
  }
  return r;
}

const torch::Tensor& edge_copies::received_copy(const std::string& from) {
  auto [it, fresh] = in_.try_emplace(from);
  if (fresh)
    it->second = initial_.clone();
  return it->second;
}

const torch::Tensor& edge_copies::receive(const std::string& from, const sparse_entries& e,
                                          bool keyframe, bool fresh) {
  auto& copy = in_[from];
  if (!copy.defined() || fresh)
    copy = initial_.clone();
  if (keyframe)
    copy.zero_();
  float* c = copy.data_ptr<float>();
  for (size_t i = 0; i < e.indices.size(); ++i)
    c[e.indices[i]] += e.values[i];
  return copy;
}

} // namespace eg::learning
