#include "storage/record.hpp"

#include <capnp/serialize.h>
#include <kj/io.h>
#include <zlib.h>

#include <cstring>

namespace eg::storage::record {
namespace {

constexpr uint32_t format_version = 1;
constexpr size_t header_bytes = 12;

void put_u32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

uint32_t crc(const char* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(data), size));
}

} // namespace

std::string frame(const char (&magic)[5], capnp::MessageBuilder& message) {
  size_t body_bytes = capnp::computeSerializedSizeInWords(message) * sizeof(capnp::word);
  std::string out(header_bytes + body_bytes, '\0');
  kj::ArrayOutputStream stream(
      kj::arrayPtr(reinterpret_cast<kj::byte*>(&out[header_bytes]), body_bytes));
  capnp::writeMessage(stream, message);
  std::memcpy(&out[0], magic, 4);
  put_u32(&out[4], format_version);
  put_u32(&out[8], crc(out.data() + header_bytes, body_bytes));
  return out;
}

std::optional<kj::Array<capnp::word>> unframe(const std::string& bytes, const char (&magic)[5],
                                              const char* kind, std::string& problem) {
  if (bytes.size() < header_bytes) {
    problem = "record of " + std::to_string(bytes.size()) + " bytes is too short";
    return std::nullopt;
  }
  if (std::memcmp(bytes.data(), magic, 4) != 0) {
    problem = std::string("not a ") + kind + " record (bad magic)";
    return std::nullopt;
  }
  if (uint32_t v = get_u32(bytes.data() + 4); v != format_version) {
    problem = "format version " + std::to_string(v) + " is not supported (this build reads " +
              std::to_string(format_version) + ")";
    return std::nullopt;
  }
  const char* body = bytes.data() + header_bytes;
  size_t body_bytes = bytes.size() - header_bytes;
  if (crc(body, body_bytes) != get_u32(bytes.data() + 8)) {
    problem = "checksum mismatch";
    return std::nullopt;
  }
  if (body_bytes % sizeof(capnp::word) != 0) {
    problem = "body of " + std::to_string(body_bytes) + " bytes is not whole 8-byte words";
    return std::nullopt;
  }
  // The body sits 12 bytes into the value: copy it to word-aligned memory.
  auto words = kj::heapArray<capnp::word>(body_bytes / sizeof(capnp::word));
  std::memcpy(words.begin(), body, body_bytes);
  return words;
}

capnp::ReaderOptions reader_options(size_t words) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 2 * words + 1024;
  return options;
}

} // namespace eg::storage::record
