#pragma once
// A node's data: its training split and its test split, from one directory
// in one format. A directory whose top level holds train/ and test/ (or
// validation/) is read as those splits, as Hugging Face's imagefolder and
// most downloaded data sets lay them out; else the format's own files for
// each split (IDX's train-/t10k-, CIFAR's data_batch_/test_batch, ...); a
// separate test directory, or a share held out of the training data, serve
// where the directory has no test split.

#include "data/readers.hpp"

#include <optional>
#include <string>

namespace eg::data {

struct source {
  std::string dir;
  std::string format = "auto";
  std::string test_dir;   ///< "" = the directory's own test split
  double validation = 0;  ///< held out of train where there is no test split
};

struct node_data {
  dataset train;
  std::optional<dataset> test;
  /// Where the test data came from ("test/", "t10k files", "test_dir ...",
  /// "10% held out"), or why there is none.
  std::string test_from;
  int64_t skipped = 0;
  std::vector<std::string> warnings;
};

/// Reads `src` with `options` (its `which` and `limit` are set here: limits
/// are `train_limit` and `test_limit`, 0 for all). The hold-out, when used,
/// is drawn from `seed`. Throws data_error naming the directory or file.
node_data load(const source& src, const read_options& options, int64_t train_limit = 0,
               int64_t test_limit = 0, uint64_t seed = 1);

} // namespace eg::data
