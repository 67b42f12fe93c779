#include "train/trainer.hpp"
#include "common/error.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <stdexcept>

namespace eg::learning {

int64_t epoch_plan::samples() const {
  int64_t n = 0;
  for (const auto& b : batches)
    n += static_cast<int64_t>(b.size());
  return n;
}

epoch_plan shuffled_plan(const std::vector<int64_t>& shard, int64_t batch, double ratio,
                         std::mt19937_64& rng) {
  if (batch <= 0)
    throw argument_error("shuffled_plan: batch size must be positive");
  if (!(ratio > 0 && ratio <= 1))
    throw argument_error("shuffled_plan: ratio " + std::to_string(ratio) +
                                " is not in (0, 1]");
  std::vector<int64_t> order(shard);
  std::shuffle(order.begin(), order.end(), rng);
  // The tolerance keeps products like 10 * 0.3 = 3.0000000000000004 at 3.
  auto keep = static_cast<size_t>(std::ceil(static_cast<double>(order.size()) * ratio - 1e-9));
  if (!order.empty())
    keep = std::clamp<size_t>(keep, 1, order.size());
  epoch_plan plan;
  for (size_t begin = 0; begin < keep; begin += static_cast<size_t>(batch)) {
    size_t end = std::min(keep, begin + static_cast<size_t>(batch));
    plan.batches.emplace_back(order.begin() + begin, order.begin() + end);
  }
  return plan;
}

namespace {

template <typename T>
T required(T p, const char* what) {
  if (!p)
    throw argument_error(std::string("local_trainer: no ") + what);
  return p;
}

/// Whether the parameters can live in one flat buffer: all float32.
bool flattenable(const std::vector<torch::Tensor>& params) {
  if (params.empty())
    return false;
  for (const auto& p : params)
    if (!p.defined() || p.scalar_type() != torch::kFloat32)
      return false;
  return true;
}

/// One buffer of `options` holding `params` end to end; each parameter
/// becomes a view of it (the same tensor: modules, optimizers and gossip
/// keep their handles), its values copied in when `copy_values`.
torch::Tensor flatten_into(const std::vector<torch::Tensor>& params,
                           const torch::TensorOptions& options, bool copy_values) {
  int64_t total = 0;
  for (const auto& p : params)
    total += p.numel();
  auto flat = torch::empty({total}, options);
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (const auto& p : params) {
    auto view = flat.narrow(0, at, p.numel()).view(p.sizes());
    if (copy_values)
      view.copy_(p.detach());
    p.set_data(view);
    at += p.numel();
  }
  return flat;
}

/// The model that steps on `device`: `model` itself on the CPU, else a
/// model of the same name moved there (its weights are copied in before
/// each step).
std::shared_ptr<classifier> replica_on(const std::shared_ptr<classifier>& model,
                                       torch::Device device) {
  if (device.is_cpu())
    return model;
  auto replica = make_classifier(model->model_name(), 0, model->shape());
  replica->to(device);
  return replica;
}

} // namespace

torch::Device training_device(const std::string& name) {
  std::optional<torch::Device> device;
  try {
    device.emplace(name);
  } catch (const c10::Error&) {
  }
  if (!device || !(device->is_cpu() || device->is_cuda()) || (device->is_cpu() && name != "cpu"))
    throw argument_error("device '" + name + "' is not cpu, cuda or cuda:N");
  if (device->is_cpu())
    return *device;
  if (!at::hasCUDA())
    throw argument_error("device '" + name + "': this edgegossip was built without CUDA "
                                "(its LibTorch has no CUDA support; build against a CUDA "
                                "LibTorch with -DEDGEGOSSIP_CUDA=ON, see docs/MODELS.md)");
  if (!torch::cuda::is_available())
    throw argument_error("device '" + name + "': no CUDA device is visible");
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  if (device->has_index() && device->index() >= count)
    throw argument_error("device '" + name + "': there are only " + std::to_string(count) +
                                " CUDA devices");
  return *device;
}

local_trainer::local_trainer(std::shared_ptr<classifier> model,
                             std::shared_ptr<const dataset> train, std::vector<int64_t> shard,
                             sgd_options opt, torch::Device device)
    : model_(required(std::move(model), "model")),
      train_(required(std::move(train), "training set")),
      shard_(std::move(shard)),
      opt_(opt),
      device_(device),
      replica_(replica_on(model_, device)),
      optimizer_(replica_->parameters(),
                 torch::optim::SGDOptions(opt.lr).momentum(opt.momentum)),
      params_(model_->parameters()) {
  const int64_t n = train_->size();
  for (int64_t i : shard_)
    if (i < 0 || i >= n)
      throw argument_error("local_trainer: sample " + std::to_string(i) +
                                  " is not in the training set of " + std::to_string(n));
  if (replica_ != model_) {
    replica_params_ = replica_->parameters();
    if (replica_params_.size() != params_.size())
      throw std::logic_error("local_trainer: the replica of '" + model_->model_name() +
                             "' has other parameters than the model");
    if (flattenable(params_) && flattenable(replica_params_)) {
      // The replica's values come from the model before every step.
      device_flat_ = flatten_into(replica_params_, replica_params_.front().options(), false);
      gather_host();
    }
    copy_training_set();
    device_labels_ = train_->labels.to(device_);
    host_labels_ = train_->labels.contiguous();
  }
  norm_ = train_->norm_tensors(device_);
  model_->train();
  replica_->train();
}

void local_trainer::copy_training_set() {
  // The training set on the device, once.
  // Converted and normalised there once when that copy is small
  // (Fashion-MNIST's 60,000 images as floats: 188 MB): a step then only
  // selects its batch. A larger set stays as stored (bytes for images) and
  // each step converts its own batch.
  device_samples_ = train_->samples.to(device_);
  device_samples_converted_ = false;
  constexpr int64_t whole_float_set_limit = int64_t(2) << 30;  // bytes
  if (device_samples_.numel() * static_cast<int64_t>(sizeof(float)) <= whole_float_set_limit) {
    device_samples_ = train_->input(device_samples_, train_->norm_tensors(device_));
    device_samples_converted_ = true;
  }
}

void local_trainer::set_normalisation(const data::normalisation& norm) {
  if (norm == train_->norm)
    return;
  try {
    train_ = data::with_normalisation(train_, norm);
  } catch (const data::data_error& e) {
    throw argument_error(std::string("set_normalisation: ") + e.what());
  }
  norm_ = train_->norm_tensors(device_);
  if (!replica_params_.empty())
    copy_training_set();
}

bool local_trainer::gather_host() {
  if (host_flat_.defined()) {
    bool moved = false;
    for (size_t i = 0; i < params_.size() && !moved; ++i)
      moved = params_[i].data_ptr() != host_at_[i];
    if (!moved)
      return false;
  }
  // A fresh buffer: whoever holds the old one (a message in flight) keeps
  // what it holds.
  host_flat_ = flatten_into(params_, params_.front().options().pinned_memory(true), true);
  host_at_.clear();
  for (const auto& p : params_)
    host_at_.push_back(p.data_ptr());
  return true;
}

bool local_trainer::host_written() const {
  if (host_version_.size() != params_.size())
    return true;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i]._version() != host_version_[i])
      return true;
  return false;
}

