#pragma once
// Index coding of sparse vectors over a flattened model: the positions of the
// entries a sparse gossip message carries (messages::sparse_part). No torch
// and no CAF in this layer.
//
// Three codings, of `count` strictly increasing indices, each < numel:
//
//  - delta_varint: for each entry, the number of positions skipped since the
//    previous entry, as an unsigned LEB128 varint (7 bits a byte, least
//    significant group first, high bit set on every byte but the last). The
//    first entry counts from -1, so entry k stores idx[k] - idx[k-1] - 1 with
//    idx[-1] = -1 (a run of consecutive indices is a run of zero bytes). A
//    varint has at most 5 bytes and no superfluous trailing zero groups.
//  - fixed_bits: each index in index_bits(numel) = ceil(log2(numel)) bits,
//    packed LSB-first: entry k occupies bits [k*b, (k+1)*b) of the stream,
//    stream bit j being bit j%8 of byte j/8. The stream is
//    fixed_index_bytes(count, numel) bytes long; the padding bits of its last
//    byte are zero.
//  - rice: the gaps of delta_varint (idx[k] - idx[k-1] - 1), Golomb-Rice
//    coded with parameter b (0..31), the first byte: for each gap g, g >> b
//    one bits, a zero bit, then the b low bits of g (least significant
//    first). Bits packed LSB-first after that byte as in fixed_bits, the
//    padding bits of the last byte zero and no byte left over. Top-k
//    positions are close to uniformly spread, their gaps close to
//    geometric, for which this is the optimal prefix code: about
//    log2(mean gap) + 1.5 bits an index, where a varint takes 8 or 16.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace eg::messages {

class codec_error;  // messages/codec.hpp, which includes this header

enum class index_coding : uint8_t { delta_varint = 0, fixed_bits = 1, rice = 2 };

/// The largest numel an index coding accepts (indices are 32-bit).
inline constexpr uint64_t max_sparse_numel = uint64_t{1} << 32;

/// Bits of one index in the fixed_bits coding: ceil(log2(numel)), 0 for a
/// numel of 0 or 1. Throws codec_error for numel > max_sparse_numel.
unsigned index_bits(uint64_t numel);

/// Bytes of `count` indices in the fixed_bits coding: ceil(count * bits / 8).
/// Throws codec_error for numel > max_sparse_numel.
size_t fixed_index_bytes(size_t count, uint64_t numel);

/// Encodes `count` strictly increasing indices, each < numel, in the
/// smallest of the codings (fixed_bits on a tie, then rice) and says which
/// in `chosen`. Throws codec_error on unsorted or out-of-range input
/// and for numel > max_sparse_numel.
std::vector<uint8_t> encode_indices(const uint32_t* idx, size_t count, uint64_t numel,
                                    index_coding& chosen);

/// Decodes `size` bytes of indices coded as `coding` into out[0..count) and
/// checks them: exactly `count` indices, strictly increasing, each < numel,
/// every byte used (no trailing bytes, no truncated or overlong varint;
/// fixed_bits exactly fixed_index_bytes(count, numel) bytes with zero
/// padding; rice a parameter below 32 and zero padding). Throws codec_error saying what is wrong.
void decode_indices(const uint8_t* bytes, size_t size, index_coding coding, size_t count,
                    uint64_t numel, uint32_t* out);

} // namespace eg::messages
