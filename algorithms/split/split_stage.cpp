// One stage's training (stage_trainer) and the in-process reference pipeline.
#include "algorithms/split/split.hpp"
#include "common/error.hpp"

#include "models/shape_text.hpp"

#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <deque>
#include <iterator>
#include <sstream>
#include <type_traits>

namespace eg::learning {

using shape_text::batched;
using shape_text::shape_string;

namespace {
constexpr const char* mode_names[] = {"backprop", "synthetic", "delayed",
                                      "corrected", "stashed",   "predicted"};

// The key of a parameter's entry in an optimizer's state: the address of
// its TensorImpl, written as text up to LibTorch 1.x (what
// c10::guts::to_string made of it) and the address itself in 2.x.
template <typename State>
auto optimizer_state_key(const torch::Tensor& p) {
  using key = typename std::decay_t<State>::key_type;
  if constexpr (std::is_convertible_v<void*, key>) {
    return static_cast<key>(p.unsafeGetTensorImpl());
  } else {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return os.str();
  }
}
} // namespace

std::string to_string(stage_mode m) { return mode_names[static_cast<size_t>(m)]; }

stage_mode parse_stage_mode(const std::string& s) {
  for (size_t i = 0; i < std::size(mode_names); ++i)
    if (s == mode_names[i])
      return static_cast<stage_mode>(i);
  throw mismatch_error("unknown stage mode '" + s +
                       "' (use backprop, synthetic, delayed, corrected, stashed or predicted)");
}

// A batch forwarded and waiting for its gradient from above.
struct stage_trainer::pending {
  // backprop: the input (requiring a gradient unless this is the first
  // stage) and the output with its graph, valid while no step came between.
  torch::Tensor input;
  torch::Tensor output;
  uint64_t step_at_forward = 0;
  // synthetic: the detached output and the labels, the SG's training input.
  torch::Tensor labels;
  // corrected: the synthetic gradient the stage stepped with, and the input
  // gradient it gave (not the first stage).
  torch::Tensor synthetic;
  torch::Tensor synthetic_input_gradient;
  // stashed: the copy of the layers the forward pass ran on (its graph
  // holds their parameters as they were).
  std::shared_ptr<stage_module> stash;
};

stage_trainer::stage_trainer(std::shared_ptr<stage_module> stage, stage_options opt,
                             uint64_t sg_seed)
    : stage_(std::move(stage)), opt_(opt), sg_seed_(sg_seed),
      gradient_norm_(std::numeric_limits<double>::quiet_NaN()) {
  if (!stage_)
    throw mismatch_error("stage_trainer: no stage");
  if (opt_.max_in_flight < 1)
    throw mismatch_error("stage_trainer: max_in_flight must be at least 1, not " +
                                std::to_string(opt_.max_in_flight));
  if (!(opt_.sgd.lr > 0))
    throw mismatch_error("stage_trainer: lr must be positive");
  if (opt_.lr_warmup < 0)
    throw mismatch_error("stage_trainer: lr_warmup must not be negative, not " +
                         std::to_string(opt_.lr_warmup));
  optimizer_ = std::make_unique<torch::optim::SGD>(
      stage_->parameters(), torch::optim::SGDOptions(opt_.sgd.lr).momentum(opt_.sgd.momentum));
  if (has_synthetic_gradient(opt_.mode) && !stage_->is_last()) {
    auto sg = opt_.synthetic;
    sg.classes = stage_->shape().classes;
    sg_ = std::make_unique<synthetic_gradient>(stage_->output_shape(), sg, sg_seed_);
  }
  stage_->train();
}

stage_trainer::~stage_trainer() = default;

void stage_trainer::check_input(uint64_t batch, const torch::Tensor& input,
                                const torch::Tensor& labels, const char* what) const {
  const auto expected = stage_->input_shape();
  const std::string where = std::string("stage ") + stage_->model_name() + " layers " +
                            std::to_string(stage_->first_layer()) + ".." +
                            std::to_string(stage_->last_layer()) + ", " + what + " of batch " +
                            std::to_string(batch);
  if (!input.defined() || input.dim() != static_cast<int64_t>(expected.size()) + 1 ||
      input.size(0) < 1 || input.sizes().slice(1).vec() != expected)
    throw stage_error(where + ": input of shape " + shape_string(input) + ", expected [B, " +
                      shape_string(expected).substr(1));
  if (input.scalar_type() != torch::kFloat32)
    throw stage_error(where + ": input of type " + std::string(c10::toString(input.scalar_type())) +
                      ", expected Float");
  if (!labels.defined() || labels.dim() != 1 || labels.size(0) != input.size(0) ||
      labels.scalar_type() != torch::kInt64)
    throw stage_error(where + ": labels of shape " + shape_string(labels) + ", expected [" +
                      std::to_string(input.size(0)) + "] int64");
  if (labels.numel() > 0 &&
      (labels.min().item<int64_t>() < 0 ||
       labels.max().item<int64_t>() >= stage_->shape().classes))
    throw stage_error(where + ": a label is not in 0.." +
                      std::to_string(stage_->shape().classes - 1));
}

torch::Tensor stage_trainer::prepare_input(const torch::Tensor& input) const {
  // The first stage's input is data: no gradient to hand down.
  auto x = input.detach();
  if (!stage_->is_first())
    x.requires_grad_(true);
  return x;
}

namespace {

void set_sgd_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

} // namespace

void stage_trainer::step(uint64_t delay) {
  // One reduction for the whole stage: the squared norms summed as tensors.
  torch::Tensor squares;
  for (auto& p : stage_->parameters())
    if (p.grad().defined()) {
      auto s = p.grad().detach().pow(2).sum();
      squares = squares.defined() ? squares + s : s;
    }
  gradient_norm_ = squares.defined() ? std::sqrt(squares.item<double>()) : 0.0;
  if (!std::isfinite(gradient_norm_)) {
    optimizer_->zero_grad();
    ++skipped_;
    return;
  }
  const double lr = learning_rate(), now = step_learning_rate(delay);
  if (now != lr)
    set_sgd_lr(*optimizer_, now);
  optimizer_->step();
  if (now != lr)
    set_sgd_lr(*optimizer_, lr);
  ++steps_;
}

double stage_trainer::step_learning_rate(uint64_t delay) const {
  const double lr = learning_rate();
  if (opt_.mode == stage_mode::backprop || opt_.lr_warmup <= 0 ||
      steps_ >= static_cast<uint64_t>(opt_.lr_warmup))
    return lr;
  const double progress = static_cast<double>(steps_) / static_cast<double>(opt_.lr_warmup);
  if (opt_.lr_warmup_by_delay)
    return delay <= 1 ? lr : lr / std::pow(static_cast<double>(delay), 1.0 - progress);
  return lr * static_cast<double>(steps_ + 1) / static_cast<double>(opt_.lr_warmup);
}

std::shared_ptr<stage_module> stage_trainer::stash() {
  std::shared_ptr<stage_module> copy;
  if (!spare_stashes_.empty()) {
    copy = std::move(spare_stashes_.back());
    spare_stashes_.pop_back();
  } else {
    copy = std::make_shared<stage_module>(stage_->model_name(), stage_->first_layer(),
                                          stage_->last_layer(), stage_->shape());
    copy->train();
  }
  torch::NoGradGuard no_grad;
  auto mine = stage_->parameters();
  auto theirs = copy->parameters();
  for (size_t i = 0; i < mine.size(); ++i)
    theirs[i].copy_(mine[i]);
  if (opt_.mode == stage_mode::predicted && !pending_.empty()) {
    // W - d lr v: the momentum's step, d times, for the d batches before
    // this one that each step once before its gradient comes.
    const double ahead =
        static_cast<double>(pending_.size()) * step_learning_rate(pending_.size());
    auto& state = optimizer_->state();
    for (size_t i = 0; i < mine.size(); ++i) {
      auto it = state.find(optimizer_state_key<decltype(state)>(mine[i]));
      if (it == state.end())
        continue;
      auto& v = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
      if (v.defined())
        theirs[i].add_(v, -ahead);
    }
  }
  return copy;
}

void stage_trainer::scale_learning_rate(double factor) {
  if (!(factor > 0))
    throw mismatch_error("stage_trainer: a learning rate factor must be positive");
  for (auto& group : optimizer_->param_groups()) {
    auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
    o.lr(o.lr() * factor);
  }
  if (sg_)
    for (auto& group : sg_->optimizer().param_groups()) {
      auto& o = static_cast<torch::optim::AdamOptions&>(group.options());
      o.lr(o.lr() * factor);
    }
}

double stage_trainer::learning_rate() const {
  return static_cast<const torch::optim::SGDOptions&>(
           optimizer_->param_groups().front().options()).lr();
}

stage_trainer::forward_result stage_trainer::forward(uint64_t batch, const torch::Tensor& input,
                                                     const torch::Tensor& labels) {
  if (stage_->is_last())
    throw std::logic_error("stage_trainer::forward: the last stage takes loss_step");
  check_input(batch, input, labels, "forward");
  if (pending_.count(batch))
    throw stage_error("stage_trainer::forward: batch " + std::to_string(batch) +
                      " is already in flight");
  if (static_cast<int64_t>(pending_.size()) >= opt_.max_in_flight)
    throw stage_error("stage_trainer::forward: batch " + std::to_string(batch) + " would be the " +
                      std::to_string(pending_.size() + 1) + "th in flight; at most " +
                      std::to_string(opt_.max_in_flight) + " (max_in_flight) wait for a gradient");

  auto p = std::make_unique<pending>();
  forward_result r;
  auto x = prepare_input(input);
  if (stashes(opt_.mode))
    p->stash = stash();
  auto out = p->stash ? p->stash->forward(x) : stage_->forward(x);
  if (!has_synthetic_gradient(opt_.mode)) {
    p->input = x;
    p->output = out;
    p->step_at_forward = steps_;
  } else {
    // Update at once from the synthetic gradient of the output.
    auto h = out.detach();
    auto g = sg_->predict(h, labels);
    optimizer_->zero_grad();
    out.backward(g);
    step();
    p->step_at_forward = steps_;  // (the correction's delay counts from here)
    torch::Tensor dx;
    if (!stage_->is_first())
      dx = x.grad().detach().contiguous();
    p->output = h;
    p->labels = labels.detach();
    if (opt_.mode == stage_mode::corrected) {
      // Kept for the correction; nothing goes down before the true gradient.
      p->input = x.detach();
      p->synthetic = g.detach();
      p->synthetic_input_gradient = dx;
    } else {
      r.input_gradient = dx;
    }
  }
  r.output = out.detach().contiguous();
  pending_.emplace(batch, std::move(p));
  return r;
}

stage_trainer::backward_result stage_trainer::backward(uint64_t batch,
                                                       const torch::Tensor& grad_output) {
  auto it = pending_.find(batch);
  if (it == pending_.end())
    throw stage_error("stage_trainer::backward: batch " + std::to_string(batch) +
                      " is not in flight at stage " + stage_->model_name() + " layers " +
                      std::to_string(stage_->first_layer()) + ".." +
                      std::to_string(stage_->last_layer()));
  auto& p = *it->second;
  if (!grad_output.defined() || grad_output.sizes() != p.output.sizes())
    throw stage_error("stage_trainer::backward: gradient of batch " + std::to_string(batch) +
                      " of shape " + shape_string(grad_output) + ", expected " +
                      shape_string(p.output) + " (the output's)");
  if (grad_output.scalar_type() != p.output.scalar_type())
    throw stage_error("stage_trainer::backward: gradient of batch " + std::to_string(batch) +
                      " of type " + std::string(c10::toString(grad_output.scalar_type())) +
                      ", expected " + std::string(c10::toString(p.output.scalar_type())));
  auto done = std::move(it->second);
  pending_.erase(it);

  backward_result r;
  if (opt_.mode == stage_mode::synthetic) {
    r.synthetic_loss = sg_->train(done->output, done->labels, grad_output);
    return r;
  }
  if (opt_.mode == stage_mode::corrected) {
    r.synthetic_loss = sg_->train(done->output, done->labels, grad_output);
    // The correction t - g through the stage as it is now (it stepped at
    // least once since: with the synthetic gradient of this batch).
    auto x = prepare_input(done->input);
    auto out = stage_->forward(x);
    optimizer_->zero_grad();
    out.backward(grad_output.detach() - done->synthetic);
    step(steps_ - done->step_at_forward);
    if (!stage_->is_first())
      r.input_gradient = (x.grad().detach() + done->synthetic_input_gradient).contiguous();
    return r;
  }
  auto x = done->input;
  auto out = done->output;
  if (done->stash) {
    // The gradient at the stashed parameters, applied to the current ones.
    out.backward(grad_output.detach());
    auto mine = stage_->parameters();
    auto theirs = done->stash->parameters();
    for (size_t i = 0; i < mine.size(); ++i) {
      mine[i].mutable_grad() = theirs[i].grad();
      theirs[i].mutable_grad() = torch::Tensor();
    }
    step(steps_ - done->step_at_forward);
    for (auto& p : mine)
      p.mutable_grad() = torch::Tensor();
    spare_stashes_.push_back(std::move(done->stash));
    if (!stage_->is_first())
      r.input_gradient = x.grad().detach().contiguous();
    return r;
  }
  if (done->step_at_forward != steps_) {
    // Parameters changed in place since this batch's forward pass (several
    // batches in flight): its graph is stale; run it again with the current
    // parameters.
    x = prepare_input(x);
    out = stage_->forward(x);
  }
  const uint64_t delay = steps_ - done->step_at_forward;
  optimizer_->zero_grad();
  out.backward(grad_output.detach());
  step(delay);
  if (!stage_->is_first())
    r.input_gradient = x.grad().detach().contiguous();
  return r;
}

stage_trainer::loss_result stage_trainer::loss_step(uint64_t batch, const torch::Tensor& input,
                                                    const torch::Tensor& labels) {
  if (!stage_->is_last())
    throw std::logic_error("stage_trainer::loss_step: only the last stage holds the loss");
  check_input(batch, input, labels, "loss step");
  auto x = prepare_input(input);
  optimizer_->zero_grad();
  auto logits = stage_->forward(x);
  auto loss = torch::nn::functional::cross_entropy(logits, labels);
  loss.backward();
  step();
  loss_result r;
  r.loss = loss.item<double>();
  r.correct = logits.detach().argmax(1).eq(labels).sum().item<int64_t>();
  r.samples = labels.size(0);
  if (!stage_->is_first())
    r.input_gradient = x.grad().detach().contiguous();
  return r;
}

torch::Tensor stage_trainer::infer(const torch::Tensor& input) {
  const auto expected = stage_->input_shape();
  if (!input.defined() || input.dim() != static_cast<int64_t>(expected.size()) + 1 ||
      input.sizes().slice(1).vec() != expected)
    throw stage_error("stage_trainer::infer: input of shape " + shape_string(input) +
                      ", expected [B, " + shape_string(expected).substr(1));
  evaluation_scope scope(*stage_);
  return stage_->forward(input).contiguous();
}

// --- checkpoints ---------------------------------------------------------------

namespace {

const char* const checkpoint_kind = "edgegossip split stage 1";

std::string describe(const std::string& model, int64_t first, int64_t last, const std::string& mode,
                     bool sg) {
  return model + " layers " + std::to_string(first) + ".." + std::to_string(last) + ", " + mode +
         (sg ? " with a synthetic-gradient module" : "");
}

// A checkpoint is this magic, the CRC-32 of the rest (4 bytes, little
// endian), then the torch archive; the archive's zip container does not
// check its entries, so a flipped bit would otherwise load.
const std::string checkpoint_magic = "EGSTAGE1";

uint32_t checksum(const char* data, size_t n) {
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), static_cast<uInt>(n)));
}