void local_trainer::record_host_version() {
  host_version_.clear();
  for (const auto& p : params_)
    host_version_.push_back(p._version());
}

void local_trainer::to_host() {
  if (!device_ahead_)
    return;
  torch::NoGradGuard no_grad;
  // Into parameters no message holds any more (a message in flight keeps
  // what it was sent with).
  loans_.before_write(params_);
  if (host_flat_.defined()) {
    gather_host();
    host_flat_.copy_(device_flat_);
  } else {
    for (size_t i = 0; i < params_.size(); ++i)
      params_[i].copy_(replica_params_[i]);
  }
  device_ahead_ = false;
  record_host_version();
}

double scheduled_lr(double lr, const std::string& schedule, uint32_t epoch, uint32_t epochs) {
  if (epochs == 0)
    throw argument_error("scheduled_lr: a run of no epochs");
  if (schedule == "constant")
    return lr;
  if (schedule == "cosine") {
    const double at = static_cast<double>(std::min(epoch, epochs - 1)) / epochs;
    return lr * 0.5 * (1 + std::cos(M_PI * at));
  }
  throw argument_error("unknown learning-rate schedule '" + schedule +
                              "' (known: constant, cosine)");
}

double warmup_factor(double warmup, double progress) {
  if (!(warmup >= 0) || !(progress >= 0))
    throw argument_error("warmup_factor: the warm-up and the progress must not be negative");
  if (warmup == 0 || progress >= warmup)
    return 1;
  return progress / warmup;
}

