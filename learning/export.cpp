#include "learning/export.hpp"

#include "learning/dataset.hpp"
#include "learning/scripted.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <cctype>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace eg::learning {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// forward(images): the data set loader's normalisation, then `logits`.
std::string forward_source(const std::string& logits) {
  return "def forward(self, images):\n"
         "    x = images\n"
         "    if x.dim() == 3:\n"
         "        x = x.unsqueeze(1)\n"
         "    assert x.dim() == 4 and x.size(1) == 1 and x.size(2) == 28 and x.size(3) == 28, "
         "\"expected images [B, 1, 28, 28] or [B, 28, 28]\"\n"
         "    if not x.is_floating_point():\n"
         "        x = x.div(255)\n"
         "    return " + logits + "(x.sub(" + number(pixel_mean) + ").div(" + number(pixel_std) +
         "))\n";
}

torch::jit::Module new_module(const std::string& name,
                              const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  torch::jit::Module m(c10::QualifiedName("__torch__.edgegossip." + name), cu,
                       /*shouldMangle=*/true);
  m.register_attribute("training", c10::BoolType::get(), false);
  return m;
}

std::string class_name(const classifier& m) {
  std::string name;
  for (char c : m.model_name())
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name.empty() ? "model" : name;
}

} // namespace

torch::jit::Module export_module(classifier& m) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto root = new_module(class_name(m), cu);
  torch::NoGradGuard no_grad;
  const auto copy = [](const torch::Tensor& t) {
    return t.detach().to(torch::kCPU).clone().requires_grad_(t.requires_grad());
  };
  if (const auto* scripted = dynamic_cast<const scripted_classifier*>(&m)) {
    auto inner = scripted->module().deepcopy();
    // deepcopy() shares nothing; the weights may live on a GPU.
    for (const auto& p : inner.named_parameters())
      p.value.set_data(copy(p.value));
    root.register_module("model", inner);
    root.define(forward_source("self.model.forward"));
  } else {
    const std::string script = m.script();
    if (script.empty())
      throw std::invalid_argument("model '" + m.model_name() +
                                  "' cannot be exported: it has no TorchScript form");
    // The parameters under their dotted names: a module for each prefix.
    std::map<std::string, torch::jit::Module> modules;
    std::vector<std::pair<std::string, std::string>> links;  // parent path, child name
    for (const auto& p : m.named_parameters()) {
      std::string prefix, rest = p.key();
      torch::jit::Module owner = root;
      for (size_t dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
        const std::string part = rest.substr(0, dot);
        rest = rest.substr(dot + 1);
        const std::string path = prefix.empty() ? part : prefix + "." + part;
        auto found = modules.find(path);
        if (found == modules.end()) {
          found = modules.emplace(path, new_module(class_name(m) + "." + path, cu)).first;
          owner.register_module(part, found->second);
        }
        owner = found->second;
        prefix = path;
      }
      owner.register_parameter(rest, copy(p.value()), /*is_buffer=*/false);
    }
    for (const auto& b : m.named_buffers())
      throw std::invalid_argument("model '" + m.model_name() + "' cannot be exported: buffer " +
                                  b.key() + " has no TorchScript form");
    try {
      root.define(script);
    } catch (const std::exception& e) {
      throw std::logic_error("model '" + m.model_name() + "': its TorchScript does not compile: " +
                             e.what());
    }
    root.define(forward_source("self.logits"));
  }
  root.eval();
  return root;
}

void write_torchscript(classifier& m, const std::string& path) {
  auto module = export_module(m);
  try {
    module.save(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error("cannot write the TorchScript model to '" + path +
                             "': " + e.what_without_backtrace());
  }
}

} // namespace eg::learning
