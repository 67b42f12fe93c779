// The model zoo: AlexNet, SqueezeNet 1.1 and MobileNetV2, adapted to
// Fashion-MNIST's 28 x 28 grey images the way their CIFAR versions adapt to
// 32 x 32 (a stride-1 or stride-2 3 x 3 first layer instead of ImageNet's
// large strided one, 2 x 2 poolings), with reduced widths so that they train
// on a few CPU cores. docs/MODELS.md gives each change and the parameter
// counts. Each model also writes its forward pass as TorchScript source over
// its parameter names (classifier::script()), for the exported model.
//
// No BatchNorm: platforms gossip and average parameters, not buffers, so
// running statistics would stay each platform's own and the averaged model
// would be evaluated with none. MobileNetV2 normalises with GroupNorm
// (8 groups) and SqueezeNet with GroupNorm (4 groups), whose scale and
// shift are parameters.

#include "models/zoo.hpp"

#include "models/pooling.hpp"
#include "models/variant_compat.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace eg::learning {

namespace zoo {

namespace {

std::string ints(torch::ExpandingArray<2> a) {
  return "[" + std::to_string(a->at(0)) + ", " + std::to_string(a->at(1)) + "]";
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos)
    s += ".0";
  return s;
}

} // namespace

std::string conv(const std::string& x, const std::string& path, const torch::nn::Conv2d& m) {
  const auto& o = m->options;
  const auto* pad = compat::get_if<torch::ExpandingArray<2>>(&o.padding());
  if (!pad || o.transposed() || !compat::get_if<torch::enumtype::kZeros>(&o.padding_mode()))
    throw std::logic_error("zoo::conv: " + path + " is not a plain zero-padded convolution");
  return "torch.conv2d(" + x + ", self." + path + ".weight, " +
         (o.bias() ? "self." + path + ".bias" : std::string("None")) + ", " + ints(o.stride()) +
         ", " + ints(*pad) + ", " + ints(o.dilation()) + ", " + std::to_string(o.groups()) + ")";
}

std::string linear(const std::string& x, const std::string& path, const torch::nn::Linear& m) {
  return "torch.linear(" + x + ", self." + path + ".weight, " +
         (m->options.bias() ? "self." + path + ".bias" : std::string("None")) + ")";
}

std::string group_norm(const std::string& x, const std::string& path,
                       const torch::nn::GroupNorm& m) {
  const auto& o = m->options;
  const std::string w = o.affine() ? "self." + path + ".weight" : "None";
  const std::string b = o.affine() ? "self." + path + ".bias" : "None";
  return "torch.group_norm(" + x + ", " + std::to_string(o.num_groups()) + ", " +
         w + ", " + b + ", " + number(o.eps()) + ")";
}

std::string max_pool_2x2(const std::string& x) {
  return "torch.max_pool2d(" + x + ", [2, 2], [2, 2], [0, 0], [1, 1], False)";
}

namespace {

using torch::Tensor;
namespace nn = torch::nn;

/// Dropout drawing its masks from the model's own generator (seeded when
/// the model is built): training is then the same for equal seeds and
/// batches, whatever other platforms in the process draw. Identity in eval
/// mode, so the exported script leaves it out.
class seeded_dropout {
public:
  explicit seeded_dropout(double p)
      : p_(p),
        generator_(at::make_generator<at::CPUGeneratorImpl>(
          static_cast<uint64_t>(torch::randint(std::numeric_limits<int64_t>::max(), {1},
                                               torch::kInt64).item<int64_t>()))) {}

