// links: eg_learning
// A model and its optimizer saved and loaded (models/serialize.hpp), and the
// state dict written as torch.save's zip.
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "models/serialize.hpp"
#include "train/trainer.hpp"

#include "sample_sets.hpp"
#include "tensor_testing.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using eg::test::random_set;
using eg::test::iota;

namespace fs = std::filesystem;
using namespace eg::learning;

namespace {

using temp_dir = eg::test::scratch_dir;
using eg::test::all_equal;

/// Fashion-MNIST's model shape.
const model_shape fashion = fashion_mnist_shape();

} // namespace

BOOST_AUTO_TEST_SUITE(serialize)

BOOST_AUTO_TEST_CASE(model_and_optimizer_round_trip) {
  auto data = random_set(64, 4);
  local_trainer a(make_classifier("lenet5", 1, fashion), data, iota(64), {0.05, 0.9, 32});
  local_trainer b(make_classifier("lenet5", 2, fashion), data, iota(64), {0.05, 0.9, 32});
  std::mt19937_64 rng(1);
  a.begin_epoch(shuffled_plan(a.shard(), 32, 1, rng));
  a.step();  // momentum buffers now exist
  load_model(b.model(), save_model(a.model()));
  load_optimizer(b.optimizer(), save_optimizer(a.optimizer()));
  BOOST_TEST(all_equal(parameters(a.model()), parameters(b.model())));

  // The same next step on both gives bit-identical models only if the
  // momentum buffers came across too.
  epoch_plan next{{iota(32)}};
  a.begin_epoch(next);
  b.begin_epoch(next);
  a.step();
  b.step();
  BOOST_TEST(all_equal(parameters(a.model()), parameters(b.model())));

  BOOST_CHECK_THROW(load_model(b.model(), "not an archive"), std::runtime_error);
  BOOST_CHECK_THROW(load_model(b.model(), save_model(*make_classifier("logreg", 1, fashion))),
                    std::runtime_error);
  BOOST_CHECK_THROW(load_optimizer(b.optimizer(), "garbage"), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(state_dict_is_a_torch_zip) {
  temp_dir dir;
  auto model = make_classifier("lenet5", 1, fashion);
  auto path = dir.file("model.pt");
  write_state_dict(*model, path);
  std::ifstream in(path, std::ios::binary);
  std::string magic(2, '\0');
  in.read(magic.data(), 2);
  BOOST_TEST(magic == "PK");
  BOOST_TEST(fs::file_size(path) > 61706u * 4u);

  // The bytes read back as the same name -> tensor dict.
  std::ifstream again(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(again)),
                          std::istreambuf_iterator<char>());
  auto dict = torch::pickle_load(bytes).toGenericDict();
  BOOST_TEST(dict.size() == 10u);
  BOOST_TEST(torch::equal(dict.at("fc3.bias").toTensor(), model->named_parameters()["fc3.bias"]));

  BOOST_CHECK_EXCEPTION(write_state_dict(*model, "/nonexistent/dir/model.pt"), std::runtime_error,
                        [](const std::runtime_error& e) {
                          return std::string(e.what()).find("/nonexistent/dir/model.pt") !=
                                 std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
