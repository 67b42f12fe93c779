// links: eg_learning
// GPU platforms (train/trainer.hpp): a trainer on "cuda" steps a replica
// of its model there, and its model on the CPU is what gossip, checkpoints
// and evaluation use. These cases check that gossip between a platform on
// the GPU and one on the CPU keeps the weights exact: what a GPU platform
// sends is bit for bit what it trained, also while it goes on stepping with
// the message in flight; what it receives and merges, or loads from a
// checkpoint, is what its next step starts from. They need a CUDA device
// and are skipped without one (a CPU-only LibTorch, or no GPU visible).
#include "algorithms/gossip/gossip.hpp"
#include "models/model.hpp"
#include "models/serialize.hpp"
#include "train/trainer.hpp"
#include "messages/codec.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

using eg::test::random_set;
using eg::test::iota;

using namespace eg::learning;
namespace tt = boost::test_tools;

namespace {

tt::assertion_result cuda_present(boost::unit_test::test_unit_id) {
  tt::assertion_result r(torch::cuda::is_available());
  r.message() << "no CUDA device: this LibTorch has no CUDA, or no GPU is visible";
  return r;
}

const model_shape& fashion() {
  static const model_shape s = fashion_mnist_shape();
  return s;
}

/// Batches of `batch` points in a fixed order: point k * 7 mod n first.
epoch_plan fixed_plan(int64_t n, int64_t batch, int64_t batches) {
  epoch_plan plan;
  int64_t at = 0;
  for (int64_t b = 0; b < batches; ++b) {
    std::vector<int64_t> one;
    for (int64_t k = 0; k < batch; ++k, ++at)
      one.push_back((at * 7) % n);
    plan.batches.push_back(std::move(one));
  }
  return plan;
}

/// Copies on the CPU.
std::vector<torch::Tensor> on_cpu(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts)
    out.push_back(t.detach().to(torch::kCPU).clone());
  return out;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts)
    out.push_back(t.detach().clone());
  return out;
}

/// What the platforms do to send a model: its parameters lent to a message
/// encoded without copying (learning::parameter_loans, messages::
/// encode_gathered); the message is written out later.
struct message_in_flight {
  eg::messages::gathered message;
};

message_in_flight send(local_trainer& from, const std::string& sender, double weight) {
  auto params = parameters(from.model());
  eg::messages::envelope e;
  e.hdr.cluster_id = "gpu-test";
  e.hdr.sender = sender;
  eg::messages::weights w;
  w.gossip_weight = weight;
  w.tensors = to_views(parameter_names(from.model()), params);
  e.payload = w;
  return {eg::messages::encode_gathered(e, from.loans().lend(params))};
}

/// The receiving side: the message written out, decoded, and its tensors
/// (copied out of the buffer).
std::vector<torch::Tensor> receive(const message_in_flight& m, classifier& like) {
  auto bytes = m.message.flatten();
  auto e = eg::messages::decode(bytes.data(), bytes.size(), "gpu-test");
  const auto& w = std::get<eg::messages::weights>(e.payload);
  return clones(from_views(w.tensors, parameter_names(like), parameters(like)));
}

/// The loss of `weights` (a model `name`) on the points `batch` of `data`,
/// computed on the GPU apart from any trainer.
double reference_loss(const std::string& name, const std::vector<torch::Tensor>& weights,
                      const dataset& data, const std::vector<int64_t>& batch) {
  auto m = make_classifier(name, 9, fashion());
  {
    torch::NoGradGuard no_grad;
    auto ps = parameters(*m);
    for (size_t i = 0; i < ps.size(); ++i)
      ps[i].copy_(weights[i]);
  }
  m->to(torch::kCUDA);
  m->train();
  auto index = torch::tensor(batch, torch::kInt64);
  auto x = data.batch(index).to(torch::kCUDA);
  auto y = data.labels.index_select(0, index).to(torch::kCUDA);
  torch::NoGradGuard no_grad;
  return torch::nn::functional::cross_entropy(m->forward(x), y).item<double>();
}

} // namespace

BOOST_AUTO_TEST_SUITE(gpu, *boost::unit_test::precondition(cuda_present))

BOOST_AUTO_TEST_CASE(a_gpu_step_leaves_the_model_on_the_cpu_equal_to_its_replica) {
  auto data = random_set(256, 1);
  local_trainer g(make_classifier("lenet5", 1, fashion()), data, iota(256), {0.05, 0.9, 32},
                  training_device("cuda"));
  BOOST_REQUIRE(g.device().is_cuda());
  BOOST_REQUIRE(&g.replica() != &g.model());
  const auto initial = clones(parameters(g.model()));
  g.begin_epoch(fixed_plan(256, 32, 4));
  std::vector<uint64_t> classes(static_cast<size_t>(data->num_classes()), 0);
  for (int k = 0; k < 4; ++k) {
    auto r = g.step();
    BOOST_TEST(r.samples == 32);
    BOOST_TEST(std::isfinite(r.loss));
    BOOST_TEST(eg::test::all_equal(parameters(g.model()), on_cpu(parameters(g.replica()))));
  }
  BOOST_TEST(g.epoch_done());
  BOOST_TEST(!eg::test::all_equal(parameters(g.model()), initial));
  // The points of each class it trained, counted as on the CPU.
  auto plan = fixed_plan(256, 32, 4);
  for (const auto& b : plan.batches)
    for (int64_t i : b)
      ++classes[static_cast<size_t>(data->labels[i].item<int64_t>())];
  BOOST_TEST(g.class_samples() == classes, tt::per_element());
}

