#pragma once
// The model zoo's builders and the TorchScript text of LibTorch's layers
// (models/zoo.cpp, which registers AlexNet, SqueezeNet and MobileNetV2). Included by models/*.cpp
// only.

#include "models/model.hpp"

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <string>

namespace eg::learning::zoo {

/// The builder of a model class constructed from the shape alone (its
/// parameters drawn from torch's generator, which make_classifier seeds),
/// for a model_registration.
template <class M>
model_builder built_as(int64_t min_side) {
  return {min_side, [](const model_shape& s, uint64_t) { return std::make_shared<M>(s); }};
}

/// A model scripted in Python (models/scripted.cpp), checked with one
/// forward pass of a batch of `shape`: throws std::invalid_argument naming
/// the file and the problem.
std::shared_ptr<classifier> scripted(const std::string& path, const model_shape& shape);

/// TorchScript expressions computing what the module at `path` (e.g.
/// "conv1", "b3.expand") computes on the expression `x`.
std::string conv(const std::string& x, const std::string& path, const torch::nn::Conv2d& m);
std::string linear(const std::string& x, const std::string& path, const torch::nn::Linear& m);
std::string group_norm(const std::string& x, const std::string& path,
                       const torch::nn::GroupNorm& m);
/// 2 x 2 max pooling with stride 2 (torch.max_pool2d; models/pooling.hpp
/// gives the same values).
std::string max_pool_2x2(const std::string& x);

} // namespace eg::learning::zoo
