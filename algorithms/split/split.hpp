#pragma once
// One model across several machines: the model's layers cut into contiguous
// stages, each trained by its own stage_trainer, with plain backpropagation
// between the stages or decoupled by synthetic gradients (DNI, Jaderberg et
// al., ICML 2017; Chen et al., HotEdge 2019). No actors here: what a stage
// sends up (activations and labels) and down (gradients) is handed around by
// the caller; `train_pipeline` does it in one thread for tests and benches.
// See docs/SPLIT.md.

#include "algorithms/split/cut_planner.hpp"
#include "common/error.hpp"
#include "models/dataset.hpp"
#include "models/layered.hpp"
#include "models/model.hpp"
#include "train/trainer.hpp"

#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::learning {

/// A message or blob a stage refuses (wrong shape, unknown batch, too many
/// batches in flight, a checkpoint of another stage); what() says what was
/// expected and what came.
class stage_error : public failure<errc::mismatch, std::invalid_argument> {
public:
  using failure::failure;
};

// --- synthetic gradients (DNI) ------------------------------------------------

/// How the synthetic-gradient module's outputs relate to dL/dh (whose size
/// is about 1 / batch for a batch-mean loss).
enum class sg_scaling {
  none,     ///< the module regresses dL/dh itself
  batch,    ///< it regresses B x dL/dh (a per-sample loss's gradient), predicts / B
  running,  ///< it regresses dL/dh / s, s the running RMS of the targets
};

struct synthetic_gradient_options {
  /// The data's classes (cDNI's one-hot label); stage_trainer sets it from
  /// its stage's model shape.
  int64_t classes = 0;
  int64_t hidden = 256;      ///< width of the MLP's hidden layers (2-D activations)
  int64_t layers = 2;        ///< hidden layers of the MLP: 0 (linear), 1 or 2
  bool conditioned = true;   ///< cDNI: the one-hot label is an input too
  double lr = 3e-4;          ///< Adam's learning rate
  /// Predictions are scaled down to at most clip times the running RMS of
  /// the targets (per batch); 0: never.
  double clip = 0;
  sg_scaling scaling = sg_scaling::batch;  ///< target units (see sg_scaling)
  bool normalize_input = false;  ///< the module sees h / RMS(h) over the batch
  /// Predictions are multiplied by min(1, trained / warmup), trained being
  /// the regression steps so far; 0: no ramp.
  int64_t warmup = 0;
  /// Predictions are multiplied by the module's recent coefficient of
  /// determination, clamp(1 - E[error^2] / E[target^2], 0, 1), both means
  /// exponential averages over the regression steps with weight
  /// `gate_rate`; 0: no gate.
  double gate_rate = 0.1;
  /// Convolutional modules: 5x5 convolutions (2 or 3; the hidden ones C wide).
  int64_t conv_layers = 0;
};

/// Predicts dL/dh from an activation h (and the labels with cDNI), and
/// learns it by L2 regression toward the gradients that come later. For
/// activations [B, D], and [B, C, H, W] with conv_layers 0 (flattened): an
/// MLP D -> hidden (x layers) -> D with ReLUs; with conv_layers 2 or 3:
/// that many 5x5 same-padded convolutions C -> C with ReLUs between. The
/// last layer starts at zero, so the first predictions are 0. cDNI adds a
/// linear map of the one-hot label after the first layer (a per-channel
/// bias for convolutions). Its optimizer is Adam. See docs/SPLIT.md for the
/// defaults and the gate.
class synthetic_gradient {
public:
  /// `shape`: the activation without the batch dimension ({D} or {C, H, W}).
  synthetic_gradient(std::vector<int64_t> shape, synthetic_gradient_options opt, uint64_t seed);
  ~synthetic_gradient();
  synthetic_gradient(const synthetic_gradient&) = delete;
  synthetic_gradient& operator=(const synthetic_gradient&) = delete;

  /// The synthetic gradient for h [B, shape...] (no autograd graph; same shape
  /// as h). `labels` [B] int64 are needed when conditioned, else ignored.
  torch::Tensor predict(const torch::Tensor& h, const torch::Tensor& labels);
  /// One Adam step of the regression of predict(h, labels) toward `target`
  /// (same shape as h); returns the mean squared error before the step.
  double train(const torch::Tensor& h, const torch::Tensor& labels, const torch::Tensor& target);

  /// What predictions are multiplied by under gate_rate (1 - the recent
  /// relative regression error, in [0, 1]; 0 before the first target).
  double gate() const;

