#pragma once
// One platform's local training: its model, SGD optimizer and data shard,
// stepped one iteration at a time so the actor hosting it stays responsive.

#include "models/dataset.hpp"
#include "train/loans.hpp"
#include "models/model.hpp"

#include <torch/optim/sgd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace eg::learning {

struct sgd_options {
  double lr = 0.01;
  double momentum = 0.9;
  int64_t batch = 64;
  /// Random crop and horizontal flip of image batches (data.augment), drawn
  /// from `augment_seed` and the step's count, so equal seeds repeat.
  bool augment = false;
  uint64_t augment_seed = 0;
};

/// The learning rate of epoch `epoch` (0-based) of a run of `epochs` under
/// `schedule`: "constant": `lr`; "cosine": lr (1 + cos(pi epoch / epochs)) / 2,
/// `lr` in the first epoch, about lr (pi / epochs)^2 / 4 in the last (an
/// epoch-wise cosine annealing). Throws std::invalid_argument for another
/// schedule or no epochs.
double scheduled_lr(double lr, const std::string& schedule, uint32_t epoch, uint32_t epochs);

/// The share of the scheduled learning rate at `progress` epochs into the
/// run (fractional: epoch + the share of its iterations done, this step's
/// included) under a linear warm-up over the first `warmup` epochs:
/// min(1, progress / warmup); 1 without warm-up (`warmup` 0). Throws
/// std::invalid_argument for a negative warm-up or progress.
double warmup_factor(double warmup, double progress);

/// The iterations of one epoch: each batch is a list of sample indices.
struct epoch_plan {
  std::vector<std::vector<int64_t>> batches;
  int64_t samples() const;
};

/// GoSGD's plan: the shard shuffled and cut into batches of `batch`, keeping
/// the first ceil(|shard| * ratio) samples (ratio in (0, 1]).
epoch_plan shuffled_plan(const std::vector<int64_t>& shard, int64_t batch, double ratio,
                         std::mt19937_64& rng);

struct step_result {
  double loss = 0;
  int64_t samples = 0;
  double compute_seconds = 0;
};

struct evaluation {
  double loss = 0;      ///< mean over the samples
  double accuracy = 0;  ///< correct / samples
  int64_t correct = 0;
  int64_t samples = 0;
};

/// The device a platform trains on: "cpu", "cuda" or "cuda:N". Throws
/// std::invalid_argument for another name, and where CUDA is asked for but
/// this build's LibTorch has none ("built without CUDA") or the GPU is not
/// there.
torch::Device training_device(const std::string& name);

class local_trainer {
public:
  /// On a GPU (`device` not the CPU) the steps run on a replica of the model
  /// there, and the model on the CPU (what gossip, checkpoints and
  /// evaluation use, as everywhere else) is brought up to date only when
  /// something reads it: model() and to_host() copy the replica's weights
  /// back if a step changed them since. Whoever holds the parameters
  /// (`parameters(model())`) calls to_host() before reading or writing them;
  /// a step that finds them written while the replica was ahead throws
  /// std::logic_error (the write would be lost). On the CPU model() trains
  /// itself and to_host() does nothing.
  ///
  /// On a GPU the model's float parameters are views of one pinned host
  /// buffer and the replica's of one device buffer, so that each way is a
  /// single copy; the training set is copied to the device once and each
  /// epoch's plan with it. Whoever replaces a parameter's storage (a loan's
  /// copy-on-write, a checkpoint loaded) changes nothing for the others: the
  /// next copy finds it moved and gathers the parameters into a fresh
  /// buffer. A step copies the weights to the device only when they changed
  /// since the last copy: whoever writes the parameters does so through
  /// tensor operations (their version counters show it), as gossip, the
  /// parameter server and checkpoints do; a write through a raw pointer
  /// would not be seen.
  local_trainer(std::shared_ptr<classifier> model, std::shared_ptr<const dataset> train,
                std::vector<int64_t> shard, sgd_options opt,
                torch::Device device = torch::kCPU);

