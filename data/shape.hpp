#pragma once
// What a data set is without its samples (no torch here, so that actors'
// headers can name it): the shape of a sample, the normalisation, the
// class names, and the error for bad data.

#include "common/error.hpp"
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace eg::data {

/// A data set that is missing, malformed or refused; what() names the file
/// (and the line or sample where there is one).
class data_error : public failure<errc::bad_data> {
public:
  using failure::failure;
};

/// The shape of one sample: an image of C x H x W, or F features (flat).
struct sample_shape {
  int64_t channels = 0;  ///< or the number of features, when flat
  int64_t height = 0;
  int64_t width = 0;
  bool flat = false;

  static sample_shape image(int64_t c, int64_t h, int64_t w) { return {c, h, w, false}; }
  static sample_shape features(int64_t f) { return {f, 1, 1, true}; }
  /// {C, H, W}, or {F}.
  std::vector<int64_t> dims() const;
  int64_t numel() const { return channels * height * width; }
  /// "1x28x28", "3x32x32" or "13 features".
  std::string to_string() const;
  /// Parses to_string()'s forms ("CxHxW", "F features" or "F"); throws data_error.
  static sample_shape parse(const std::string& text);
};
bool operator==(const sample_shape& a, const sample_shape& b);
inline bool operator!=(const sample_shape& a, const sample_shape& b) { return !(a == b); }

/// Per-channel (images) or per-feature mean and standard deviation of the
/// values a model is given before normalisation (pixels / 255 for images).
struct normalisation {
  std::vector<double> mean;
  std::vector<double> std;
  bool empty() const { return mean.empty(); }
};

/// Sums of a data set's values per channel or feature: what nodes combine
/// into the cluster's normalisation without sending a sample.
struct moments {
  std::vector<double> sum;
  std::vector<double> sum_squares;
  double count = 0;  ///< values summed per channel or feature
  moments& operator+=(const moments& o);
  /// The mean and standard deviation (a standard deviation of 0 becomes 1:
  /// a constant channel is only centred). Throws data_error when empty.
  normalisation finish() const;
};

/// As text that travels in the actors' messages and the run state, every
/// value exact ("count N; sum a b; squares c d"; "mean a b; std c d"), and
/// back: the parsers throw data_error naming what is wrong (a count, a
/// value that is not a finite number, lists of different lengths, a
/// standard deviation that is not positive).
std::string to_text(const moments& m);
moments parse_moments(const std::string& text);
std::string to_text(const normalisation& n);
normalisation parse_normalisation(const std::string& text);
bool operator==(const normalisation& a, const normalisation& b);
inline bool operator!=(const normalisation& a, const normalisation& b) { return !(a == b); }

/// What a data set is, without its samples: what a model is built for and
/// what an exported model carries.
struct description {
  sample_shape shape;
  std::vector<std::string> classes;
  normalisation norm;
};

/// What a model is built for, as text that nodes compare when a platform
/// joins: the shape, then the classes ("1x28x28; 10 classes: a, b, ...").
std::string signature(const sample_shape& shape, const std::vector<std::string>& classes);
inline std::string signature(const description& d) { return signature(d.shape, d.classes); }

} // namespace eg::data
