#pragma once
// Images for the readers: decoding with stb_image, resizing with
// stb_image_resize, and fitting [N, C, H, W] bytes to the cluster's shape
// (used by the image-folder, idx, cifar, npy and torch readers).

#include "data/readers.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace eg::data {

/// An image file's size and channels from its header (stb_image's stbi_info):
/// channels as stored, 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA.
struct image_info {
  int width = 0;
  int height = 0;
  int channels = 0;
};

/// The header of `path`; false where stb_image cannot read it, with its
/// reason in `why`.
bool probe_image(const std::string& path, image_info& info, std::string& why);

/// The channels a data set keeps of an image stored with `stored` channels:
/// 1 for grey (with or without alpha), 3 for colour; alpha is dropped.
inline int kept_channels(int stored) { return stored <= 2 ? 1 : 3; }

/// What decoding one file gave.
enum class decoded { ok, unreadable, other_size };

/// Decodes `path` (PNG, JPEG, BMP, PPM/PGM, TGA, GIF's first frame) into
/// `channels` (1 to 4; stb_image converts) and writes it planar, C x H x W,
/// at `out`; an image of another size is resized to `height` x `width`
/// where `resize`, else nothing is written and other_size is returned.
/// unreadable: the reason is in `why`. The size and stored channels decoded
/// are left in `info`.
decoded decode_image_into(const std::string& path, int channels, int height, int width,
                          bool resize, uint8_t* out, image_info& info, std::string& why);

/// Decodes `path` as stored and writes it planar at `out` where it is
/// `height` x `width` with no more than `channels` kept channels (grey
/// repeated into RGB, alpha dropped); else other_size, nothing written,
/// and its size and channels in `info`. One pass over files most of which
/// are the size guessed, without a pass over their headers first.
decoded decode_image_as_stored(const std::string& path, int channels, int height, int width,
                               uint8_t* out, image_info& info, std::string& why);

/// Resizes one plane of bytes (stb_image_resize, its default filters).
void resize_plane(const uint8_t* in, int in_w, int in_h, uint8_t* out, int out_w, int out_h);

/// Resizes [N, C, H, W] bytes to [N, C, height, width]; the input itself
/// where it is that size already.
torch::Tensor resize_images(const torch::Tensor& images, int64_t height, int64_t width);

/// Converts [N, C, H, W] bytes between 1 and 3 channels (grey repeated; RGB
/// to luma with stb_image's weights). Throws data_error naming `where` for
/// other channel counts.
torch::Tensor convert_channels(const torch::Tensor& images, int64_t channels,
                               const std::string& where);

/// Fits images [N, C, H, W] to the cluster's shape (options.shape): grey and
/// RGB converted into each other, another size resized where options.resize,
/// else a data_error naming `where` and both shapes. Unset shape: the
/// images as they are. A cluster of features refuses images.
torch::Tensor fit_images(torch::Tensor images, const read_options& options,
                         const std::string& where, std::vector<std::string>& warnings);

/// Refuses `features` per sample where the cluster's shape is another
/// (images, or another number of features), naming `where`.
void check_features(int64_t features, const read_options& options, const std::string& where);

/// Images from an array of bytes, [N, H, W] (grey), [N, H, W, C] or
/// [N, C, H, W], as [N, C, H, W] contiguous. Where the channels are: the
/// cluster's shape decides when it matches exactly one reading; else a last
/// dimension of 1, 3 or 4 with a second one that is not is channels-last
/// (NumPy's and TensorFlow's layout), a second dimension of 1, 3 or 4 with a
/// last one that is not is channels-first (PyTorch's layout), and where both
/// could be, channels-last. 4 channels: alpha dropped. Throws data_error
/// naming `where` for other dimensions.
torch::Tensor images_from_array(const torch::Tensor& x, const std::optional<sample_shape>& cluster,
                                const std::string& where);

/// The image-folder reader (root/<class>/<file>) decoding on `threads`
/// threads (0: every core; image_folder_reader() uses every core).
read_result read_image_folder(const std::string& dir, const read_options& options, int threads);

/// The image files of an image folder in the order the reader reads them
/// (the classes' files in turn, each class's by name); throws data_error.
std::vector<std::string> image_folder_files(const std::string& dir);

} // namespace eg::data