std::string frame(const std::string& archive) {
  const uint32_t crc = checksum(archive.data(), archive.size());
  std::string out = checkpoint_magic;
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return out + archive;
}

std::string unframe(const std::string& bytes) {
  const size_t header = checkpoint_magic.size() + 4;
  if (bytes.size() < header || bytes.compare(0, checkpoint_magic.size(), checkpoint_magic) != 0)
    throw stage_error("not a stage checkpoint");
  uint32_t crc = 0;
  for (int i = 0; i < 4; ++i)
    crc |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[checkpoint_magic.size() + i]))
           << (8 * i);
  if (checksum(bytes.data() + header, bytes.size() - header) != crc)
    throw stage_error("checksum mismatch (a corrupt or truncated checkpoint)");
  return bytes.substr(header);
}

template <typename T>
T read_value(torch::serialize::InputArchive& a, const char* key) {
  c10::IValue v;
  if (!a.try_read(key, v))
    throw stage_error(std::string("no '") + key + "'");
  return v.to<T>();
}

} // namespace

size_t stage_trainer::forget_before(uint64_t batch) {
  size_t dropped = 0;
  for (auto it = pending_.begin(); it != pending_.end() && it->first < batch; ++dropped)
    it = pending_.erase(it);
  return dropped;
}

std::string stage_trainer::save() {
  torch::serialize::OutputArchive root;
  root.write("kind", c10::IValue(std::string(checkpoint_kind)));
  root.write("model", c10::IValue(stage_->model_name()));
  root.write("first", c10::IValue(stage_->first_layer()));
  root.write("last", c10::IValue(stage_->last_layer()));
  root.write("mode", c10::IValue(to_string(opt_.mode)));
  root.write("has_sg", c10::IValue(sg_ != nullptr));
  // The learning rates as they are now (a rollback slows them; torch's
  // optimizer archives keep their state, not their options).
  root.write("lr", c10::IValue(learning_rate()));
  // The steps so far: the warm-up (stage_options::lr_warmup) and the
  // delays it scales by go on where they were.
  root.write("steps", c10::IValue(static_cast<int64_t>(steps_)));
  if (sg_)
    root.write("sg_lr", c10::IValue(static_cast<const torch::optim::AdamOptions&>(
                                      sg_->optimizer().param_groups().front().options()).lr()));
  torch::serialize::OutputArchive params, sgd;
  stage_->save(params);
  optimizer_->save(sgd);
  root.write("stage", params);
  root.write("stage_optimizer", sgd);
  if (sg_) {
    torch::serialize::OutputArchive sg, adam;
    sg_->module().save(sg);
    sg_->optimizer().save(adam);
    root.write("sg_shape", c10::IValue(sg_->shape()));
    root.write("sg", sg);
    root.write("sg_optimizer", adam);
  }
  std::ostringstream out;
  root.save_to(out);
  return frame(out.str());
}