  const std::vector<int64_t>& shape() const { return shape_; }
  const synthetic_gradient_options& options() const { return opt_; }
  torch::nn::Module& module();
  torch::optim::Optimizer& optimizer();

private:
  void check(const torch::Tensor& h, const torch::Tensor& labels, const char* what) const;
  double unit(int64_t batch) const;

  struct net;
  std::vector<int64_t> shape_;
  synthetic_gradient_options opt_;
  std::shared_ptr<net> net_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
};

// --- one stage's training -------------------------------------------------------

enum class stage_mode {
  backprop,   ///< a stage waits for dL/dh from above before it updates
  synthetic,  ///< a stage updates at once from its synthetic gradient
  /// Pipelined backpropagation: up to `in_flight` batches in the pipeline,
  /// each stage updates from the true gradient when it comes (a few
  /// batches late), recomputing the batch's forward pass with its current
  /// parameters (decoupled delayed gradients; PipeDream without stashing).
  delayed,
  /// Synthetic gradients corrected: a stage updates at once from its
  /// synthetic gradient g, and when the true gradient t comes it updates
  /// again by t - g through its current parameters, so that each batch
  /// contributes its true gradient in the end; what goes down is the true
  /// input gradient, sent with the correction.
  corrected,
  /// Pipelined backpropagation with weight stashing (PipeDream, Narayanan
  /// et al., SOSP 2019): as `delayed`, but each batch's forward pass runs on
  /// a copy of the parameters as they were (a stashed version) and keeps
  /// its graph, so the true gradient is taken at the weights that made the
  /// output, with no second forward pass; it is applied to the current
  /// parameters. Costs a parameter copy a batch and one copy per batch in
  /// flight.
  stashed,
  /// Weight stashing with weight prediction (SpecTrain, Chen et al. 2018;
  /// PipeMare, Yang et al., MLSys 2021): as `stashed`, but the copy a
  /// batch's forward pass runs on holds the parameters predicted for when
  /// its gradient will be applied, W - d lr v: d the batches in flight at
  /// this stage before it (each steps once before it comes back), v the
  /// SGD's momentum buffer. The gradient is then taken close to where it
  /// is applied, a few batches later.
  predicted,
};
/// "backprop", "synthetic", "delayed", "corrected", "stashed", "predicted";
/// parse_stage_mode throws mismatch_error for another name.
std::string to_string(stage_mode m);
stage_mode parse_stage_mode(const std::string& s);
/// Whether stages update before the true gradient comes back (every mode
/// but backprop): the first stage keeps up to `in_flight` batches in the
/// pipeline.
inline bool pipelined(stage_mode m) { return m != stage_mode::backprop; }
/// Whether a stage that is not the last has a synthetic-gradient module.
inline bool has_synthetic_gradient(stage_mode m) {
  return m == stage_mode::synthetic || m == stage_mode::corrected;
}
/// Whether a batch's forward pass runs on a copy of the parameters, kept
/// until its gradient comes (stashed and predicted).
inline bool stashes(stage_mode m) {
  return m == stage_mode::stashed || m == stage_mode::predicted;
}

struct stage_options {
  sgd_options sgd;  ///< lr and momentum of the stage's SGD (batch is not used here)
  stage_mode mode = stage_mode::backprop;
  synthetic_gradient_options synthetic;
  int64_t max_in_flight = 16;  ///< batches forwarded and not yet given their gradient
  /// Every mode but backprop (which stays the whole model's training):
  /// steps over which the SGD's learning rate rises linearly to its value
  /// (step s of the first `lr_warmup` takes (s + 1) / lr_warmup of it; 0:
  /// off): late gradients cost the most while the weights move fastest.
  /// Counted in the stage's steps, which its checkpoint keeps: a stage
  /// started again from its checkpoint (a node restarted, a rollback) goes
  /// on from the step it was saved at.
  int64_t lr_warmup = 0;
  /// How the warm-up scales a step. false: linearly from 0, every step of
  /// every stage alike. true: by the gradient's delay, PipeMare's learning
  /// rate rescheduling: a step whose gradient was computed d of this stage's
  /// steps before takes lr / d^(1 - s / lr_warmup), so a gradient on time
  /// (d <= 1: the last stage's) takes the full rate from the first step.
  bool lr_warmup_by_delay = false;
};

