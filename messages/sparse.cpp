#include "messages/sparse.hpp"

#include "messages/codec.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace eg::messages {

namespace {

constexpr size_t max_varint_bytes = 5;  // 35 bits hold any gap below 2^32

void check_numel(uint64_t numel) {
  if (numel > max_sparse_numel)
    throw codec_error("a sparse vector over " + std::to_string(numel) +
                      " parameters is larger than 32-bit indices reach");
}

size_t varint_size(uint32_t v) {
  return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

[[noreturn]] void beyond(size_t entry, uint64_t index, uint64_t numel) {
  throw codec_error("index " + std::to_string(entry) + " is " + std::to_string(index) +
                    ", beyond the model's " + std::to_string(numel) + " parameters");
}

[[noreturn]] void not_increasing(size_t entry) {
  throw codec_error("indices not increasing at entry " + std::to_string(entry));
}

uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

void store_le32(uint8_t* p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  std::memcpy(p, &v, sizeof v);
}

void encode_varint(const uint32_t* idx, size_t count, size_t bytes, std::vector<uint8_t>& out) {
  out.resize(bytes);
  uint8_t* at = out.data();
  uint64_t next = 0;  // idx[k-1] + 1 (0 before the first entry)
  for (size_t k = 0; k < count; ++k) {
    auto gap = static_cast<uint32_t>(idx[k] - next);
    next = uint64_t{idx[k]} + 1;
    while (gap >= 0x80) {
      *at++ = static_cast<uint8_t>(gap | 0x80);
      gap >>= 7;
    }
    *at++ = static_cast<uint8_t>(gap);
  }
}

void encode_fixed(const uint32_t* idx, size_t count, unsigned bits, size_t bytes,
                  std::vector<uint8_t>& out) {
  out.assign(bytes + 4, 0);  // room for a whole 32-bit store at the end
  uint8_t* at = out.data();
  uint64_t acc = 0;
  unsigned held = 0;  // bits in acc, < 32 between entries
  if (bits > 0)
    for (size_t k = 0; k < count; ++k) {
      acc |= static_cast<uint64_t>(idx[k]) << held;
      held += bits;
      if (held >= 32) {
        store_le32(at, static_cast<uint32_t>(acc));
        at += 4;
        acc >>= 32;
        held -= 32;
      }
    }
  store_le32(at, static_cast<uint32_t>(acc));  // the last partial word (padding bits are 0)
  out.resize(bytes);
}

// --- rice ---------------------------------------------------------------------------

constexpr unsigned max_rice_parameter = 31;

/// Bits of the gaps' Rice codes with parameter b (the parameter's byte not
/// counted).
uint64_t rice_bits(const uint32_t* idx, size_t count, unsigned b) {
  uint64_t bits = 0, next = 0;
  for (size_t k = 0; k < count; ++k) {
    const uint64_t gap = idx[k] - next;
    bits += (gap >> b) + 1 + b;
    next = uint64_t{idx[k]} + 1;
  }
  return bits;
}

/// The parameter with the fewest bits, and those bits.
std::pair<unsigned, uint64_t> best_rice(const uint32_t* idx, size_t count) {
  unsigned best = 0;
  uint64_t least = rice_bits(idx, count, 0);
  for (unsigned b = 1; b <= max_rice_parameter; ++b) {
    const uint64_t bits = rice_bits(idx, count, b);
    if (bits < least) {
      least = bits;
      best = b;
    }
  }
  return {best, least};
}

size_t rice_bytes(uint64_t bits) { return 1 + static_cast<size_t>((bits + 7) / 8); }

void encode_rice(const uint32_t* idx, size_t count, unsigned b, size_t bytes,
                 std::vector<uint8_t>& out) {
  out.assign(bytes, 0);
  out[0] = static_cast<uint8_t>(b);
  uint64_t bit = 8;  // position in the stream, the parameter's byte first
  auto put = [&out, &bit](uint64_t value, unsigned n) {  // n <= 32 bits, LSB first
    for (unsigned i = 0; i < n; ++i, ++bit)
      if ((value >> i) & 1u)
        out[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  };
  uint64_t next = 0;
  for (size_t k = 0; k < count; ++k) {
    const uint64_t gap = idx[k] - next;
    next = uint64_t{idx[k]} + 1;
    for (uint64_t q = gap >> b; q > 0; q -= std::min<uint64_t>(q, 32))
      put(~uint64_t{0}, static_cast<unsigned>(std::min<uint64_t>(q, 32)));
    ++bit;  // the zero that ends the quotient
    put(gap, b);
  }
}

void decode_rice(const uint8_t* bytes, size_t size, size_t count, uint64_t numel,
                 uint32_t* out) {
  if (size == 0)
    throw codec_error("rice-coded indices without their parameter byte");
  const unsigned b = bytes[0];
  if (b > max_rice_parameter)
    throw codec_error("rice parameter " + std::to_string(b) + " is above " +
                      std::to_string(max_rice_parameter));
  const uint64_t end = uint64_t{size} * 8;
  uint64_t bit = 8;
  auto get = [bytes, &bit]() { bool v = (bytes[bit / 8] >> (bit % 8)) & 1u; ++bit; return v; };
  auto cut_short = [size, count](size_t k) {
    return codec_error(std::to_string(size) + " index bytes end inside the code of entry " +
                       std::to_string(k) + " of " + std::to_string(count));
  };
  uint64_t next = 0;
  for (size_t k = 0; k < count; ++k) {
    uint64_t q = 0;
    for (;;) {
      if (bit == end)
        throw cut_short(k);
      if (!get())
        break;
      if ((++q << b) + next >= numel)  // already beyond: stop reading ones
        beyond(k, (q << b) + next, numel);
    }
    if (end - bit < b)
      throw cut_short(k);
    uint64_t low = 0;
    for (unsigned i = 0; i < b; ++i)
      low |= uint64_t{get()} << i;
    const uint64_t index = next + ((q << b) | low);
    if (index >= numel)
      beyond(k, index, numel);
    out[k] = static_cast<uint32_t>(index);
    next = index + 1;
  }
  if (end - bit >= 8)
    throw codec_error(std::to_string(size) + " index bytes for " + std::to_string(count) +
                      " entries: " + std::to_string((end - bit) / 8) + " left over");
  for (; bit < end; ++bit)
    if ((bytes[bit / 8] >> (bit % 8)) & 1u)
      throw codec_error("the padding bits after the last of " + std::to_string(count) +
                        " indices are not zero");
}

void decode_varint(const uint8_t* bytes, size_t size, size_t count, uint64_t numel,
                   uint32_t* out) {
  const uint8_t* at = bytes;
  const uint8_t* end = bytes + size;
  uint64_t next = 0;  // idx[k-1] + 1
  for (size_t k = 0; k < count; ++k) {
    if (at == end)
      throw codec_error(std::to_string(size) + " index bytes end before entry " +
                        std::to_string(k) + " of " + std::to_string(count));
    uint64_t gap = *at++;
    if (gap >= 0x80) {
      gap &= 0x7f;
      unsigned shift = 7;
      for (size_t n = 1;; ++n) {
        if (n == max_varint_bytes)
          throw codec_error("the varint of entry " + std::to_string(k) + " is longer than " +
                            std::to_string(max_varint_bytes) + " bytes");
        if (at == end)
          throw codec_error(std::to_string(size) + " index bytes end inside the varint of entry " +
                            std::to_string(k));
        uint64_t b = *at++;
        gap |= (b & 0x7f) << shift;
        shift += 7;
        if (b < 0x80) {
          if (b == 0)
            throw codec_error("the varint of entry " + std::to_string(k) +
                              " is overlong (a trailing zero byte)");
          break;
        }
      }
    }
    uint64_t index = next + gap;  // < 2^32 + 2^35: no overflow
    if (index >= numel)
      beyond(k, index, numel);
    out[k] = static_cast<uint32_t>(index);
    next = index + 1;
  }
  if (at != end)
    throw codec_error(std::to_string(size) + " index bytes for " + std::to_string(count) +
                      " entries: " + std::to_string(end - at) + " left over");
}

void decode_fixed(const uint8_t* bytes, size_t size, size_t count, uint64_t numel,
                  uint32_t* out) {
  const unsigned bits = index_bits(numel);
  const size_t expected = fixed_index_bytes(count, numel);
  if (size != expected)
    throw codec_error(std::to_string(size) + " index bytes for " + std::to_string(count) +
                      " entries of " + std::to_string(bits) + " bits (" +
                      std::to_string(expected) + " expected)");
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  // Entries whose 8-byte load stays within the bytes are read directly; the
  // last few from a zero-padded copy of the tail.
  size_t fast = 0;
  if (bits > 0 && size >= 8)
    fast = std::min(count, ((size - 8) * 8) / bits + 1);
  uint64_t next = 0;  // idx[k-1] + 1
  uint64_t bit = 0;
  size_t k = 0;
  for (; k < fast; ++k, bit += bits) {
    uint64_t index = (load_le64(bytes + bit / 8) >> (bit % 8)) & mask;
    if (index < next)
      not_increasing(k);
    if (index >= numel)
      beyond(k, index, numel);
    out[k] = static_cast<uint32_t>(index);
    next = index + 1;
  }
  if (k < count) {
    uint8_t tail[16] = {};
    size_t from = bit / 8;
    std::memcpy(tail, bytes + from, size - from);  // at most 8 + 4 bytes remain
    for (; k < count; ++k, bit += bits) {
      uint64_t index = bits ? (load_le64(tail + (bit / 8 - from)) >> (bit % 8)) & mask : 0;
      if (index < next)
        not_increasing(k);
      if (index >= numel)
        beyond(k, index, numel);
      out[k] = static_cast<uint32_t>(index);
      next = index + 1;
    }
  }
  if (bit % 8 != 0 && (bytes[size - 1] >> (bit % 8)) != 0)
    throw codec_error("the padding bits after the last of " + std::to_string(count) +
                      " indices are not zero");
}

} // namespace

unsigned index_bits(uint64_t numel) {
  check_numel(numel);
  return numel <= 1 ? 0 : 64 - static_cast<unsigned>(__builtin_clzll(numel - 1));
}

size_t fixed_index_bytes(size_t count, uint64_t numel) {
  return static_cast<size_t>((static_cast<uint64_t>(count) * index_bits(numel) + 7) / 8);
}

std::vector<uint8_t> encode_indices(const uint32_t* idx, size_t count, uint64_t numel,
                                    index_coding& chosen) {
  const size_t fixed = fixed_index_bytes(count, numel);
  // One pass checks the indices and sizes their varints.
  size_t varint = 0;
  uint64_t next = 0;  // idx[k-1] + 1
  for (size_t k = 0; k < count; ++k) {
    if (idx[k] >= numel)
      beyond(k, idx[k], numel);
    if (idx[k] < next)
      not_increasing(k);
    varint += varint_size(static_cast<uint32_t>(idx[k] - next));
    next = uint64_t{idx[k]} + 1;
  }
  const auto [b, bits] = best_rice(idx, count);
  const size_t rice = rice_bytes(bits);
  std::vector<uint8_t> out;
  if (fixed <= varint && fixed <= rice) {
    chosen = index_coding::fixed_bits;
    encode_fixed(idx, count, index_bits(numel), fixed, out);
  } else if (rice < varint) {
    chosen = index_coding::rice;
    encode_rice(idx, count, b, rice, out);
  } else {
    chosen = index_coding::delta_varint;
    encode_varint(idx, count, varint, out);
  }
  return out;
}

void decode_indices(const uint8_t* bytes, size_t size, index_coding coding, size_t count,
                    uint64_t numel, uint32_t* out) {
  check_numel(numel);
  if (count > numel)
    throw codec_error(std::to_string(count) + " indices into " + std::to_string(numel) +
                      " parameters");
  if (size > 0 && bytes == nullptr)
    throw codec_error("index bytes missing");
  switch (coding) {
    case index_coding::delta_varint: return decode_varint(bytes, size, count, numel, out);
    case index_coding::fixed_bits: return decode_fixed(bytes, size, count, numel, out);
    case index_coding::rice: return decode_rice(bytes, size, count, numel, out);
  }
  throw codec_error("unknown index coding " + std::to_string(static_cast<int>(coding)));
}

} // namespace eg::messages