void stage_trainer::load(const std::string& bytes) {
  const std::string mine = describe(stage_->model_name(), stage_->first_layer(),
                                    stage_->last_layer(), to_string(opt_.mode), sg_ != nullptr);
  // Everything is loaded into a fresh copy of this stage first: a blob that
  // fails anywhere changes nothing here.
  std::string archive;
  uint64_t steps = 0;  // the checkpoint's; one written before they were kept starts at 0
  auto apply = [&](stage_module& stage, torch::optim::SGD& sgd, synthetic_gradient* sg) {
    torch::serialize::InputArchive root;
    std::istringstream in(archive);
    root.load_from(in);
    if (read_value<std::string>(root, "kind") != checkpoint_kind)
      throw stage_error("not a stage checkpoint");
    const auto model = read_value<std::string>(root, "model");
    const auto first = read_value<int64_t>(root, "first");
    const auto last = read_value<int64_t>(root, "last");
    const auto mode = read_value<std::string>(root, "mode");
    const auto has_sg = read_value<bool>(root, "has_sg");
    const std::string theirs = describe(model, first, last, mode, has_sg);
    if (theirs != mine)
      throw stage_error("the checkpoint is of " + theirs + ", this stage is " + mine);
    torch::serialize::InputArchive params, opt;
    root.read("stage", params);
    stage.load(params);
    root.read("stage_optimizer", opt);
    // torch's load keeps the state of parameters the archive has none for
    // (a momentum buffer from after the checkpoint): what comes back must
    // be the checkpoint's alone.
    sgd.state().clear();
    sgd.load(opt);
    c10::IValue lr;
    if (root.try_read("lr", lr))
      for (auto& group : sgd.param_groups())
        static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr.toDouble());
    c10::IValue count;
    steps = root.try_read("steps", count) && count.isInt() && count.toInt() > 0
              ? static_cast<uint64_t>(count.toInt())
              : 0;
    if (sg) {
      if (read_value<std::vector<int64_t>>(root, "sg_shape") != sg->shape())
        throw stage_error("the checkpoint's synthetic-gradient module has another shape");
      torch::serialize::InputArchive sg_params, adam;
      root.read("sg", sg_params);
      sg->module().load(sg_params);
      root.read("sg_optimizer", adam);
      sg->optimizer().state().clear();
      sg->optimizer().load(adam);
      c10::IValue sg_lr;
      if (root.try_read("sg_lr", sg_lr))
        for (auto& group : sg->optimizer().param_groups())
          static_cast<torch::optim::AdamOptions&>(group.options()).lr(sg_lr.toDouble());
    }
  };
  auto fail = [&](const std::string& why) {
    return stage_error("cannot load the stage checkpoint into " + mine + ": " + why);
  };
  try {
    archive = unframe(bytes);
    auto trial = std::make_shared<stage_module>(stage_->model_name(), stage_->first_layer(),
                                                stage_->last_layer(), stage_->shape());
    torch::optim::SGD trial_sgd(trial->parameters(),
                                torch::optim::SGDOptions(opt_.sgd.lr).momentum(opt_.sgd.momentum));
    std::unique_ptr<synthetic_gradient> trial_sg;
    if (sg_)
      trial_sg = std::make_unique<synthetic_gradient>(sg_->shape(), sg_->options(), sg_seed_);
    apply(*trial, trial_sgd, trial_sg.get());
  } catch (const stage_error& e) {
    throw fail(e.what());
  } catch (const c10::Error& e) {
    throw fail(e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw fail(e.what());
  }
  pending_.clear();
  apply(*stage_, *optimizer_, sg_.get());
  steps_ = steps;
}

