// The synthetic-gradient module (DNI): a small network from an activation
// (and, with cDNI, the label) to the gradient of the loss w.r.t. it.
#include "algorithms/split/split.hpp"
#include "common/error.hpp"

#include "models/shape_text.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>

namespace eg::learning {

using shape_text::shape_string;

struct synthetic_gradient::net : torch::nn::Module {
  bool convolutional = false;
  bool conditioned = false;
  bool normalize_input = true;
  int64_t classes = 0;
  std::vector<int64_t> shape;
  // MLP on [B, D]: D -> hidden (x layers) -> D; convolutional on
  // [B, C, H, W]: conv_layers 5x5 same-padded convolutions C -> C.
  std::vector<torch::nn::Linear> fc;
  std::vector<torch::nn::Conv2d> conv;
  torch::nn::Linear label_map{nullptr};  // cDNI: one-hot label -> first layer's width
  // The running RMS of the targets (0 until the first non-zero one).
  torch::Tensor scale;
  // Regression steps so far (the warm-up ramp).
  torch::Tensor trained;
  // Exponential averages of the squared error and the squared target (the gate).
  torch::Tensor error_sq;
  torch::Tensor target_sq;

  net(std::vector<int64_t> s, const synthetic_gradient_options& opt) : shape(std::move(s)) {
    conditioned = opt.conditioned;
    normalize_input = opt.normalize_input;
    convolutional = shape.size() == 3 && opt.conv_layers > 0;
    int64_t first_width = 0;
    if (convolutional) {
      const int64_t c = shape[0];
      for (int64_t i = 0; i < opt.conv_layers; ++i)
        conv.push_back(register_module("conv" + std::to_string(i + 1),
                                       torch::nn::Conv2d(torch::nn::Conv2dOptions(c, c, 5).padding(2))));
      first_width = c;
    } else {
      int64_t d = 1;  // [C, H, W] with conv_layers 0: flattened
      for (int64_t x : shape)
        d *= x;
      int64_t in = d;
      for (int64_t i = 0; i < opt.layers; ++i) {
        fc.push_back(register_module("fc" + std::to_string(i + 1), torch::nn::Linear(in, opt.hidden)));
        in = opt.hidden;
      }
      fc.push_back(register_module("fc" + std::to_string(opt.layers + 1), torch::nn::Linear(in, d)));
      first_width = opt.layers > 0 ? opt.hidden : d;
    }
    classes = opt.classes;
    if (conditioned && classes < 2)
      throw argument_error("synthetic gradients conditioned on the label need the "
                                  "data's class count");
    if (conditioned)
      label_map = register_module(
          "label", torch::nn::Linear(torch::nn::LinearOptions(classes, first_width).bias(false)));
    scale = register_buffer("scale", torch::zeros({}));
    trained = register_buffer("trained", torch::zeros({}, torch::kInt64));
    error_sq = register_buffer("error_sq", torch::zeros({}, torch::kFloat64));
    target_sq = register_buffer("target_sq", torch::zeros({}, torch::kFloat64));
    // The last layer starts at zero: the first synthetic gradients are 0,
    // so a stage does not move until its module has learnt something.
    torch::NoGradGuard no_grad;
    auto& last_w = convolutional ? conv.back()->weight : fc.back()->weight;
    auto& last_b = convolutional ? conv.back()->bias : fc.back()->bias;
    last_w.zero_();
    last_b.zero_();
    if (conditioned && !convolutional && opt.layers == 0)
      label_map->weight.zero_();  // linear cDNI: the label term is the output's
  }

  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& labels) {
    // Optionally the input divided by its RMS over the batch.
    auto h = normalize_input ? input / input.pow(2).mean().sqrt().clamp_min(1e-12) : input;
    torch::Tensor label_term;
    if (conditioned)
      label_term = label_map->forward(torch::one_hot(labels, classes).to(h.scalar_type()));
    if (convolutional) {
      auto x = conv[0]->forward(h);
      if (conditioned)
        x = x + label_term.unsqueeze(-1).unsqueeze(-1);  // per-channel bias over H x W
      for (size_t i = 1; i < conv.size(); ++i)
        x = conv[i]->forward(torch::relu(x));
      return x;
    }
    auto x = fc[0]->forward(h.flatten(1));
    if (conditioned)
      x = x + label_term;
    for (size_t i = 1; i < fc.size(); ++i)
      x = fc[i]->forward(torch::relu(x));
    return x.view(h.sizes());
  }
};

synthetic_gradient::synthetic_gradient(std::vector<int64_t> shape, synthetic_gradient_options opt,
                                       uint64_t seed)
    : shape_(std::move(shape)), opt_(opt) {
  if (shape_.size() != 1 && shape_.size() != 3)
    throw mismatch_error("synthetic_gradient: activation shape " + shape_string(shape_) +
                                " is neither [D] nor [C, H, W]");
  for (int64_t d : shape_)
    if (d <= 0)
      throw mismatch_error("synthetic_gradient: activation shape " + shape_string(shape_) +
                                  " has an empty dimension");
  if ((shape_.size() == 1 || opt_.conv_layers == 0) && (opt_.layers < 0 || opt_.layers > 2))
    throw mismatch_error("synthetic_gradient: layers must be 0, 1 or 2, not " +
                                std::to_string(opt_.layers));
  if (shape_.size() == 3 && opt_.conv_layers != 0 && (opt_.conv_layers < 2 || opt_.conv_layers > 3))
    throw mismatch_error("synthetic_gradient: conv_layers must be 0 (an MLP), 2 or 3, not " +
                                std::to_string(opt_.conv_layers));
  if (!(opt_.gate_rate >= 0 && opt_.gate_rate <= 1))
    throw argument_error("synthetic_gradient: gate_rate must be in [0, 1], not " +
                                std::to_string(opt_.gate_rate));
  if (opt_.warmup < 0)
    throw argument_error("synthetic_gradient: warmup must be 0 (off) or positive, not " +
                                std::to_string(opt_.warmup));
  if ((shape_.size() == 1 || opt_.conv_layers == 0) && opt_.hidden <= 0)
    throw argument_error("synthetic_gradient: hidden must be positive, not " +
                                std::to_string(opt_.hidden));
  if (!(opt_.clip >= 0))
    throw argument_error("synthetic_gradient: clip must be 0 (off) or positive, not " +
                                std::to_string(opt_.clip));
  if (!(opt_.lr > 0))
    throw argument_error("synthetic_gradient: lr must be positive, not " +
                                std::to_string(opt_.lr));
  {
    static std::mutex init_mutex;
    std::lock_guard<std::mutex> lock(init_mutex);
    torch::manual_seed(seed);
    net_ = std::make_shared<net>(shape_, opt_);
  }
  optimizer_ = std::make_unique<torch::optim::Adam>(net_->parameters(),
                                                    torch::optim::AdamOptions(opt_.lr));
}

