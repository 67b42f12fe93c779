#pragma once
// Model and optimizer state as bytes (checkpoints), and the final model as a
// state dict that Python's torch.load reads.

#include "models/model.hpp"

#include <torch/optim/optimizer.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace eg::learning {

/// Names of the parameters of `m` (buffers are not gossiped), in a fixed order (the order
/// of named_parameters()).
std::vector<std::string> parameter_names(const torch::nn::Module& m);
/// The parameters of `m`, in the order of parameter_names.
std::vector<torch::Tensor> parameters(torch::nn::Module& m);
/// The index of the first of `tensors` holding a value that is not a finite
/// number (NaN, infinity: a model that ran away), or nothing. One sum in
/// double precision a tensor, without a copy: finite exactly when every
/// value is.
std::optional<size_t> first_non_finite(const std::vector<torch::Tensor>& tensors);

/// torch archive bytes of the module / optimizer.
std::string save_model(torch::nn::Module& m);
void load_model(torch::nn::Module& m, const std::string& bytes);      // throws std::runtime_error
std::string save_optimizer(torch::optim::Optimizer& o);
void load_optimizer(torch::optim::Optimizer& o, const std::string& bytes);  // throws std::runtime_error

/// Writes `m`'s state dict (name -> tensor) in the format of Python's
/// torch.save, so `torch.load(path)` returns a dict of tensors.
void write_state_dict(torch::nn::Module& m, const std::string& path);

} // namespace eg::learning