std::vector<std::shared_ptr<stage_trainer>> make_pipeline(const std::string& model,
                                                          const std::vector<int64_t>& cuts,
                                                          uint64_t seed,
                                                          const stage_options& opt,
                                                          const model_shape& shape) {
  std::vector<std::shared_ptr<stage_trainer>> out;
  uint64_t k = 0;
  for (const auto& [first, last] : stage_ranges(model, cuts))
    out.push_back(std::make_shared<stage_trainer>(make_stage(model, first, last, seed, shape), opt,
                                                  seed + 1 + k++));
  return out;
}

// --- cuts from the machines' speeds ---------------------------------------------

stage_passes passes_below(stage_mode mode) {
  switch (mode) {
    case stage_mode::delayed: return {2, 1};
    case stage_mode::corrected: return {2, 2};
    case stage_mode::backprop:
    case stage_mode::synthetic:
    case stage_mode::stashed:
    case stage_mode::predicted: break;
  }
  return {1, 1};
}

std::vector<layer_cost> measure_layer_costs(const std::string& model, const model_shape& shape,
                                            int64_t batch, int repeats) {
  if (batch < 1 || repeats < 1)
    throw argument_error("measure_layer_costs: batch and repeats must be positive");
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::duration d) { return std::chrono::duration<double>(d).count(); };
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  // Every layer is timed once a round, round after round, so that a slow
  // start (caches, the allocator, the clock speed) spreads over every
  // layer's first, unmeasured round instead of falling on the first layers.
  const auto layers = layer_count(model);
  std::vector<std::shared_ptr<stage_module>> stages;
  std::vector<torch::Tensor> inputs;
  for (int64_t l = 0; l < layers; ++l) {
    stages.push_back(make_stage(model, l, l, 1, shape));
    auto in = l == 0 ? shape.input.dims() : activation_shape(model, l - 1, shape);
    in.insert(in.begin(), batch);
    inputs.push_back(torch::randn(in));
  }
  std::vector<std::vector<double>> forward(static_cast<size_t>(layers)),
    backward(static_cast<size_t>(layers));
  for (int r = 0; r <= repeats; ++r)
    for (size_t l = 0; l < stages.size(); ++l) {
      auto input = inputs[l].detach().requires_grad_(l > 0);
      stages[l]->zero_grad();
      const auto t0 = clock::now();
      auto y = stages[l]->forward(input);
      const auto t1 = clock::now();
      y.backward(torch::ones_like(y));
      const auto t2 = clock::now();
      if (r > 0) {
        forward[l].push_back(seconds(t1 - t0));
        backward[l].push_back(seconds(t2 - t1));
      }
    }
  std::vector<layer_cost> out;
  for (size_t l = 0; l < stages.size(); ++l)
    out.push_back({median(forward[l]), median(backward[l])});
  return out;
}

