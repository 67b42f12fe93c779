#include "data/image.hpp"

#include "data/read_util.hpp"

#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

// stb_image and stb_image_resize are compiled into Debian's libstb (linked
// by eg_data): only their declarations are included here.

namespace eg::data {

bool probe_image(const std::string& path, image_info& info, std::string& why) {
  if (stbi_info(path.c_str(), &info.width, &info.height, &info.channels) == 1 &&
      info.width > 0 && info.height > 0)
    return true;
  const char* reason = stbi_failure_reason();
  why = reason ? reason : "not an image stb_image reads";
  return false;
}

namespace {

/// Interleaved H x W x `stride` to planar `channels` x H x W (the first
/// `channels` of each pixel).
void to_planar(const uint8_t* hwc, int64_t pixels, int stride, int channels, uint8_t* out) {
  if (channels == 1 && stride == 1) {
    std::memcpy(out, hwc, static_cast<size_t>(pixels));
    return;
  }
  for (int c = 0; c < channels; ++c) {
    uint8_t* plane = out + c * pixels;
    const uint8_t* in = hwc + c;
    for (int64_t i = 0; i < pixels; ++i)
      plane[i] = in[i * stride];
  }
}

/// The whole of `path` in this thread's buffer: stb_image is then given
/// the bytes (stbi_load_from_memory) instead of a FILE it reads 128 bytes at
/// a time and seeks back in; for small images that is a good share of the
/// time. False with the reason in `why`.
bool read_whole(const std::string& path, const uint8_t*& data, size_t& size, std::string& why) {
  thread_local std::vector<uint8_t> buffer;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 0 || st.st_size > (int64_t{1} << 31)) {
    why = st.st_size > 0 ? "larger than 2 GiB" : std::string("cannot stat: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  const auto want = static_cast<size_t>(st.st_size);
  if (buffer.size() > (size_t{16} << 20) && want < (size_t{1} << 20))
    std::vector<uint8_t>().swap(buffer);  // not kept at the size of one large photo
  if (buffer.size() < want + 1)
    buffer.resize(want + 1);
  size = 0;
  for (;;) {  // to the end, whatever the size said
    if (size == buffer.size())
      buffer.resize(buffer.size() * 2);
    const ssize_t got = ::read(fd, buffer.data() + size, buffer.size() - size);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      why = std::string("read error: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (got == 0)
      break;
    size += static_cast<size_t>(got);
  }
  ::close(fd);
  if (size > static_cast<size_t>(INT_MAX)) {
    why = "larger than 2 GiB";
    return false;
  }
  data = buffer.data();
  return true;
}

// stb_image's reasons are terse ("bad IHDR len"); say whose they are.
std::string stb_reason(const char* what) {
  return std::string("stb_image: ") + (what ? what : "unknown error");
}

using stb_pixels = std::unique_ptr<stbi_uc, void (*)(void*)>;

/// The file's pixels, interleaved, with `channels` per pixel (0: as stored);
/// `info` gets its size and stored channels. Null with `why` set when the
/// file cannot be read or decoded.
stb_pixels load_pixels(const std::string& path, int channels, image_info& info,
                       std::string& why) {
  stb_pixels none(nullptr, stbi_image_free);
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  if (!read_whole(path, bytes, size, why))
    return none;
  int w = 0, h = 0, stored = 0;
  stb_pixels pixels(
    stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &stored, channels),
    stbi_image_free);
  if (!pixels) {
    why = stb_reason(stbi_failure_reason());
    return none;
  }
  info = {w, h, stored};
  return pixels;
}

} // namespace

decoded decode_image_into(const std::string& path, int channels, int height, int width,
                          bool resize, uint8_t* out, image_info& info, std::string& why) {
  auto pixels = load_pixels(path, channels, info, why);
  if (!pixels)
    return decoded::unreadable;
  const int w = info.width, h = info.height;
  const int64_t plane = static_cast<int64_t>(height) * width;
  if (w == width && h == height) {
    to_planar(pixels.get(), plane, channels, channels, out);
    return decoded::ok;
  }
  if (!resize)
    return decoded::other_size;
  std::vector<uint8_t> resized(static_cast<size_t>(plane * channels));
  if (!stbir_resize_uint8(pixels.get(), w, h, 0, resized.data(), width, height, 0, channels)) {
    why = "stb_image_resize could not resize it from " + std::to_string(h) + "x" +
          std::to_string(w) + " to " + std::to_string(height) + "x" + std::to_string(width) +
          " (HxW)";
    return decoded::unreadable;
  }
  to_planar(resized.data(), plane, channels, channels, out);
  return decoded::ok;
}

decoded decode_image_as_stored(const std::string& path, int channels, int height, int width,
                               uint8_t* out, image_info& info, std::string& why) {
  auto pixels = load_pixels(path, 0, info, why);
  if (!pixels)
    return decoded::unreadable;
  const int stored = info.channels;
  const int kept = kept_channels(stored);
  if (info.width != width || info.height != height || kept > channels)
    return decoded::other_size;
  const int64_t plane = static_cast<int64_t>(height) * width;
  to_planar(pixels.get(), plane, stored, kept, out);
  for (int c = kept; c < channels; ++c)  // grey into RGB
    std::memcpy(out + c * plane, out, static_cast<size_t>(plane));
  return decoded::ok;
}

void resize_plane(const uint8_t* in, int in_w, int in_h, uint8_t* out, int out_w, int out_h) {
  if (!stbir_resize_uint8(in, in_w, in_h, 0, out, out_w, out_h, 0, 1))
    throw data_error("stb_image_resize could not resize a " + std::to_string(in_h) + "x" +
                     std::to_string(in_w) + " image to " + std::to_string(out_h) + "x" +
                     std::to_string(out_w) + " (HxW)");
}

torch::Tensor resize_images(const torch::Tensor& images, int64_t height, int64_t width) {
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  if (h == height && w == width)
    return images;
  auto in = images.contiguous();
  auto out = torch::empty({n, c, height, width}, torch::kUInt8);
  const uint8_t* src = in.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  const int64_t planes = n * c, in_plane = h * w, out_plane = height * width;
  // stb_image_resize only fails on a failed allocation of its small buffer.
  std::atomic<bool> failed{false};
  parallel_for(planes, 0, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p)
      if (!stbir_resize_uint8(src + p * in_plane, static_cast<int>(w), static_cast<int>(h), 0,
                              dst + p * out_plane, static_cast<int>(width),
                              static_cast<int>(height), 0, 1))
        failed = true;
  });
  if (failed)
    throw data_error("stb_image_resize could not resize " + std::to_string(h) + "x" +
                     std::to_string(w) + " images to " + std::to_string(height) + "x" +
                     std::to_string(width) + " (HxW)");
  return out;
}

