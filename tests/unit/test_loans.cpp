// links: eg_learning
// A model's parameters lent to gossip messages without a copy (train/loans.hpp):
// copied only when a write comes while a loan is still held.
#include "models/dataset.hpp"
#include "models/model.hpp"
#include "models/model_shape.hpp"
#include "models/serialize.hpp"
#include "train/loans.hpp"

#include <boost/test/unit_test.hpp>
#include <torch/torch.h>

using namespace eg::learning;

namespace {

/// Fashion-MNIST's model shape.
const model_shape fashion = fashion_mnist_shape();

} // namespace

BOOST_AUTO_TEST_SUITE(loans)

BOOST_AUTO_TEST_CASE(lent_parameters_are_copied_only_while_a_loan_is_held) {
  auto model = make_classifier("lenet5", 3, fashion);
  auto params = parameters(*model);
  parameter_loans loans;
  // Given back before the next write: no copy, same storage.
  const void* before = params[0].data_ptr();
  { auto token = loans.lend(params); }
  BOOST_TEST(!loans.before_write(params));
  BOOST_TEST(params[0].data_ptr() == before);
  // Still held: the parameters move to copies, the holder keeps what it was
  // lent, unchanged by what the parameters do next.
  auto token = loans.lend(params);
  auto lent = params[0].detach().clone();
  BOOST_TEST(loans.before_write(params));
  BOOST_TEST(params[0].data_ptr() != before);
  BOOST_TEST(torch::equal(params[0], lent));
  {
    torch::NoGradGuard no_grad;
    params[0].add_(1.0);
  }
  BOOST_TEST(torch::equal(torch::from_blob(const_cast<void*>(before), lent.sizes()), lent));
  // One copy per loan: the next write finds nothing lent.
  BOOST_TEST(!loans.before_write(params));
  BOOST_TEST(loans.lent() == 2u);
  BOOST_TEST(loans.copies() == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