stage_costs measure_stage_costs(const std::string& model, const model_shape& shape, int64_t batch,
                                const stage_options& opt, int repeats) {
  if (batch < 1 || repeats < 1)
    throw argument_error("measure_stage_costs: batch and repeats must be positive");
  using clock = std::chrono::steady_clock;
  const auto layers = layer_count(model);
  // Every run of layers as a stage of its own, all kept (their parameters,
  // not their batches: each visit drains what it put in flight).
  struct run {
    int64_t first, last;
    std::unique_ptr<stage_trainer> trainer;
    torch::Tensor input, gradient;
    uint64_t next = 0;  // the next batch id
    std::vector<double> seconds;
  };
  auto options = opt;
  options.max_in_flight = std::max<int64_t>(options.max_in_flight, 2);
  const auto labels = torch::randint(shape.classes, {batch}, torch::kInt64);
  std::vector<run> runs;
  for (int64_t first = 0; first < layers; ++first)
    for (int64_t last = first; last < layers; ++last) {
      run r{first, last,
            std::make_unique<stage_trainer>(make_stage(model, first, last, 1, shape), options, 2),
            {}, {}, 0, {}};
      auto in = first == 0 ? shape.input.dims() : activation_shape(model, first - 1, shape);
      in.insert(in.begin(), batch);
      r.input = torch::randn(in);
      runs.push_back(std::move(r));
    }
  // One batch of a run's work: the last layer's run takes a loss step; the
  // others a forward pass and, in the pipelined modes, the backward pass of
  // the batch before it (so a stashed or predicted copy is in flight), in
  // backprop the batch's own. Small gradients: the weights barely move.
  auto work = [&](run& r) {
    auto& t = *r.trainer;
    const auto b = r.next++;
    if (r.last + 1 == layers) {
      t.loss_step(b, r.input, labels);
      return;
    }
    auto out = t.forward(b, r.input, labels);
    if (!r.gradient.defined())
      r.gradient = 1e-4 * torch::randn_like(out.output);
    if (!pipelined(opt.mode))
      t.backward(b, r.gradient);
    else if (t.in_flight() > 1)
      t.backward(b - 1, r.gradient);
  };
  auto drain = [&](run& r) {
    if (r.last + 1 < layers && r.trainer->in_flight() > 0)
      r.trainer->backward(r.next - 1, r.gradient);
  };
  // Rounds over every run, one timed batch each, the order reversed every
  // other round: a slow spell of the machine spreads over many runs'
  // samples instead of falling on a few runs' all.
  for (int round = 0; round <= repeats; ++round)
    for (size_t i = 0; i < runs.size(); ++i) {
      auto& r = runs[round % 2 ? runs.size() - 1 - i : i];
      work(r);  // untimed: fills the pipeline (and warms up in round 0)
      if (round > 0) {
        const auto t0 = clock::now();
        work(r);
        r.seconds.push_back(std::chrono::duration<double>(clock::now() - t0).count());
      }
      drain(r);
    }
  stage_costs costs(layers);
  for (auto& r : runs) {
    std::nth_element(r.seconds.begin(), r.seconds.begin() + r.seconds.size() / 2, r.seconds.end());
    costs.set(r.first, r.last, r.seconds[r.seconds.size() / 2]);
  }
  return costs;
}

