#define BOOST_TEST_MODULE edgegossip
#include <boost/test/unit_test.hpp>