/// One stage's layers, its SGD optimizer, its synthetic-gradient module
/// (synthetic mode, all stages but the last) and the batches in flight.
///
/// Protocol, per batch id: a stage that is not the last gets
/// forward(batch, input, labels), sends `output` (and the labels) up and, in
/// synthetic mode, `input_gradient` down at once; later it gets
/// backward(batch, dL/d output) from the stage above. In backprop mode that
/// backward steps the optimizer and returns the gradient to send down; in
/// synthetic mode it trains the SG module and sends nothing. The last stage
/// gets loss_step(batch, input, labels), steps, and sends its input gradient
/// down. Every incoming tensor is checked (stage_error).
class stage_trainer {
public:
  /// `sg_seed` initialises the synthetic-gradient module.
  stage_trainer(std::shared_ptr<stage_module> stage, stage_options opt, uint64_t sg_seed = 1);
  ~stage_trainer();
  stage_trainer(const stage_trainer&) = delete;
  stage_trainer& operator=(const stage_trainer&) = delete;

  struct forward_result {
    torch::Tensor output;          ///< to send up: detached, contiguous
    torch::Tensor input_gradient;  ///< synthetic mode, not the first stage: to send down now
  };
  /// Not the last stage. `input` [B, input shape], `labels` [B] int64.
  forward_result forward(uint64_t batch, const torch::Tensor& input, const torch::Tensor& labels);

  struct backward_result {
    /// backprop, delayed and corrected modes, not the first stage: to send down
    torch::Tensor input_gradient;
    std::optional<double> synthetic_loss;  ///< synthetic, corrected: the SG's regression error
  };
  /// The gradient of the loss w.r.t. the output of `batch`, from above.
  backward_result backward(uint64_t batch, const torch::Tensor& grad_output);

  struct loss_result {
    double loss = 0;      ///< mean cross-entropy of the batch
    int64_t correct = 0;  ///< samples whose arg-max logit is the label
    int64_t samples = 0;
    torch::Tensor input_gradient;  ///< not the first stage: to send down
  };
  /// The last stage: forward, cross-entropy, backward, optimizer step.
  loss_result loss_step(uint64_t batch, const torch::Tensor& input, const torch::Tensor& labels);

  /// The stage's output without gradients, in eval mode.
  torch::Tensor infer(const torch::Tensor& input);

  /// Parameters, SG module and both optimizers' state as bytes.
  std::string save();
  /// Loads what save() wrote for the same model, layers, mode and SG shape,
  /// learning rates included; refuses anything else with stage_error,
  /// changing nothing. Drops the batches in flight.
  void load(const std::string& bytes);

  bool is_first() const { return stage_->is_first(); }
  bool is_last() const { return stage_->is_last(); }
  stage_mode mode() const { return opt_.mode; }
  const stage_options& options() const { return opt_; }
  stage_module& stage() { return *stage_; }
  std::vector<torch::Tensor> parameters() { return stage_->parameters(); }
  /// The SG module: synthetic or corrected mode and not the last stage, else null.
  synthetic_gradient* synthetic() { return sg_.get(); }
  torch::optim::SGD& optimizer() { return *optimizer_; }
  /// Batches forwarded whose gradient has not come yet.
  size_t in_flight() const { return pending_.size(); }
  /// Drops the batches in flight whose id is below `batch`: their gradient
  /// will not come (the pipeline lost them and sends them again as new
  /// batches). Returns how many were dropped.
  size_t forget_before(uint64_t batch);
  /// Optimizer steps so far (a step skipped for a non-finite gradient is
  /// not one); load() sets it to the checkpoint's.
  uint64_t steps() const { return steps_; }
  /// The norm of the last update's gradient over the stage's parameters
  /// (NaN before the first). A non-finite gradient is not applied: the
  /// parameters stay as they were, and the runaway guard hears of it.
  double gradient_norm() const { return gradient_norm_; }
  /// Updates skipped because their gradient was not finite.
  uint64_t skipped_steps() const { return skipped_; }
  /// The SGD's learning rate (and the synthetic-gradient module's Adam's)
  /// multiplied by `factor` (a rollback slows a stage down).
  void scale_learning_rate(double factor);
  double learning_rate() const;
  /// The learning rate the next step takes: learning_rate() scaled by the
  /// warm-up (stage_options::lr_warmup), for a gradient `delay` of this
  /// stage's steps late (used by the rule by delay alone).
  double step_learning_rate(uint64_t delay = 0) const;

private:
  struct pending;
  void check_input(uint64_t batch, const torch::Tensor& input, const torch::Tensor& labels,
                   const char* what) const;
  torch::Tensor prepare_input(const torch::Tensor& input) const;
  /// Applies the gradients held by the parameters; `delay`: this stage's
  /// steps since the batch's forward pass.
  void step(uint64_t delay = 0);
  /// stashed mode: a copy of the stage's layers holding its parameters as
  /// they are now (from the spares when one is free); predicted mode: as
  /// they are predicted to be when the batch's gradient comes.
  std::shared_ptr<stage_module> stash();