  /// Starts an epoch that runs `plan`'s batches in order.
  void begin_epoch(epoch_plan plan);
  /// True when the current epoch's plan is used up.
  bool epoch_done() const;
  /// One iteration: forward, backward, optimizer step on the next batch.
  /// The step writes the parameters in place, after loans().before_write().
  step_result step();
  /// Batches left in the current epoch.
  size_t remaining() const;
  /// Points of each class (by label) trained since the epoch began.
  const std::vector<uint64_t>& class_samples() const { return class_samples_; }

  /// The model on the CPU, up to date (to_host()).
  classifier& model() {
    to_host();
    return *model_;
  }
  /// On a GPU: copies the replica's weights into the model on the CPU when
  /// a step changed them since the last copy (waiting for it), after
  /// loans().before_write() for the messages that still hold them.
  void to_host();
  /// The model that steps: model() itself on the CPU, its copy on the
  /// device otherwise (ahead of the CPU's until to_host()).
  classifier& replica() { return *replica_; }
  std::shared_ptr<classifier> model_ptr() {
    to_host();
    return model_;
  }
  torch::optim::SGD& optimizer() { return optimizer_; }
  /// The parameters lent to messages in flight (gossip sends them without
  /// copying); whoever else writes the parameters in place calls
  /// loans().before_write() first.
  parameter_loans& loans() { return loans_; }
  const std::vector<int64_t>& shard() const { return shard_; }
  const sgd_options& options() const { return opt_; }
  /// The optimizer's learning rate from the next step on.
  void set_lr(double lr);
  torch::Device device() const { return device_; }
  /// Trains from the next step on with `norm` (the cluster's, combined from
  /// every node's statistics) instead of the training set's own; nothing
  /// happens when it is the one in use.
  void set_normalisation(const data::normalisation& norm);
  const data::normalisation& normalisation() const { return train_->norm; }

private:
  /// The training set on the device (a GPU trainer), as the model's input
  /// when that copy is small.
  void copy_training_set();
  std::shared_ptr<classifier> model_;
  std::shared_ptr<const dataset> train_;
  std::vector<int64_t> shard_;
  sgd_options opt_;
  torch::Device device_;
  std::shared_ptr<classifier> replica_;  ///< what steps: model_ itself on the CPU
  torch::optim::SGD optimizer_;
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> replica_params_;  ///< empty on the CPU
  parameter_loans loans_;
  epoch_plan plan_;
  size_t next_ = 0;
  uint64_t steps_ = 0;
  std::vector<uint64_t> class_samples_;

  // On a device only.
  step_result device_step();
  /// Gathers the parameters into a fresh pinned buffer (and makes them
  /// views of it) when any of them is no longer where the last one put it;
  /// returns whether it did.
  bool gather_host();
  /// Whether a tensor operation wrote a parameter since the last copy
  /// either way (their version counters moved).
  bool host_written() const;
  std::vector<int64_t> host_version_;  ///< the parameters' versions after the last copy either way
  bool device_ahead_ = false;  ///< a step changed the replica since the last to_host()
  /// Records the parameters' versions: what the device holds from here on.
  void record_host_version();
  torch::Tensor host_flat_;    ///< pinned; the model's parameters are views of it (undefined: one copy a parameter)
  std::vector<const void*> host_at_;  ///< where each parameter lay when host_flat_ was made
  torch::Tensor device_flat_;  ///< the replica's parameters are views of it
  torch::Tensor device_samples_, device_labels_;  ///< the training set on the device
  bool device_samples_converted_ = false;  ///< device_samples_ holds the model's input already
  torch::Tensor host_labels_;  ///< contiguous labels on the CPU, for class_samples()
  std::pair<torch::Tensor, torch::Tensor> norm_;  ///< the normalisation on the training device
  torch::Tensor device_plan_;  ///< the epoch's batches, end to end, on the device
  std::vector<int64_t> batch_start_;  ///< where each batch begins in device_plan_
};

/// Loss and accuracy of `model` on `data` (no gradients, eval mode, restores
/// train mode afterwards).
evaluation evaluate(classifier& model, const dataset& data, int64_t batch = 1000);

/// The same for any map from samples to logits (`logits_of`, called without
/// gradients on normalised batches of at most `batch` samples in order): e.g. the stages
/// of a split model chained.
evaluation evaluate_logits(const std::function<torch::Tensor(const torch::Tensor&)>& logits_of,
                           const dataset& data, int64_t batch = 1000);

} // namespace eg::learning