void local_trainer::set_lr(double lr) {
  if (!(lr > 0))
    throw argument_error("set_lr: the learning rate must be positive");
  opt_.lr = lr;
  for (auto& group : optimizer_.param_groups())
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

void local_trainer::begin_epoch(epoch_plan plan) {
  plan_ = std::move(plan);
  next_ = 0;
  class_samples_.assign(static_cast<size_t>(train_->num_classes()), 0);
  if (!replica_params_.empty()) {
    // The whole epoch's indices to the device at once: a step then selects
    // its batch there.
    std::vector<int64_t> all;
    all.reserve(static_cast<size_t>(plan_.samples()));
    batch_start_.clear();
    for (const auto& b : plan_.batches) {
      batch_start_.push_back(static_cast<int64_t>(all.size()));
      all.insert(all.end(), b.begin(), b.end());
    }
    const int64_t n = train_->size();
    for (int64_t i : all)
      if (i < 0 || i >= n)
        throw argument_error("local_trainer: sample " + std::to_string(i) +
                                    " is not in the training set of " + std::to_string(n));
    device_plan_ = torch::from_blob(all.data(), {static_cast<int64_t>(all.size())}, torch::kInt64)
                     .to(device_);
  }
}

bool local_trainer::epoch_done() const { return next_ >= plan_.batches.size(); }

size_t local_trainer::remaining() const {
  return epoch_done() ? 0 : plan_.batches.size() - next_;
}

step_result local_trainer::step() {
  if (epoch_done())
    throw std::logic_error("local_trainer::step: the epoch's plan is used up");
  if (!replica_params_.empty())
    return device_step();
  auto& batch = plan_.batches[next_++];
  const auto start = std::chrono::steady_clock::now();

  auto index = torch::from_blob(batch.data(), {static_cast<int64_t>(batch.size())}, torch::kInt64);
  // The samples as bytes (images) or features, normalised for this batch.
  auto x = train_->input(train_->samples.index_select(0, index), norm_);
  if (opt_.augment && train_->images())
    x = data::augment(x, opt_.augment_seed * 0x9e3779b97f4a7c15ull + steps_);
  ++steps_;
  auto y = train_->labels.index_select(0, index);
  {
    const auto* label = y.data_ptr<int64_t>();
    const auto classes = static_cast<int64_t>(class_samples_.size());
    for (int64_t k = 0; k < y.numel(); ++k)
      if (label[k] >= 0 && label[k] < classes)
        ++class_samples_[static_cast<size_t>(label[k])];
  }

  optimizer_.zero_grad();
  auto loss = torch::nn::functional::cross_entropy(replica_->forward(x), y);
  loss.backward();
  loans_.before_write(params_);
  optimizer_.step();

  step_result r;
  r.loss = loss.item<double>();
  r.samples = static_cast<int64_t>(batch.size());
  r.compute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

step_result local_trainer::device_step() {
  const size_t k = next_++;
  const auto& batch = plan_.batches[k];
  const auto start = std::chrono::steady_clock::now();
  {
    const auto* label = host_labels_.data_ptr<int64_t>();
    const auto classes = static_cast<int64_t>(class_samples_.size());
    for (int64_t i : batch)
      if (label[i] >= 0 && label[i] < classes)
        ++class_samples_[static_cast<size_t>(label[i])];
  }
  if (device_ahead_) {
    // The device holds the newest weights; the CPU's must not have been
    // written since (to_host() first), or that write would be lost.
    if (host_written())
      throw std::logic_error("local_trainer: the parameters on the CPU were written while the "
                             "replica on " + device_.str() + " was ahead (to_host() first)");
  } else {
    // The weights to the device when anything wrote them since the last
    // copy (a merge, a checkpoint loaded): one copy, queued before the
    // step's work. Otherwise the device holds them already.
    torch::NoGradGuard no_grad;
    if (host_flat_.defined()) {
      const bool regathered = gather_host();
      if (regathered || host_written())
        device_flat_.copy_(host_flat_, /*non_blocking=*/true);
    } else if (host_written()) {
      for (size_t i = 0; i < params_.size(); ++i)
        replica_params_[i].copy_(params_[i]);
    }
    record_host_version();
  }
  auto index = device_plan_.narrow(0, batch_start_[k], static_cast<int64_t>(batch.size()));
  auto x = device_samples_converted_ ? device_samples_.index_select(0, index)
                                     : train_->input(device_samples_.index_select(0, index), norm_);
  if (opt_.augment && train_->images())
    x = data::augment(x, opt_.augment_seed * 0x9e3779b97f4a7c15ull + steps_);
  ++steps_;
  auto y = device_labels_.index_select(0, index);
  optimizer_.zero_grad();
  auto loss = torch::nn::functional::cross_entropy(replica_->forward(x), y);
  loss.backward();
  optimizer_.step();
  // The weights stay on the device until something reads the CPU's model
  // (to_host()): a gossip send, a merge, a checkpoint, an evaluation.
  device_ahead_ = true;
  step_result r;
  // Waits for the step (the loss is read back, as in any training loop).
  r.loss = loss.item<double>();
  r.samples = static_cast<int64_t>(batch.size());
  r.compute_seconds =
    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

evaluation evaluate_logits(const std::function<torch::Tensor(const torch::Tensor&)>& logits_of,
                           const dataset& data, int64_t batch) {
  if (batch <= 0)
    throw argument_error("evaluate: batch size must be positive");
  const int64_t n = data.size();
  if (n == 0)
    return {};
  torch::NoGradGuard no_grad;
  double loss = 0;
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t len = std::min(batch, n - begin);
    auto x = data.range(begin, begin + len);
    auto y = data.labels.narrow(0, begin, len);
    auto logits = logits_of(x);
    loss += torch::nn::functional::cross_entropy(
                logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  return {loss / static_cast<double>(n), static_cast<double>(correct) / static_cast<double>(n),
          correct, n};
}

evaluation evaluate(classifier& model, const dataset& data, int64_t batch) {
  evaluation_scope scope(model);
  return evaluate_logits([&](const torch::Tensor& x) { return model.forward(x); }, data, batch);
}

} // namespace eg::learning