  std::shared_ptr<stage_module> stage_;
  stage_options opt_;
  uint64_t sg_seed_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::unique_ptr<synthetic_gradient> sg_;
  std::map<uint64_t, std::unique_ptr<pending>> pending_;
  std::vector<std::shared_ptr<stage_module>> spare_stashes_;  // stashed, predicted
  uint64_t steps_ = 0;
  uint64_t skipped_ = 0;
  double gradient_norm_;
};

/// The stages of `model` cut after the layers `cuts` (see stage_ranges),
/// all from the whole model initialised by `seed`; the SG module of stage k
/// is initialised from seed + 1 + k; for data of `shape`.
std::vector<std::shared_ptr<stage_trainer>> make_pipeline(const std::string& model,
                                                          const std::vector<int64_t>& cuts,
                                                          uint64_t seed,
                                                          const stage_options& opt,
                                                          const model_shape& shape);

// --- cuts from the machines' speeds ---------------------------------------------

/// Passes per batch of a stage below the last in `mode` (cut_planner.hpp):
/// backprop, synthetic, stashed and predicted one forward and one backward; delayed
/// two forward (the batch again, at the current parameters) and one
/// backward; corrected two of each (the synthetic step and the correction).
stage_passes passes_below(stage_mode mode);

/// Each layer of `model` timed alone on this machine, in this thread: a
/// forward and a backward pass over `batch` random inputs, the median of
/// `repeats` after one unmeasured pass. The layers take turns, one pass each
/// a round, so a slow start falls on every layer's unmeasured round.
std::vector<layer_cost> measure_layer_costs(const std::string& model, const model_shape& shape,
                                            int64_t batch, int repeats = 7);

/// Every contiguous run of layers of `model` trained as a stage on this
/// machine, in this thread, by a stage_trainer with `opt` (its mode and
/// rates): seconds per batch of all of a stage's work, the forward pass (on
/// the stashed or predicted copy), the backward pass, the optimizer's step
/// and the gradient it sends down, or the loss step for a run that ends at
/// the last layer; in the pipelined modes a batch's backward pass comes
/// after the next batch's forward pass. Inputs, labels and gradients are
/// random, of the shapes the stage takes. Rounds over every run, one timed
/// batch each after an untimed one; the median of `repeats` rounds. For
/// stage_costs's plans (cut_planner.hpp). Holds every run's parameters at
/// once (about layers^2 / 6 copies of the model's), no batch.
stage_costs measure_stage_costs(const std::string& model, const model_shape& shape, int64_t batch,
                                const stage_options& opt, int repeats = 7);

// --- in-process reference pipeline ---------------------------------------------

struct pipeline_result {
  double loss = 0;            ///< mean training loss over the epoch's samples
  double accuracy = 0;        ///< training accuracy over the epoch (as trained)
  double synthetic_loss = 0;  ///< mean SG regression error (synthetic mode), else 0
  int64_t samples = 0;
  int64_t batches = 0;
  double seconds = 0;
};

/// One epoch of `plan` through `stages` (in order, the last holding the
/// loss) in this thread. The gradients from above reach a stage `delay`
/// batches late: after batch t's forward pass the down-messages of batch
/// t - delay + 1 are delivered (delay 1: at once; so at most `delay` batches
/// are in flight at a stage); what is left is delivered at the end. In
/// backprop mode with delay > 1, a stage that stepped since a batch's
/// forward pass recomputes it with its current parameters before its
/// backward pass.
pipeline_result train_pipeline(const std::vector<std::shared_ptr<stage_trainer>>& stages,
                               const dataset& train, const epoch_plan& plan, int64_t delay = 1);

/// Loss and accuracy of the stages chained (no gradients, eval mode).
evaluation evaluate(const std::vector<std::shared_ptr<stage_trainer>>& stages, const dataset& data,
                    int64_t batch = 1000);

} // namespace eg::learning
