#include "algorithms/ps/parameter_server.hpp"
#include "common/error.hpp"
#include "models/serialize.hpp"

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace eg::learning {

namespace {

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (auto& p : params)
    out.push_back(p.detach().clone());
  return out;
}

void check_like(const char* what, const std::vector<torch::Tensor>& model,
                const std::vector<torch::Tensor>& other) {
  if (model.size() != other.size())
    throw mismatch_error(std::string(what) + ": " + std::to_string(other.size()) +
                                " tensors, the model has " + std::to_string(model.size()));
  for (size_t i = 0; i < model.size(); ++i)
    if (!model[i].sizes().equals(other[i].sizes()))
      throw mismatch_error(std::string(what) + ": tensor " + std::to_string(i) +
                                  " has another shape than the model's");
  if (auto i = first_non_finite(other))
    throw mismatch_error(std::string(what) + ": tensor " + std::to_string(*i) +
                         " holds a value that is not finite");
}

} // namespace

global_model::global_model(const std::vector<torch::Tensor>& initial, int64_t workers)
    : params_(copies(initial)), workers_(workers) {
  if (workers < 1)
    throw argument_error("parameter server: at least one worker");
}

void global_model::apply(const std::vector<torch::Tensor>& update) {
  check_like("parameter server: commit", params_, update);
  torch::NoGradGuard no_grad;
  const double share = 1.0 / static_cast<double>(workers_);
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].add_(update[i].to(params_[i].dtype()), share);
  ++version_;
}

void global_model::set_workers(int64_t workers) {
  if (workers < 1)
    throw argument_error("parameter server: at least one worker");
  workers_ = workers;
}

void global_model::restore(const std::vector<torch::Tensor>& params, uint64_t version) {
  check_like("parameter server: checkpoint", params_, params);
  params_ = copies(params);
  version_ = version;
}

void commit_base::pulled(const std::vector<torch::Tensor>& params,
                         const std::vector<torch::Tensor>& pulled) {
  check_like("worker: pulled model", params, pulled);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i)
    params[i].copy_(pulled[i]);
  base_ = copies(params);
}

std::vector<torch::Tensor> commit_base::commit(const std::vector<torch::Tensor>& params) {
  if (base_.empty())
    throw std::logic_error("worker: commit before the first pull");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> update;
  update.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    update.push_back(params[i].detach() - base_[i]);
    base_[i].copy_(params[i]);
  }
  return update;
}

void commit_base::returned(const std::vector<torch::Tensor>& update) {
  if (base_.empty())
    throw std::logic_error("worker: an update returned before the first pull");
  check_like("worker: returned update", base_, update);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < base_.size(); ++i)
    base_[i].sub_(update[i]);
}

} // namespace eg::learning
