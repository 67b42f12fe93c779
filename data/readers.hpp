#pragma once
// Readers by format: each reads one split of a data set from a directory
// (or a file) into a data::dataset. A new format is one file with its
// reader and one line in the registry (data/readers.cpp).
//
//   idx           the MNIST family: {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//   cifar         CIFAR-10 (data_batch_*.bin, test_batch.bin) and CIFAR-100
//                 (train.bin, test.bin) binary batches
//   image-folder  root/<class>/<file> (PNG, JPEG, BMP, PPM/PGM; grey or RGB)
//   csv           numeric features and a label column (named or numbered;
//                 header optional; labels may be names)
//   npy           a features array and a labels array (NumPy .npy)
//   torch         a dict of tensors saved with torch.save in Python
//   auto          the format found from what the directory holds
//
// A directory whose top level holds train/ and test/ (or validation/) is
// read as those splits, in whichever format they hold (data/load.hpp).

#include "data/dataset.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace eg::data {

enum class split { train, test };
const char* to_string(split s);

/// What a reader is asked for.
struct read_options {
  split which = split::train;
  /// The cluster's class list (names by output index); empty: the data's own
  /// (sorted folder names, the labels' names, or 0..K-1 for numeric labels).
  std::vector<std::string> classes;
  /// The cluster's sample shape; images of another size are resized to it
  /// (resize = true) or refused. Unset: the data's own.
  std::optional<sample_shape> shape;
  bool resize = true;
  /// A sample that cannot be read (a corrupt image): "skip" (counted, warned)
  /// or "fail".
  std::string on_bad_sample = "skip";
  /// CSV: the label column, by name or number (from 0); empty: the last.
  std::string label_column;
  /// Where decoded image folders are cached ("" = no cache).
  std::string cache_dir;
  /// > 0: keep the first `limit` samples.
  int64_t limit = 0;
};

/// What a reader gives: the data set, and what it skipped or warned of.
struct read_result {
  dataset data;
  int64_t skipped = 0;
  std::vector<std::string> warnings;
};

struct reader {
  std::string format;
  /// Whether `dir` holds this format's files for `which` (used by "auto" and
  /// to tell whether a split is there).
  std::function<bool(const std::string& dir, split which)> holds;
  /// Reads the split; throws data_error naming the file.
  std::function<read_result(const std::string& dir, const read_options&)> read;
};

/// The registered readers, in the order "auto" tries them.
const std::vector<reader>& readers();
/// The reader of `format`; throws data_error listing the formats.
const reader& reader_for(const std::string& format);
/// The names of the formats, "auto" included.
std::vector<std::string> formats();

/// The format `dir` holds for `which`: the first reader that holds it;
/// throws data_error naming the directory and what it holds.
std::string detect_format(const std::string& dir, split which);

/// Reads one split of `dir` in `format` ("auto": detected), then applies the
/// cluster's classes and limit. Throws data_error.
read_result read_split(const std::string& dir, const std::string& format,
                       const read_options& options);

// The readers (one file each).
reader idx_reader();
reader cifar_reader();
reader image_folder_reader();
reader csv_reader();
reader npy_reader();
reader torch_reader();

} // namespace eg::data
