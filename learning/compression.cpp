#include "learning/compression.hpp"

#include "messages/sparse.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace eg::learning {

flat_layout flat_layout::of(const std::vector<std::string>& names,
                            const std::vector<torch::Tensor>& params) {
  if (names.size() != params.size())
    throw std::invalid_argument("flat_layout: " + std::to_string(names.size()) + " names for " +
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
    throw std::invalid_argument("unflatten_into: a flat vector of " +
                                std::to_string(flat.numel()) + " entries for " +
                                std::to_string(at) + " parameters");
}

int64_t entries_for(int64_t numel, double density) {
  if (numel <= 0)
    return 0;
  auto k = static_cast<int64_t>(std::llround(density * static_cast<double>(numel)));
  return std::clamp<int64_t>(k, 1, numel);
}

sparse_entries top_k(const torch::Tensor& flat, const flat_layout& layout, double density) {
  if (!(density > 0 && density <= 1))
    throw std::invalid_argument("top_k: density " + std::to_string(density) +
                                " is not in (0, 1]");
  if (flat.numel() != layout.numel() || flat.scalar_type() != torch::kFloat32)
    throw std::invalid_argument("top_k: a flat vector that does not fit the layout");
  torch::NoGradGuard no_grad;
  sparse_entries e;
  const float* v = flat.data_ptr<float>();
  for (size_t l = 0; l < layout.tensors(); ++l) {
    const int64_t begin = layout.offsets[l], n = layout.offsets[l + 1] - begin;
    const int64_t k = entries_for(n, density);
    const size_t first = e.indices.size();
    if (k == n) {
      for (int64_t i = 0; i < n; ++i)
        e.indices.push_back(static_cast<uint32_t>(begin + i));
    } else {
      auto chosen = std::get<1>(flat.narrow(0, begin, n).abs().topk(k, 0, true, false));
      auto idx = chosen.to(torch::kInt64).contiguous();
      const int64_t* p = idx.data_ptr<int64_t>();
      for (int64_t i = 0; i < k; ++i)
        e.indices.push_back(static_cast<uint32_t>(begin + p[i]));
      std::sort(e.indices.begin() + static_cast<std::ptrdiff_t>(first), e.indices.end());
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

/// The value as a receiver decodes it (float16 and float8: rounded to nearest).
float as_sent(float x, messages::value_type t) {
  switch (t) {
    case messages::value_type::float16: return static_cast<float>(c10::Half(x));
    case messages::value_type::float8: return from_float8(to_float8(x));
    case messages::value_type::float32: break;
  }
  return x;
}

} // namespace

encoded_part encode(const sparse_entries& e, const flat_layout& layout,
                    messages::value_type type) {
  if (e.indices.size() != e.values.size())
    throw std::invalid_argument("encode: " + std::to_string(e.indices.size()) + " indices for " +
                                std::to_string(e.values.size()) + " values");
  encoded_part p;
  p.layout = layout.fingerprint;
  p.numel = static_cast<uint64_t>(layout.numel());
  p.count = static_cast<uint32_t>(e.indices.size());
  p.values = type;
  p.index_bytes = messages::encode_indices(e.indices.data(), e.indices.size(), p.numel, p.coding);
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
    throw std::invalid_argument("a sparse part for another model (layout fingerprint differs)");
  if (part.numel != static_cast<uint64_t>(layout.numel()))
    throw std::invalid_argument("a sparse part over " + std::to_string(part.numel) +
                                " parameters, the model has " + std::to_string(layout.numel()));
  if (part.value_bytes != static_cast<size_t>(part.count) * messages::element_size(part.values))
    throw std::invalid_argument("a sparse part of " + std::to_string(part.count) +
                                " entries carries " + std::to_string(part.value_bytes) +
                                " value bytes");
  sparse_entries e;
  e.indices.resize(part.count);
  try {
    messages::decode_indices(part.indices, part.index_bytes, part.coding, part.count, part.numel,
                             e.indices.data());
  } catch (const messages::codec_error& err) {
    throw std::invalid_argument(std::string("sparse indices: ") + err.what());
  }
  e.values.resize(part.count);
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
      throw std::invalid_argument("sparse value " + std::to_string(i) + " is not a number");
    e.values[i] = x;
  }
  return e;
}

edge_copies::edge_copies(flat_layout layout, double density, messages::value_type values)
    : layout_(std::move(layout)), density_(density), values_(values) {
  if (!(density > 0 && density <= 1))
    throw std::invalid_argument("edge copies: density " + std::to_string(density) +
                                " is not in (0, 1]");
  initial_ = torch::zeros({layout_.numel()}, torch::kFloat32);
}

void edge_copies::start(const torch::Tensor& initial) {
  if (initial.numel() != layout_.numel())
    throw std::invalid_argument("edge copies: an initial model that does not fit the layout");
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
  float* c = copy.data_ptr<float>();
  double sent = 0;
  for (size_t i = 0; i < e.indices.size(); ++i) {
    sent += static_cast<double>(e.values[i]) * e.values[i];
    e.values[i] = as_sent(e.values[i], values_);
    c[e.indices[i]] += e.values[i];
  }
  if (captured) {
    const double all = lack.pow(2).sum().item<double>();
    *captured = all > 0 ? std::min(1.0, sent / all) : 1.0;
  }
  return encode(e, layout_, values_);
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
