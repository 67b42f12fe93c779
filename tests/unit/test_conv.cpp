// links: eg_learning
// LeNet-5's convolutions with ReLU (models/conv.hpp) against torch's, at every
// vector width this processor runs; torch's own for what the kernels do not take.
#include "models/conv.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <vector>

using namespace eg::learning;

namespace {

// conv2d_relu without gradients against torch's convolution and ReLU on the
// same input: equal up to the order of the sums, NaN where torch has NaN;
// with the kernels of every vector width this processor runs.
void expect_conv_like_torch(const torch::nn::Conv2d& conv, const torch::Tensor& x) {
  const auto ref = torch::relu(conv.ptr()->forward(x)).detach();
  torch::NoGradGuard no_grad;
  auto widths = conv_vector_widths();
  widths.push_back(0);  // torch's own
  for (int width : widths) {
    BOOST_TEST_CONTEXT("vector width " << width << ", input " << x.sizes()) {
      const auto mine = conv2d_relu(conv, x, width);
      BOOST_REQUIRE(mine.sizes() == ref.sizes());
      BOOST_CHECK(!mine.requires_grad());
      BOOST_CHECK(torch::equal(mine.isnan(), ref.isnan()));
      BOOST_CHECK(torch::allclose(torch::nan_to_num(mine, 0.0), torch::nan_to_num(ref, 0.0),
                                  1e-5, 1e-5));
    }
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(conv)

BOOST_AUTO_TEST_CASE(conv2d_relu_matches_torch) {
  torch::manual_seed(9);
  namespace nn = torch::nn;
  // LeNet-5's two convolutions (their shapes are compiled into the kernels).
  nn::Conv2d conv1(nn::Conv2dOptions(1, 6, 5).padding(2));
  nn::Conv2d conv2(nn::Conv2dOptions(6, 16, 5));
  for (int64_t n : {1, 3, 128}) {
    expect_conv_like_torch(conv1, torch::randn({n, 1, 28, 28}));
    expect_conv_like_torch(conv2, torch::relu(torch::randn({n, 6, 14, 14})));
  }
  // Other shapes: more input channels, two blocks of output channels, a
  // last block of channels only partly used, rows not a multiple of the
  // vectors, planes taken 16 pixels at a time.
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(2, 12, 5).padding(1)),
                         torch::randn({3, 2, 12, 30}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(1, 11, 5).padding(2)),
                         torch::randn({2, 1, 28, 28}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(3, 32, 5)), torch::randn({3, 3, 9, 24}));
  expect_conv_like_torch(nn::Conv2d(nn::Conv2dOptions(6, 15, 5)), torch::randn({2, 6, 14, 14}));
  // A NaN spreads to every output whose window holds it.
  auto with_nan = torch::randn({2, 1, 28, 28});
  with_nan.index_put_({1, 0, 3, 26}, std::numeric_limits<float>::quiet_NaN());
  expect_conv_like_torch(conv1, with_nan);
  with_nan = torch::randn({2, 6, 14, 14});
  with_nan.index_put_({0, 4, 9, 1}, std::numeric_limits<float>::quiet_NaN());
  expect_conv_like_torch(conv2, with_nan);
  // Kernels of a width no processor has are refused, not guessed.
  BOOST_CHECK_THROW(conv2d_relu(conv1, torch::randn({1, 1, 28, 28}), 3), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(conv2d_relu_falls_back_to_torch) {
  torch::manual_seed(10);
  namespace nn = torch::nn;
  nn::Conv2d conv(nn::Conv2dOptions(1, 6, 5).padding(2));
  const auto x = torch::randn({3, 1, 28, 28});
  // Training: torch's own convolution, and a gradient through it.
  auto mine_x = x.clone().requires_grad_(true), torch_x = x.clone().requires_grad_(true);
  auto mine = conv2d_relu(conv, mine_x);
  BOOST_CHECK(mine.requires_grad());
  auto ref = torch::relu(conv->forward(torch_x));
  BOOST_CHECK(torch::equal(mine, ref));
  const auto grad = torch::randn(ref.sizes());
  mine.backward(grad);
  const auto mine_weight_grad = conv->weight.grad().clone();
  conv->zero_grad();
  ref.backward(grad);
  BOOST_CHECK(torch::equal(mine_x.grad(), torch_x.grad()));
  BOOST_CHECK(torch::equal(mine_weight_grad, conv->weight.grad()));
  // A gradient for the input only, with the parameters frozen.
  for (auto& p : conv->parameters())
    p.requires_grad_(false);
  auto y = conv2d_relu(conv, x.clone().requires_grad_(true));
  BOOST_CHECK(y.requires_grad());
  BOOST_CHECK(torch::equal(y, torch::relu(conv->forward(x))));
  // Without gradients, what the kernels do not take: doubles, a view that
  // is not contiguous, a stride, another kernel size.
  torch::NoGradGuard no_grad;
  nn::Conv2d doubles(nn::Conv2dOptions(1, 6, 5).padding(2));
  doubles->to(torch::kFloat64);
  const auto xd = x.to(torch::kFloat64);
  BOOST_CHECK(torch::equal(conv2d_relu(doubles, xd), torch::relu(doubles->forward(xd))));
  const auto view = torch::randn({3, 1, 28, 28}).transpose(2, 3);
  BOOST_REQUIRE(!view.is_contiguous());
  BOOST_CHECK(torch::equal(conv2d_relu(conv, view), torch::relu(conv->forward(view))));
  for (auto other : {nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2).stride(2)),
                     nn::Conv2d(nn::Conv2dOptions(1, 6, 3).padding(1))})
    BOOST_CHECK(torch::equal(conv2d_relu(other, x), torch::relu(other->forward(x))));
}

BOOST_AUTO_TEST_SUITE_END()