// --- the in-process pipeline ------------------------------------------------------

namespace {

void check_stages(const std::vector<std::shared_ptr<stage_trainer>>& stages) {
  if (stages.empty())
    throw mismatch_error("pipeline: no stages");
  for (size_t k = 0; k < stages.size(); ++k) {
    if (!stages[k])
      throw mismatch_error("pipeline: stage " + std::to_string(k) + " is null");
    if (k > 0 && stages[k]->stage().input_shape() != stages[k - 1]->stage().output_shape())
      throw mismatch_error("pipeline: stage " + std::to_string(k) + " takes " +
                                  shape_string(stages[k]->stage().input_shape()) + ", stage " +
                                  std::to_string(k - 1) + " gives " +
                                  shape_string(stages[k - 1]->stage().output_shape()));
  }
  if (!stages.front()->is_first())
    throw mismatch_error("pipeline: the first stage does not start at layer 0");
  if (!stages.back()->is_last())
    throw mismatch_error("pipeline: the last stage does not end with the logits");
}

} // namespace

pipeline_result train_pipeline(const std::vector<std::shared_ptr<stage_trainer>>& stages,
                               const dataset& train, const epoch_plan& plan, int64_t delay) {
  check_stages(stages);
  if (delay < 1)
    throw argument_error("train_pipeline: delay must be at least 1");
  const size_t n = stages.size();
  for (size_t k = 0; k + 1 < n; ++k)
    if (stages[k]->options().max_in_flight < delay)
      throw mismatch_error("train_pipeline: delay " + std::to_string(delay) +
                                  " exceeds stage " + std::to_string(k) + "'s max_in_flight " +
                                  std::to_string(stages[k]->options().max_in_flight));
  const auto start = std::chrono::steady_clock::now();

  // The down-messages of a batch not yet delivered: backprop, delayed and
  // corrected modes, only the last stage's input gradient (each stage's
  // backward gives the next); synthetic mode, down[k] for stage k, sent by
  // stage k + 1 at its forward.
  struct in_transit {
    uint64_t batch;
    std::vector<torch::Tensor> down;
  };
  std::deque<in_transit> transit;
  pipeline_result r;
  double sg_loss = 0;
  int64_t sg_count = 0;
  int64_t correct = 0;

  auto deliver = [&](in_transit& t) {
    if (n == 1)
      return;
    if (stages[0]->mode() != stage_mode::synthetic) {
      torch::Tensor g = t.down.back();
      for (size_t k = n - 1; k-- > 0;) {
        auto b = stages[k]->backward(t.batch, g);
        if (b.synthetic_loss) {
          sg_loss += *b.synthetic_loss;
          ++sg_count;
        }
        g = b.input_gradient;
      }
      return;
    }
    for (size_t k = 0; k + 1 < n; ++k) {
      auto b = stages[k]->backward(t.batch, t.down[k]);
      if (b.synthetic_loss) {
        sg_loss += *b.synthetic_loss;
        ++sg_count;
      }
    }
  };

  uint64_t id = 0;
  for (const auto& indices : plan.batches) {
    if (indices.empty())
      continue;
    const uint64_t batch = id++;
    auto index = torch::tensor(indices, torch::kInt64);
    auto x = train.batch(index);
    auto y = train.labels.index_select(0, index);
    in_transit t{batch, std::vector<torch::Tensor>(n - 1)};
    for (size_t k = 0; k + 1 < n; ++k) {
      auto f = stages[k]->forward(batch, x, y);
      if (k > 0 && f.input_gradient.defined())
        t.down[k - 1] = f.input_gradient;
      x = f.output;
    }
    auto l = stages.back()->loss_step(batch, x, y);
    if (n > 1)
      t.down[n - 2] = l.input_gradient;
    r.loss += l.loss * static_cast<double>(l.samples);
    correct += l.correct;
    r.samples += l.samples;
    ++r.batches;
    transit.push_back(std::move(t));
    while (static_cast<int64_t>(transit.size()) >= delay) {
      deliver(transit.front());
      transit.pop_front();
    }
  }
  while (!transit.empty()) {
    deliver(transit.front());
    transit.pop_front();
  }

  if (r.samples > 0) {
    r.loss /= static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  if (sg_count > 0)
    r.synthetic_loss = sg_loss / static_cast<double>(sg_count);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

evaluation evaluate(const std::vector<std::shared_ptr<stage_trainer>>& stages, const dataset& data,
                    int64_t batch) {
  check_stages(stages);
  return evaluate_logits(
    [&](const torch::Tensor& images) {
      auto x = images;
      for (const auto& s : stages)
        x = s->infer(x);
      return x;
    },
    data, batch);
}

} // namespace eg::learning