  Tensor operator()(const Tensor& x, bool training) {
    if (!training || p_ == 0)
      return x;
    if (!x.device().is_cpu())
      return torch::dropout(x, p_, true);
    auto keep = torch::empty_like(x).bernoulli_(1 - p_, generator_);
    return x * keep.div_(1 - p_);
  }

private:
  double p_;
  at::Generator generator_;
};

// --- AlexNet -------------------------------------------------------------------

// The CIFAR AlexNet (3 x 3 convolutions, the first with stride 2, 2 x 2
// max pooling after the first, second and fifth; dropout and two hidden
// fully connected layers) at half its convolution widths (32, 96, 192, 128,
// 128 against 64, 192, 384, 256, 256) and hidden layers of 512 (against
// 4096). 28 -> 14 (stride) -> 7 -> 3 -> 1 (poolings).
/// The side after AlexNet's stride-2 first convolution and three 2 x 2
/// poolings (28 -> 14 -> 7 -> 3 -> 1; 32 -> 16 -> 8 -> 4 -> 2).
int64_t alexnet_side(int64_t side) { return (side + 1) / 2 / 2 / 2 / 2; }

class alexnet_model : public classifier {
public:
  explicit alexnet_model(const model_shape& s)
      : conv1(nn::Conv2dOptions(s.input.channels, 32, 3).stride(2).padding(1)),
        conv2(nn::Conv2dOptions(32, 96, 3).padding(1)),
        conv3(nn::Conv2dOptions(96, 192, 3).padding(1)),
        conv4(nn::Conv2dOptions(192, 128, 3).padding(1)),
        conv5(nn::Conv2dOptions(128, 128, 3).padding(1)),
        fc1(128 * alexnet_side(s.input.height) * alexnet_side(s.input.width), 512),
        fc2(512, 512),
        fc3(512, s.classes),
        drop1(0.5),
        drop2(0.5) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv3", conv3);
    register_module("conv4", conv4);
    register_module("conv5", conv5);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    // He initialisation of the ReLU layers, biases 0 (torch's default,
    // uniform with a third of the variance, left this deep ReLU stack
    // without batch normalisation barely moving in its first iterations).
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      if (p.key().rfind("fc3.", 0) == 0)
        continue;
      if (p.value().dim() > 1)
        torch::nn::init::kaiming_uniform_(p.value(), 0.0);
      else
        torch::nn::init::zeros_(p.value());
    }
  }

  Tensor forward(Tensor x) override {
    x = learning::max_pool_2x2(torch::relu(conv1->forward(x)));  // 14 -> 7
    x = learning::max_pool_2x2(torch::relu(conv2->forward(x)));  // 7 -> 3 (torch's)
    x = torch::relu(conv3->forward(x));
    x = torch::relu(conv4->forward(x));
    x = learning::max_pool_2x2(torch::relu(conv5->forward(x)));  // 3 -> 1 (torch's)
    x = x.flatten(1);
    x = torch::relu(fc1->forward(drop1(x, is_training())));
    x = torch::relu(fc2->forward(drop2(x, is_training())));
    return fc3->forward(x);
  }

  std::string script() const override {
    std::ostringstream s;
    s << "def logits(self, x):\n"
      << "    x = " << max_pool_2x2("torch.relu(" + conv("x", "conv1", conv1) + ")") << "\n"
      << "    x = " << max_pool_2x2("torch.relu(" + conv("x", "conv2", conv2) + ")") << "\n"
      << "    x = torch.relu(" << conv("x", "conv3", conv3) << ")\n"
      << "    x = torch.relu(" << conv("x", "conv4", conv4) << ")\n"
      << "    x = " << max_pool_2x2("torch.relu(" + conv("x", "conv5", conv5) + ")") << "\n"
      << "    x = x.flatten(1)\n"
      << "    x = torch.relu(" << linear("x", "fc1", fc1) << ")\n"
      << "    x = torch.relu(" << linear("x", "fc2", fc2) << ")\n"
      << "    return " << linear("x", "fc3", fc3) << "\n";
    return s.str();
  }

private:
  nn::Conv2d conv1, conv2, conv3, conv4, conv5;
  nn::Linear fc1, fc2, fc3;
  seeded_dropout drop1, drop2;
};

// --- SqueezeNet 1.1 --------------------------------------------------------------

/// GroupNorm of `channels` in `groups` groups (BatchNorm's place: see the top).
nn::GroupNorm norm(int64_t channels, int64_t groups) { return nn::GroupNorm(groups, channels); }

constexpr int64_t fire_groups = 4;

