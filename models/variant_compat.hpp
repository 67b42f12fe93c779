// LibTorch's module options hold their alternatives (a convolution's
// padding, its padding mode) in c10::variant up to LibTorch 1.x and in
// std::variant from 2.0 on: compat::get_if reads either.
#pragma once

#include <torch/version.h>

#include <variant>

namespace eg::learning::compat {
#if TORCH_VERSION_MAJOR >= 2
using std::get_if;
#else
using c10::get_if;
#endif
} // namespace eg::learning::compat
