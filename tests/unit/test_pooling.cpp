// links: eg_learning
// LeNet-5's 2 x 2 max pooling (models/pooling.hpp) against torch's: values,
// gradients, ties and NaN; torch's own pooling for what its kernel does not take.
#include "models/pooling.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <limits>

using namespace eg::learning;

namespace {

// max_pool_2x2 against torch::max_pool2d on the same input: values, and the
// gradient each window passes back (to the same element, so ties and NaN
// must be settled the same way).
void expect_pooling_like_torch(const torch::Tensor& input) {
  auto mine_in = input.detach().clone().requires_grad_(true);
  auto torch_in = input.detach().clone().requires_grad_(true);
  auto mine = max_pool_2x2(mine_in);
  auto ref = torch::max_pool2d(torch_in, 2);
  BOOST_REQUIRE(mine.sizes() == ref.sizes());
  BOOST_CHECK(torch::equal(mine.isnan(), ref.isnan()));
  BOOST_CHECK(torch::equal(torch::nan_to_num(mine, 0.0), torch::nan_to_num(ref, 0.0)));
  auto grad = torch::randn(ref.sizes());
  mine.backward(grad);
  ref.backward(grad);
  BOOST_CHECK(torch::equal(mine_in.grad(), torch_in.grad()));
  {
    torch::NoGradGuard no_grad;
    auto plain = max_pool_2x2(input);
    BOOST_CHECK(!plain.requires_grad());
    BOOST_CHECK(torch::equal(torch::nan_to_num(plain, 0.0), torch::nan_to_num(ref.detach(), 0.0)));
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(pooling)

BOOST_AUTO_TEST_CASE(max_pool_2x2_matches_torch) {
  torch::manual_seed(7);
  // LeNet-5's two poolings, on random values.
  expect_pooling_like_torch(torch::randn({5, 6, 28, 28}));
  expect_pooling_like_torch(torch::randn({3, 16, 10, 10}));
  // After a ReLU: windows of zeros, all four tied.
  expect_pooling_like_torch(torch::relu(torch::randn({4, 6, 28, 28})));
  // Few distinct values: ties of every kind, the diagonal ones included.
  expect_pooling_like_torch(torch::randint(0, 3, {4, 3, 12, 12}).to(torch::kFloat32));
  // NaN wins its window, wherever it sits.
  auto with_nan = torch::randn({2, 2, 8, 8});
  with_nan.index_put_({0, 0, 0, 1}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({0, 1, 3, 2}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({1, 0, 5, 5}, std::numeric_limits<float>::quiet_NaN());
  with_nan.index_put_({1, 0, 4, 4}, std::numeric_limits<float>::quiet_NaN());
  expect_pooling_like_torch(with_nan);
}

BOOST_AUTO_TEST_CASE(max_pool_2x2_falls_back_to_torch) {
  torch::manual_seed(8);
  // Odd sizes (floor mode drops the last row and column), doubles, and a
  // non-contiguous view take torch's own pooling, with the same results.
  for (const auto& x : {torch::randn({2, 3, 7, 9}), torch::randn({2, 3, 8, 8}, torch::kFloat64),
                        torch::randn({2, 8, 8, 3}).permute({0, 3, 1, 2})}) {
    auto mine = max_pool_2x2(x);
    BOOST_CHECK(torch::equal(mine, torch::max_pool2d(x, 2)));
  }
}

BOOST_AUTO_TEST_SUITE_END()