/// A fire module: a 1 x 1 squeeze, then 1 x 1 and 3 x 3 expands side by
/// side, each convolution followed by GroupNorm and ReLU (as the CIFAR
/// versions follow each by BatchNorm).
class fire_module : public nn::Module {
public:
  fire_module(int64_t in, int64_t squeeze_width, int64_t expand_width)
      : squeeze(nn::Conv2dOptions(in, squeeze_width, 1).bias(false)),
        squeeze_norm(norm(squeeze_width, fire_groups)),
        expand1(nn::Conv2dOptions(squeeze_width, expand_width, 1).bias(false)),
        expand1_norm(norm(expand_width, fire_groups)),
        expand3(nn::Conv2dOptions(squeeze_width, expand_width, 3).padding(1).bias(false)),
        expand3_norm(norm(expand_width, fire_groups)) {
    register_module("squeeze", squeeze);
    register_module("squeeze_norm", squeeze_norm);
    register_module("expand1", expand1);
    register_module("expand1_norm", expand1_norm);
    register_module("expand3", expand3);
    register_module("expand3_norm", expand3_norm);
  }

  Tensor forward(const Tensor& x) {
    auto s = torch::relu(squeeze_norm->forward(squeeze->forward(x)));
    return torch::cat({torch::relu(expand1_norm->forward(expand1->forward(s))),
                       torch::relu(expand3_norm->forward(expand3->forward(s)))},
                      1);
  }

  /// Lines computing `x = fire(x)`, the module being self.<path>.
  std::string script(const std::string& path) const {
    const auto unit = [&](const std::string& in, const std::string& name, const nn::Conv2d& c,
                          const nn::GroupNorm& n) {
      return "torch.relu(" + group_norm(conv(in, path + "." + name, c), path + "." + name + "_norm", n) +
             ")";
    };
    return "    s = " + unit("x", "squeeze", squeeze, squeeze_norm) + "\n" +
           "    x = torch.cat([" + unit("s", "expand1", expand1, expand1_norm) + ", " +
           unit("s", "expand3", expand3, expand3_norm) + "], 1)\n";
  }

  nn::Conv2d squeeze;
  nn::GroupNorm squeeze_norm;
  nn::Conv2d expand1;
  nn::GroupNorm expand1_norm;
  nn::Conv2d expand3;
  nn::GroupNorm expand3_norm;
};

// SqueezeNet 1.1 as its CIFAR versions adapt it: a 3 x 3 stride-1 first
// convolution (ImageNet: stride 2), 2 x 2 poolings (ImageNet: 3 x 3,
// stride 2), a normalisation after every convolution (GroupNorm, 4 groups,
// where they have BatchNorm; without one it did not train at lr 0.01) and
// no ReLU after the classifying convolution; at half the widths (32 first,
// fire modules squeezing to 8 .. 32 and expanding to 32 .. 128 each side,
// against 64, 16 .. 64, 64 .. 256). 28 -> 14 -> 7 -> 3 (poolings after the
// first convolution, fire3, fire5); then dropout 0.5, a 1 x 1 convolution
// to the 10 classes and global average pooling. Convolutions He-initialised
// (uniform) as torchvision's.
class squeezenet_model : public classifier {
public:
  explicit squeezenet_model(const model_shape& s)
      : conv1(nn::Conv2dOptions(s.input.channels, 32, 3).padding(1).bias(false)),
        conv1_norm(norm(32, fire_groups)),
        conv10(nn::Conv2dOptions(256, s.classes, 1)),
        drop(0.5) {
    register_module("conv1", conv1);
    register_module("conv1_norm", conv1_norm);
    const int64_t widths[][3] = {{32, 8, 32},   {64, 8, 32},    {64, 16, 64},   {128, 16, 64},
                                 {128, 24, 96}, {192, 24, 96},  {192, 32, 128}, {256, 32, 128}};
    for (int i = 0; i < 8; ++i)
      fires.push_back(register_module("fire" + std::to_string(i + 2),
                                      std::make_shared<fire_module>(widths[i][0], widths[i][1],
                                                                    widths[i][2])));
    register_module("conv10", conv10);
    for (auto& p : named_parameters()) {
      torch::NoGradGuard no_grad;
      if (p.value().dim() == 4)
        torch::nn::init::kaiming_uniform_(p.value(), 0.0);
      else if (p.key() == "conv10.bias")
        torch::nn::init::zeros_(p.value());
    }
  }