BOOST_AUTO_TEST_CASE(gossip_between_a_gpu_and_a_cpu_platform_keeps_weights_exact) {
  auto data = random_set(512, 7);
  const sgd_options opt{0.05, 0.9, 32};
  local_trainer g(make_classifier("lenet5", 1, fashion()), data, iota(512), opt,
                  training_device("cuda"));
  local_trainer c(make_classifier("lenet5", 2, fashion()), data, iota(512), opt);
  gosgd gs(0.5, 1.0), cs(0.5, 1.0);
  auto gp = parameters(g.model());
  auto cp = parameters(c.model());
  auto plan = fixed_plan(512, 32, 10);
  g.begin_epoch(plan);
  c.begin_epoch(fixed_plan(512, 32, 10));
  for (int k = 0; k < 4; ++k)
    g.step();

  // GPU -> CPU, and the GPU platform steps twice while the message waits:
  // it must write a copy, and the message carry what was trained when it
  // was sent.
  const auto trained = on_cpu(parameters(g.replica()));
  g.to_host();
  BOOST_REQUIRE(eg::test::all_equal(gp, trained));
  auto to_cpu = send(g, "g", 0.25);
  g.step();
  g.step();
  // The steps left the CPU's copy alone (nothing read it); reading it
  // brings it up to date, into a copy: the message still holds the old.
  BOOST_TEST(g.loans().copies() == 0u);
  BOOST_TEST(eg::test::all_equal(gp, trained));
  BOOST_TEST(eg::test::all_equal(parameters(g.model()), on_cpu(parameters(g.replica()))));
  BOOST_TEST(g.loans().copies() == 1u);
  BOOST_TEST(!eg::test::all_equal(parameters(g.model()), trained));
  auto received = receive(to_cpu, c.model());
  BOOST_TEST(eg::test::all_equal(received, trained));

  // The CPU platform merges it by GoSGD's rule.
  const auto own = clones(cp);
  c.loans().before_write(cp);
  cs.merge(cp, received, 0.25);
  for (size_t i = 0; i < cp.size(); ++i)
    BOOST_TEST(torch::allclose(cp[i], (0.5 * own[i] + 0.25 * received[i]) / 0.75, 1e-6, 1e-7));

  // CPU -> GPU: the GPU platform's next step starts from the merged model.
  c.step();
  c.step();
  const auto sent_back = clones(cp);
  auto to_gpu = send(c, "c", 0.375);
  auto back = receive(to_gpu, g.model());
  BOOST_TEST(eg::test::all_equal(back, sent_back));
  g.to_host();
  g.loans().before_write(gp);
  gs.merge(gp, back, 0.375);
  const auto merged = clones(gp);
  const double expected = reference_loss("lenet5", merged, *data, plan.batches[6]);
  auto r = g.step();
  BOOST_TEST(r.loss == expected, tt::tolerance(1e-5));
  BOOST_TEST(eg::test::all_equal(parameters(g.model()), on_cpu(parameters(g.replica()))));
  BOOST_TEST(!eg::test::all_equal(parameters(g.model()), merged));
}

BOOST_AUTO_TEST_CASE(with_no_learning_rate_a_gpu_step_returns_the_weights_it_was_given) {
  // lr 0: a step moves nothing, so the model after it must be, bit for bit,
  // what it was given before: merged in place, or loaded from a checkpoint
  // (which replaces the parameters' storage). MobileNetV2: 158 tensors,
  // GroupNorm's among them.
  auto data = random_set(64, 3);
  local_trainer g(make_classifier("mobilenetv2", 1, fashion()), data, iota(64), {0.0, 0.9, 8},
                  training_device("cuda"));
  g.begin_epoch(fixed_plan(64, 8, 4));
  auto gp = parameters(g.model());
  BOOST_TEST_MESSAGE("mobilenetv2: " << gp.size() << " parameter tensors");

  auto other = make_classifier("mobilenetv2", 5, fashion());
  gosgd gs(0.5, 1.0);
  g.loans().before_write(gp);
  gs.merge(gp, parameters(*other), 0.5);
  const auto merged = clones(gp);
  g.step();
  BOOST_TEST(eg::test::all_equal(parameters(g.model()), merged));
  BOOST_TEST(eg::test::all_equal(on_cpu(parameters(g.replica())), merged));

  auto checkpoint = make_classifier("mobilenetv2", 6, fashion());
  load_model(g.model(), save_model(*checkpoint));
  g.step();
  BOOST_TEST(eg::test::all_equal(parameters(g.model()), parameters(*checkpoint)));
  BOOST_TEST(eg::test::all_equal(on_cpu(parameters(g.replica())), parameters(*checkpoint)));

  // A message lent across a step reads them too.
  auto lent = send(g, "g", 0.5);
  g.step();
  BOOST_TEST(eg::test::all_equal(receive(lent, g.model()), parameters(*checkpoint)));
}

BOOST_AUTO_TEST_CASE(a_write_to_the_cpu_model_while_the_replica_is_ahead_is_refused) {
  // Whoever writes the parameters without to_host() first would lose the
  // steps the replica took since: the next step says so instead.
  auto data = random_set(128, 5);
  local_trainer g(make_classifier("lenet5", 1, fashion()), data, iota(128), {0.05, 0.9, 32},
                  training_device("cuda"));
  auto gp = parameters(g.model());
  g.begin_epoch(fixed_plan(128, 32, 4));
  g.step();
  {
    torch::NoGradGuard no_grad;
    gp[0].mul_(0.5);
  }
  BOOST_CHECK_THROW(g.step(), std::logic_error);
}

BOOST_AUTO_TEST_SUITE_END()