synthetic_gradient::~synthetic_gradient() = default;

torch::nn::Module& synthetic_gradient::module() { return *net_; }

torch::optim::Optimizer& synthetic_gradient::optimizer() { return *optimizer_; }

void synthetic_gradient::check(const torch::Tensor& h, const torch::Tensor& labels,
                               const char* what) const {
  if (!h.defined() || h.dim() != static_cast<int64_t>(shape_.size()) + 1 ||
      h.sizes().slice(1).vec() != shape_)
    throw stage_error(std::string("synthetic_gradient::") + what + ": activation of shape " +
                      shape_string(h) + ", expected [B, " +
                      shape_string(shape_).substr(1));
  if (!opt_.conditioned)
    return;
  if (!labels.defined() || labels.dim() != 1 || labels.size(0) != h.size(0) ||
      labels.scalar_type() != torch::kInt64)
    throw stage_error(std::string("synthetic_gradient::") + what + ": cDNI needs labels [" +
                      std::to_string(h.size(0)) + "] int64, got " + shape_string(labels));
}

namespace {

// Weight of a new batch's target RMS in the running scale.
constexpr double scale_rate = 0.01;

} // namespace

// What the network's output is multiplied by to give dL/dh for a batch of b.
double synthetic_gradient::unit(int64_t b) const {
  switch (opt_.scaling) {
  case sg_scaling::batch:
    return 1.0 / static_cast<double>(b);
  case sg_scaling::running: {
    const double s = net_->scale.item<double>();
    return s > 0 ? s : 1.0;
  }
  case sg_scaling::none:
    break;
  }
  return 1.0;
}

torch::Tensor synthetic_gradient::predict(const torch::Tensor& h, const torch::Tensor& labels) {
  check(h, labels, "predict");
  torch::NoGradGuard no_grad;
  double factor = unit(h.size(0));
  if (opt_.warmup > 0)
    factor *= std::min(1.0, static_cast<double>(net_->trained.item<int64_t>()) /
                                static_cast<double>(opt_.warmup));
  if (opt_.gate_rate > 0)
    factor *= gate();
  auto g = net_->forward(h.detach(), labels) * factor;
  const double target_rms = net_->scale.item<double>();
  if (opt_.clip > 0 && target_rms > 0) {
    // The network extrapolates linearly to activations it has not seen,
    // and a stage that follows it moves its activations further out: cap
    // the prediction at clip times the running RMS of the true targets.
    const double rms = g.pow(2).mean().sqrt().item<double>();
    const double cap = opt_.clip * target_rms;
    if (!(rms <= cap))
      g = std::isfinite(rms) ? g * (cap / rms) : torch::zeros_like(g);
  }
  return g.contiguous();
}

double synthetic_gradient::train(const torch::Tensor& h, const torch::Tensor& labels,
                                 const torch::Tensor& target) {
  check(h, labels, "train");
  if (!target.defined() || target.sizes() != h.sizes())
    throw stage_error("synthetic_gradient::train: target of shape " + shape_string(target) +
                      ", expected " + shape_string(h) + " (the activation's)");
  {
    // The running RMS of the targets: the clip's reference, and the unit
    // of sg_scaling::running.
    torch::NoGradGuard no_grad;
    const double rms = target.detach().pow(2).mean().sqrt().item<double>();
    if (std::isfinite(rms) && rms > 0) {
      const double s = net_->scale.item<double>();
      net_->scale.fill_(s > 0 ? (1 - scale_rate) * s + scale_rate * rms : rms);
    }
    net_->trained.add_(1);
  }
  const double u = unit(h.size(0));
  optimizer_->zero_grad();
  auto loss = torch::mse_loss(net_->forward(h.detach(), labels), target.detach() / u);
  loss.backward();
  optimizer_->step();
  const double error = loss.item<double>() * u * u;
  if (opt_.gate_rate > 0) {
    // Both averages start from the first step's values.
    torch::NoGradGuard no_grad;
    const double t2 = target.detach().to(torch::kFloat64).pow(2).mean().item<double>();
    const bool first = net_->trained.item<int64_t>() == 1;
    const double r = first ? 1.0 : opt_.gate_rate;
    if (std::isfinite(error) && std::isfinite(t2)) {
      net_->error_sq.mul_(1 - r).add_(r * error);
      net_->target_sq.mul_(1 - r).add_(r * t2);
    }
  }
  return error;
}

double synthetic_gradient::gate() const {
  const double t2 = net_->target_sq.item<double>();
  if (!(t2 > 0))
    return 0;
  return std::clamp(1 - net_->error_sq.item<double>() / t2, 0.0, 1.0);
}

} // namespace eg::learning