torch::Tensor convert_channels(const torch::Tensor& images, int64_t channels,
                               const std::string& where) {
  auto x = images;
  const int64_t c = x.size(1);
  if (c == channels)
    return x;
  if (c == 2 || c == 4)  // alpha dropped
    x = x.narrow(1, 0, c - 1);
  const int64_t kept = x.size(1);
  if (kept == channels)
    return x.contiguous();
  if (kept == 1 && channels == 3)
    return x.expand({x.size(0), 3, x.size(2), x.size(3)}).contiguous();
  if (kept == 3 && channels == 1) {
    // stb_image's luma: (77 R + 150 G + 29 B) >> 8.
    auto weights = torch::tensor({77, 150, 29}, torch::kInt32).view({1, 3, 1, 1});
    return (x.to(torch::kInt32) * weights).sum(1, true).div(256, "floor").to(torch::kUInt8);
  }
  throw data_error(where + ": images of " + std::to_string(c) + " channels cannot be made " +
                   std::to_string(channels) + "-channel ones");
}

torch::Tensor fit_images(torch::Tensor images, const read_options& options,
                         const std::string& where, std::vector<std::string>& warnings) {
  if (!options.shape)
    return images;
  const auto& want = *options.shape;
  const auto own = sample_shape::image(images.size(1), images.size(2), images.size(3));
  if (want.flat)
    throw data_error(where + ": the data are images of " + own.to_string() +
                     ", the cluster's samples are " + want.to_string());
  if (own.channels != want.channels)
    images = convert_channels(images, want.channels, where);
  if (own.height != want.height || own.width != want.width) {
    if (!options.resize)
      throw data_error(where + ": images are " + own.to_string() + ", the cluster's samples are " +
                       want.to_string() + " (resizing is off)");
    images = resize_images(images, want.height, want.width);
    warnings.push_back(where + ": " + std::to_string(images.size(0)) + " images resized from " +
                       std::to_string(own.height) + "x" + std::to_string(own.width) + " to " +
                       std::to_string(want.height) + "x" + std::to_string(want.width) + " (HxW)");
  }
  return images;
}

void check_features(int64_t features, const read_options& options, const std::string& where) {
  if (!options.shape)
    return;
  const auto own = sample_shape::features(features);
  if (*options.shape != own)
    throw data_error(where + ": the data are " + own.to_string() + ", the cluster's samples are " +
                     options.shape->to_string());
}

torch::Tensor images_from_array(const torch::Tensor& x, const std::optional<sample_shape>& cluster,
                                const std::string& where) {
  auto dims_text = [&] {
    std::string s;
    for (auto d : x.sizes())
      s += (s.empty() ? "" : ", ") + std::to_string(d);
    return "[" + s + "]";
  };
  if (x.scalar_type() != torch::kUInt8)
    throw data_error(where + ": images " + dims_text() + " must be bytes (uint8, 0..255), not " +
                     std::string(c10::toString(x.scalar_type())));
  if (x.dim() == 3)
    return x.unsqueeze(1).contiguous();
  if (x.dim() != 4)
    throw data_error(where + ": an array of " + dims_text() +
                     " is not images ([N, H, W], [N, H, W, C] or [N, C, H, W])");
  const int64_t a = x.size(1), b = x.size(2), c = x.size(3);
  auto channel_count = [](int64_t k) { return k == 1 || k == 3 || k == 4; };
  bool last = false;
  const bool first_fits = cluster && !cluster->flat &&
                          sample_shape::image(a, b, c) == *cluster;
  const bool last_fits = cluster && !cluster->flat &&
                         sample_shape::image(c, a, b) == *cluster;
  if (first_fits != last_fits)
    last = last_fits;
  else if (channel_count(c))
    last = true;  // channels-last, also where both could be
  else if (channel_count(a))
    last = false;
  else
    throw data_error(where + ": cannot tell where the channels of " + dims_text() +
                     " are: neither the second nor the last dimension is 1, 3 or 4");
  auto nchw = last ? x.permute({0, 3, 1, 2}) : x;
  if (nchw.size(1) == 4)
    nchw = nchw.narrow(1, 0, 3);  // alpha dropped
  return nchw.contiguous();
}

} // namespace eg::data