  Tensor forward(Tensor x) override {
    x = learning::max_pool_2x2(torch::relu(conv1_norm->forward(conv1->forward(x))));  // 28 -> 14
    for (size_t i = 0; i < fires.size(); ++i) {
      x = fires[i]->forward(x);
      if (i == 1 || i == 3)
        x = learning::max_pool_2x2(x);  // 14 -> 7, 7 -> 3 (torch's)
    }
    x = conv10->forward(drop(x, is_training()));
    return torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  }

  std::string script() const override {
    std::ostringstream s;
    s << "def logits(self, x):\n"
      << "    x = "
      << max_pool_2x2("torch.relu(" + group_norm(conv("x", "conv1", conv1), "conv1_norm", conv1_norm) + ")")
      << "\n";
    for (size_t i = 0; i < fires.size(); ++i) {
      s << fires[i]->script("fire" + std::to_string(i + 2));
      if (i == 1 || i == 3)
        s << "    x = " << max_pool_2x2("x") << "\n";
    }
    s << "    x = " << conv("x", "conv10", conv10) << "\n"
      << "    return torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)\n";
    return s.str();
  }

private:
  nn::Conv2d conv1;
  nn::GroupNorm conv1_norm;
  std::vector<std::shared_ptr<fire_module>> fires;
  nn::Conv2d conv10;
  seeded_dropout drop;
};

// --- MobileNetV2 -------------------------------------------------------------------

constexpr int64_t norm_groups = 8;

nn::GroupNorm norm(int64_t channels) { return norm(channels, norm_groups); }

/// An inverted residual block: 1 x 1 expansion (unless the factor is 1),
/// 3 x 3 depthwise convolution (the block's stride), 1 x 1 linear
/// projection; the input added back where shapes agree. Each convolution
/// is followed by GroupNorm, the first two by ReLU6.
class inverted_residual : public nn::Module {
public:
  inverted_residual(int64_t in, int64_t out, int64_t stride, int64_t expansion)
      : residual(stride == 1 && in == out), hidden(in * expansion) {
    if (expansion != 1) {
      expand = register_module("expand", nn::Conv2d(nn::Conv2dOptions(in, hidden, 1).bias(false)));
      expand_norm = register_module("expand_norm", norm(hidden));
    }
    dw = register_module("dw", nn::Conv2d(nn::Conv2dOptions(hidden, hidden, 3)
                                              .stride(stride)
                                              .padding(1)
                                              .groups(hidden)
                                              .bias(false)));
    dw_norm = register_module("dw_norm", norm(hidden));
    project = register_module("project", nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));
    project_norm = register_module("project_norm", norm(out));
  }

  Tensor forward(const Tensor& x) {
    Tensor h = x;
    if (!expand.is_empty())
      h = torch::hardtanh(expand_norm->forward(expand->forward(h)), 0, 6);
    h = torch::hardtanh(dw_norm->forward(dw->forward(h)), 0, 6);
    h = project_norm->forward(project->forward(h));
    return residual ? x + h : h;
  }

  /// Lines computing `x = block(x)`, the block being self.<path>.
  std::string script(const std::string& path) const {
    std::string s = "    h = x\n";
    if (!expand.is_empty())
      s += "    h = torch.hardtanh(" +
           group_norm(conv("h", path + ".expand", expand), path + ".expand_norm", expand_norm) +
           ", 0.0, 6.0)\n";
    s += "    h = torch.hardtanh(" +
         group_norm(conv("h", path + ".dw", dw), path + ".dw_norm", dw_norm) + ", 0.0, 6.0)\n";
    s += "    h = " + group_norm(conv("h", path + ".project", project), path + ".project_norm",
                                 project_norm) + "\n";
    s += residual ? "    x = x + h\n" : "    x = h\n";
    return s;
  }

  bool residual;
  int64_t hidden;
  nn::Conv2d expand{nullptr}, dw{nullptr}, project{nullptr};
  nn::GroupNorm expand_norm{nullptr}, dw_norm{nullptr}, project_norm{nullptr};
};

// MobileNetV2 at width 0.5 (channels rounded to multiples of 8 as
// torchvision does; the last 1 x 1 convolution 640 wide against 1280),
// GroupNorm in place of BatchNorm, and as its CIFAR versions adapt it a
// stride-1 first convolution (ImageNet: stride 2). The stages keep
// ImageNet's strides 1, 2, 2, 2, 1, 2, 1 (the CIFAR versions also set the
// second to 1, which on 2 CPU cores would double the cost for little
// gain): 28 -> 28 -> 14 -> 7 -> 4 -> 4 -> 2 -> 2. Global average pooling,
// dropout 0.2, a linear layer to the classes. Initialised as torchvision's.
class mobilenetv2_model : public classifier {
public:
  explicit mobilenetv2_model(const model_shape& s)
      : stem(nn::Conv2dOptions(s.input.channels, 16, 3).padding(1).bias(false)),
        stem_norm(norm(16)),
        head(nn::Conv2dOptions(160, 640, 1).bias(false)),
        head_norm(norm(640)),
        fc(640, s.classes),
        drop(0.2) {
    register_module("stem", stem);
    register_module("stem_norm", stem_norm);
    // (expansion, output channels, repeats, first stride) at width 0.5.
    const int64_t stages[][4] = {{1, 8, 1, 1},  {6, 16, 2, 2}, {6, 16, 3, 2}, {6, 32, 4, 2},
                                 {6, 48, 3, 1}, {6, 80, 3, 2}, {6, 160, 1, 1}};
    int64_t in = 16;
    for (const auto& st : stages)
      for (int64_t r = 0; r < st[2]; ++r) {
        blocks.push_back(register_module(
          "b" + std::to_string(blocks.size() + 1),
          std::make_shared<inverted_residual>(in, st[1], r == 0 ? st[3] : 1, st[0])));
        in = st[1];
      }
    register_module("head", head);
    register_module("head_norm", head_norm);
    register_module("fc", fc);
    torch::NoGradGuard no_grad;
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<nn::Conv2d>())
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      else if (auto* l = m->as<nn::Linear>()) {
        torch::nn::init::normal_(l->weight, 0.0, 0.01);
        torch::nn::init::zeros_(l->bias);
      }
    }
  }

  Tensor forward(Tensor x) override {
    x = torch::hardtanh(stem_norm->forward(stem->forward(x)), 0, 6);
    for (auto& b : blocks)
      x = b->forward(x);
    x = torch::hardtanh(head_norm->forward(head->forward(x)), 0, 6);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc->forward(drop(x, is_training()));
  }

  std::string script() const override {
    std::ostringstream s;
    s << "def logits(self, x):\n"
      << "    x = torch.hardtanh("
      << group_norm(conv("x", "stem", stem), "stem_norm", stem_norm) << ", 0.0, 6.0)\n";
    for (size_t i = 0; i < blocks.size(); ++i)
      s << blocks[i]->script("b" + std::to_string(i + 1));
    s << "    x = torch.hardtanh("
      << group_norm(conv("x", "head", head), "head_norm", head_norm) << ", 0.0, 6.0)\n"
      << "    x = torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)\n"
      << "    return " << linear("x", "fc", fc) << "\n";
    return s.str();
  }

private:
  nn::Conv2d stem;
  nn::GroupNorm stem_norm;
  std::vector<std::shared_ptr<inverted_residual>> blocks;
  nn::Conv2d head;
  nn::GroupNorm head_norm;
  nn::Linear fc;
  seeded_dropout drop;
};

} // namespace

} // namespace zoo

namespace {

const model_registration alexnet_model{
  "alexnet", "AlexNet in its CIFAR adaptation (images of 16+ pixels)",
  zoo::built_as<zoo::alexnet_model>(16)};
const model_registration squeezenet_model{
  "squeezenet", "SqueezeNet 1.1, CIFAR adaptation (images of 8+ pixels)",
  zoo::built_as<zoo::squeezenet_model>(8)};
const model_registration mobilenetv2_model{
  "mobilenetv2", "MobileNetV2, CIFAR adaptation (images of 8+ pixels)",
  zoo::built_as<zoo::mobilenetv2_model>(8)};

} // namespace

} // namespace eg::learning
