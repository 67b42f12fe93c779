// links: eg_messages
// The index codings of sparse parts (messages/sparse.hpp).
#include "messages/codec.hpp"
#include "messages/sparse.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using namespace eg::messages;

namespace {

std::string name(index_coding c) {
  return c == index_coding::delta_varint ? "delta_varint"
         : c == index_coding::fixed_bits ? "fixed_bits"
                                         : "rice";
}

std::vector<uint32_t> decoded(const std::vector<uint8_t>& bytes, index_coding coding, size_t count,
                              uint64_t numel) {
  std::vector<uint32_t> out(count + 1, 0xdeadbeef);  // one beyond: must stay untouched
  decode_indices(bytes.data(), bytes.size(), coding, count, numel, out.data());
  BOOST_TEST(out.back() == 0xdeadbeefu, "decode_indices wrote beyond `count` entries");
  out.pop_back();
  return out;
}

// Both codings by hand (to test each whatever encode_indices chooses):
// the reference the encoder's output must equal.
std::vector<uint8_t> reference_varint(const std::vector<uint32_t>& idx) {
  std::vector<uint8_t> out;
  uint64_t next = 0;
  for (uint32_t i : idx) {
    uint64_t gap = i - next;
    next = uint64_t{i} + 1;
    do {
      uint8_t b = gap & 0x7f;
      gap >>= 7;
      out.push_back(static_cast<uint8_t>(b | (gap ? 0x80 : 0)));
    } while (gap);
  }
  return out;
}

std::vector<uint8_t> reference_fixed(const std::vector<uint32_t>& idx, uint64_t numel) {
  unsigned bits = 0;
  while (bits < 64 && (uint64_t{1} << bits) < numel) ++bits;
  std::vector<uint8_t> out((idx.size() * bits + 7) / 8, 0);
  size_t bit = 0;
  for (uint32_t i : idx)
    for (unsigned b = 0; b < bits; ++b, ++bit)
      if ((i >> b) & 1)
        out[bit / 8] = static_cast<uint8_t>(out[bit / 8] | (1u << (bit % 8)));
  return out;
}

// Golomb-Rice with parameter b, bit by bit: the byte b, then per gap
// g >> b ones, a zero and the b low bits of g, LSB first.
std::vector<uint8_t> reference_rice(const std::vector<uint32_t>& idx, unsigned b) {
  std::vector<bool> bits;
  uint64_t next = 0;
  for (uint32_t i : idx) {
    uint64_t gap = i - next;
    next = uint64_t{i} + 1;
    for (uint64_t q = gap >> b; q > 0; --q) bits.push_back(true);
    bits.push_back(false);
    for (unsigned k = 0; k < b; ++k) bits.push_back((gap >> k) & 1);
  }
  std::vector<uint8_t> out(1 + (bits.size() + 7) / 8, 0);
  out[0] = static_cast<uint8_t>(b);
  for (size_t k = 0; k < bits.size(); ++k)
    if (bits[k]) out[1 + k / 8] = static_cast<uint8_t>(out[1 + k / 8] | (1u << (k % 8)));
  return out;
}

// The shortest Rice coding (the smallest parameter among equals), sized by
// counting before it is built (b = 0 over a gap of 2^32 is 2^32 bits).
std::vector<uint8_t> best_reference_rice(const std::vector<uint32_t>& idx) {
  unsigned best = 0;
  uint64_t least = UINT64_MAX;
  for (unsigned b = 0; b < 32; ++b) {
    uint64_t bits = 0, next = 0;
    for (uint32_t i : idx) {
      bits += ((i - next) >> b) + 1 + b;
      next = uint64_t{i} + 1;
    }
    if ((bits + 7) / 8 < least) {
      least = (bits + 7) / 8;
      best = b;
    }
  }
  return reference_rice(idx, best);
}

// Encodes, checks the choice and the bytes against the references, decodes
// with every coding and compares.
void check_round_trip(const std::vector<uint32_t>& idx, uint64_t numel) {
  BOOST_TEST_CONTEXT(idx.size() << " indices of " << numel) {
    auto varint = reference_varint(idx);
    auto fixed = reference_fixed(idx, numel);
    auto rice = best_reference_rice(idx);
    BOOST_TEST(fixed.size() == fixed_index_bytes(idx.size(), numel));
    index_coding chosen = index_coding::delta_varint;
    auto bytes = encode_indices(idx.data(), idx.size(), numel, chosen);
    index_coding smallest = fixed.size() <= varint.size() && fixed.size() <= rice.size()
                              ? index_coding::fixed_bits
                            : rice.size() < varint.size() ? index_coding::rice
                                                          : index_coding::delta_varint;
    BOOST_TEST(name(chosen) == name(smallest));
    BOOST_TEST(bytes.size() == std::min({varint.size(), fixed.size(), rice.size()}));
    if (chosen == index_coding::rice)  // the parameter may differ among equal sizes
      BOOST_TEST((decoded(bytes, index_coding::rice, idx.size(), numel) == idx));
    else
      BOOST_TEST((bytes == (chosen == index_coding::fixed_bits ? fixed : varint)));
    BOOST_TEST((decoded(varint, index_coding::delta_varint, idx.size(), numel) == idx));
    BOOST_TEST((decoded(fixed, index_coding::fixed_bits, idx.size(), numel) == idx));
    BOOST_TEST((decoded(rice, index_coding::rice, idx.size(), numel) == idx));
  }
}

std::vector<uint32_t> random_set(std::mt19937_64& rng, uint64_t numel, size_t count) {
  std::vector<uint32_t> idx;
  if (count * 4 > numel) {  // dense: keep each with probability count/numel
    for (uint64_t i = 0; i < numel; ++i)
      if (rng() % numel < count) idx.push_back(static_cast<uint32_t>(i));
  } else {
    while (idx.size() < count) idx.push_back(static_cast<uint32_t>(rng() % numel));
    std::sort(idx.begin(), idx.end());
    idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  }
  return idx;
}

// The message of the codec_error decode_indices throws ("" if none).
std::string refusal(const std::vector<uint8_t>& bytes, index_coding coding, size_t count,
                    uint64_t numel) {
  std::vector<uint32_t> out(count + 1);
  try {
    decode_indices(bytes.data(), bytes.size(), coding, count, numel, out.data());
  } catch (const codec_error& e) {
    return e.what();
  }
  return "";
}

std::string encode_refusal(const std::vector<uint32_t>& idx, uint64_t numel) {
  index_coding chosen;
  try {
    encode_indices(idx.data(), idx.size(), numel, chosen);
  } catch (const codec_error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& what, const std::string& part) {
  return what.find(part) != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(sparse)

BOOST_AUTO_TEST_CASE(index_bits_is_ceil_log2) {
  BOOST_TEST(index_bits(0) == 0u);
  BOOST_TEST(index_bits(1) == 0u);
  BOOST_TEST(index_bits(2) == 1u);
  BOOST_TEST(index_bits(3) == 2u);
  BOOST_TEST(index_bits(4) == 2u);
  BOOST_TEST(index_bits(5) == 3u);
  BOOST_TEST(index_bits(61706) == 16u);
  BOOST_TEST(index_bits(65536) == 16u);
  BOOST_TEST(index_bits(65537) == 17u);
  BOOST_TEST(index_bits(uint64_t{1} << 32) == 32u);
  BOOST_TEST(fixed_index_bytes(10, 61706) == 20u);
  BOOST_TEST(fixed_index_bytes(3, 8) == 2u);  // 9 bits
  BOOST_TEST(fixed_index_bytes(0, 1000) == 0u);
}

BOOST_AUTO_TEST_CASE(the_varint_convention) {
  // Gaps from -1: 0 -> 0, 1 -> 0 (next to 0), 129 -> 127, 300 -> 170 = 0xaa 0x01.
  std::vector<uint32_t> idx = {0, 1, 129, 300};
  BOOST_TEST((reference_varint(idx) == std::vector<uint8_t>{0x00, 0x00, 0x7f, 0xaa, 0x01}));
  BOOST_TEST((decoded({0x00, 0x00, 0x7f, 0xaa, 0x01}, index_coding::delta_varint, 4, 1000) == idx));
  // Fixed bits, LSB first: 3 and 5 in 3 bits are 011 and 101: byte 0b00101011.
  BOOST_TEST((decoded({0x2b}, index_coding::fixed_bits, 2, 8) == std::vector<uint32_t>{3, 5}));
  // Rice, b = 2: 5 and 6 are gaps 5 (q 1, low 01: bits 1 0 1 0) and 0 (0 0 0):
  // 1010000, LSB first 0x05.
  BOOST_TEST((reference_rice({5, 6}, 2) == std::vector<uint8_t>{0x02, 0x05}));
  BOOST_TEST((decoded({0x02, 0x05}, index_coding::rice, 2, 10) == std::vector<uint32_t>{5, 6}));
}

BOOST_AUTO_TEST_CASE(edge_sets_round_trip) {
  check_round_trip({}, 0);
  check_round_trip({}, 61706);
  check_round_trip({0}, 1);
  check_round_trip({0}, 61706);
  check_round_trip({61705}, 61706);
  check_round_trip({0, 61705}, 61706);
  check_round_trip({0, 1}, 2);
  std::vector<uint32_t> all(1000);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  check_round_trip(all, 1000);  // every index
  check_round_trip(all, 1u << 30);  // a dense run in a large model
  // Huge gaps: 5-byte varints, 32-bit fixed indices.
  const uint64_t most = uint64_t{1} << 32;
  check_round_trip({0, 0xffffffffu}, most);
  check_round_trip({0xfffffffeu, 0xffffffffu}, most);
  check_round_trip({1u << 28, 1u << 31, 0xfffffff0u}, most);
  // Every width of fixed bits, entries straddling bytes and words.
  for (unsigned bits = 1; bits <= 32; ++bits) {
    uint64_t numel = uint64_t{1} << bits;
    std::vector<uint32_t> idx;
    for (uint64_t i = 0; i < 37 && i < numel; ++i)
      idx.push_back(static_cast<uint32_t>(numel - 1 - (std::min<uint64_t>(37, numel) - 1 - i)));
    check_round_trip(idx, numel);
  }
}

BOOST_AUTO_TEST_CASE(random_sets_round_trip) {
  std::mt19937_64 rng(2024);
  const uint64_t numels[] = {2, 7, 100, 61706, 1u << 20, 3000017, uint64_t{1} << 32};
  for (uint64_t numel : numels)
    for (double density : {0.0005, 0.01, 0.1, 0.5, 1.0}) {
      size_t count = std::min<size_t>(static_cast<size_t>(density * numel), 20000);
      if (numel > (1u << 22) && count * 4 > numel) continue;
      check_round_trip(random_set(rng, numel, count), numel);
    }
}

BOOST_AUTO_TEST_CASE(the_smaller_coding_is_chosen) {
  index_coding chosen;
  // Sparse over a big model: gaps of ~1000 take 2 varint bytes, fixed 26 bits.
  std::vector<uint32_t> sparse;
  for (uint32_t i = 0; i < 1000; ++i) sparse.push_back(i * 1000);
  auto bytes = encode_indices(sparse.data(), sparse.size(), 50'000'000, chosen);
  BOOST_TEST(name(chosen) == "rice");
  // Gaps of 999: with b = 9 a one, a zero and 9 low bits, 11 bits an index
  // (b = 10 takes 11 too, but 11 for the first gap of 0, where b = 9 takes 10).
  BOOST_TEST(bytes.size() == 1 + (10 + 999 * 11 + 7) / 8u);
  BOOST_TEST(bytes[0] == 9u);
  // Gaps spread over 1 .. 2^20: Rice's unary part grows, varints win.
  std::vector<uint32_t> spread;
  std::mt19937_64 rng(3);
  for (uint64_t at = 0; spread.size() < 200;) {
    at += 1 + (rng() % 2 ? rng() % 4 : rng() % (1u << 20));
    spread.push_back(static_cast<uint32_t>(at));
  }
  bytes = encode_indices(spread.data(), spread.size(), 1u << 30, chosen);
  BOOST_TEST(name(chosen) == "delta_varint");
  BOOST_TEST((bytes == reference_varint(spread)));
  // One index of a small model: its 7 fixed bits beat Rice's parameter byte
  // (and tie with a varint byte).
  std::vector<uint32_t> one{42};
  bytes = encode_indices(one.data(), one.size(), 100, chosen);
  BOOST_TEST(name(chosen) == "fixed_bits");
  BOOST_TEST(bytes.size() == 1u);
  // Every third index, and a keyframe's every index: Rice's 3 bits and 1
  // bit beat 7 (or 16) fixed bits.
  std::vector<uint32_t> dense;
  for (uint32_t i = 0; i < 100; i += 3) dense.push_back(i);
  bytes = encode_indices(dense.data(), dense.size(), 100, chosen);
  BOOST_TEST(name(chosen) == "rice");
  BOOST_TEST(bytes.size() == 1 + (2 + 33 * 3 + 7) / 8u);  // gap 0 first: 2 bits at b = 1
  std::vector<uint32_t> all(61706);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  bytes = encode_indices(all.data(), all.size(), all.size(), chosen);
  BOOST_TEST(name(chosen) == "rice");
  BOOST_TEST(bytes.size() == 1 + (61706 + 7) / 8u);
}

BOOST_AUTO_TEST_CASE(large_sets_round_trip) {
  std::mt19937_64 rng(5);
  const uint64_t numel = 25'000'000;
  auto idx = random_set(rng, numel, 1'000'000);
  check_round_trip(idx, numel);
}

BOOST_AUTO_TEST_CASE(encoding_refuses_bad_indices) {
  std::string what = encode_refusal({3, 70000}, 61706);
  BOOST_TEST(has(what, "index 1 is 70000, beyond the model's 61706 parameters"), what);
  what = encode_refusal({3, 9, 8}, 100);
  BOOST_TEST(has(what, "not increasing at entry 2"), what);
  what = encode_refusal({3, 9, 9}, 100);  // a duplicate
  BOOST_TEST(has(what, "not increasing at entry 2"), what);
  what = encode_refusal({0}, 0);
  BOOST_TEST(has(what, "index 0 is 0, beyond"), what);
  what = encode_refusal({0xffffffffu, 0}, uint64_t{1} << 32);  // no wrap-around after the largest
  BOOST_TEST(has(what, "not increasing at entry 1"), what);
  what = encode_refusal({1}, (uint64_t{1} << 32) + 1);
  BOOST_TEST(has(what, "32-bit"), what);
}

BOOST_AUTO_TEST_CASE(decoding_refuses_out_of_range_indices) {
  // 70000 = 0xf0 0xa2 0x04 as a varint (the first gap counts from -1).
  std::vector<uint8_t> varint = reference_varint({70000});
  std::string what = refusal(varint, index_coding::delta_varint, 1, 61706);
  BOOST_TEST(has(what, "index 0 is 70000, beyond the model's 61706 parameters"), what);
  varint = reference_varint({5, 61706});
  what = refusal(varint, index_coding::delta_varint, 2, 61706);
  BOOST_TEST(has(what, "index 1 is 61706, beyond"), what);
  // 17 bits can say 70000 of 65537.
  auto fixed = reference_fixed({1, 70000}, 65537);
  what = refusal(fixed, index_coding::fixed_bits, 2, 65537);
  BOOST_TEST(has(what, "index 1 is 70000, beyond the model's 65537 parameters"), what);
  // The same in the tail of a long message.
  std::vector<uint32_t> many;
  for (uint32_t i = 0; i < 100; ++i) many.push_back(i * 600);
  many.back() = 70000;
  fixed = reference_fixed(many, 65537);
  what = refusal(fixed, index_coding::fixed_bits, many.size(), 65537);
  BOOST_TEST(has(what, "index 99 is 70000"), what);
}

BOOST_AUTO_TEST_CASE(decoding_refuses_indices_not_increasing) {
  auto fixed = reference_fixed({1, 5, 9, 4}, 1000);
  std::string what = refusal(fixed, index_coding::fixed_bits, 4, 1000);
  BOOST_TEST(has(what, "indices not increasing at entry 3"), what);
  fixed = reference_fixed({1, 5, 5}, 1000);  // a duplicate
  what = refusal(fixed, index_coding::fixed_bits, 3, 1000);
  BOOST_TEST(has(what, "indices not increasing at entry 2"), what);
  // Early in a long message (the fast path).
  std::vector<uint32_t> many;
  for (uint32_t i = 0; i < 100; ++i) many.push_back(i * 10);
  many[3] = many[2];
  fixed = reference_fixed(many, 1000);
  what = refusal(fixed, index_coding::fixed_bits, many.size(), 1000);
  BOOST_TEST(has(what, "indices not increasing at entry 3"), what);
}

BOOST_AUTO_TEST_CASE(decoding_refuses_truncated_and_overlong_varints) {
  // Truncated inside a varint, and entries missing.
  std::string what = refusal({0x00, 0xaa}, index_coding::delta_varint, 2, 1000);
  BOOST_TEST(has(what, "inside the varint of entry 1"), what);
  what = refusal({0x00, 0x01}, index_coding::delta_varint, 3, 1000);
  BOOST_TEST(has(what, "end before entry 2 of 3"), what);
  what = refusal({}, index_coding::delta_varint, 1, 1000);
  BOOST_TEST(has(what, "end before entry 0"), what);
  // Six bytes, and a padded zero (0x80 0x00 says 0 in two bytes).
  what = refusal({0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, index_coding::delta_varint, 1,
                 uint64_t{1} << 32);
  BOOST_TEST(has(what, "longer than 5 bytes"), what);
  what = refusal({0x80, 0x00}, index_coding::delta_varint, 1, 1000);
  BOOST_TEST(has(what, "overlong"), what);
  // A five-byte gap beyond 32 bits is out of range.
  what = refusal({0xff, 0xff, 0xff, 0xff, 0x7f}, index_coding::delta_varint, 1,
                 uint64_t{1} << 32);
  BOOST_TEST(has(what, "beyond"), what);
  // The largest index, 2^32 - 1, in five bytes is accepted.
  BOOST_TEST((decoded({0xff, 0xff, 0xff, 0xff, 0x0f}, index_coding::delta_varint, 1,
                      uint64_t{1} << 32) == std::vector<uint32_t>{0xffffffffu}));
}

BOOST_AUTO_TEST_CASE(decoding_refuses_trailing_bytes_and_wrong_lengths) {
  auto varint = reference_varint({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  varint.push_back(0);
  varint.push_back(0);
  std::string what = refusal(varint, index_coding::delta_varint, 10, 1000);
  BOOST_TEST(has(what, "12 index bytes for 10 entries"), what);
  auto fixed = reference_fixed({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1000);  // 10 bits each: 13 bytes
  BOOST_REQUIRE(fixed.size() == 13u);
  fixed.push_back(0);
  what = refusal(fixed, index_coding::fixed_bits, 10, 1000);
  BOOST_TEST(has(what, "14 index bytes for 10 entries"), what);
  fixed.resize(12);
  what = refusal(fixed, index_coding::fixed_bits, 10, 1000);
  BOOST_TEST(has(what, "12 index bytes for 10 entries"), what);
  // Padding bits after the last index must be zero.
  fixed = reference_fixed({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1000);
  fixed.back() = static_cast<uint8_t>(fixed.back() | 0x80);
  what = refusal(fixed, index_coding::fixed_bits, 10, 1000);
  BOOST_TEST(has(what, "padding"), what);
  // Bytes for no entries.
  what = refusal({0}, index_coding::delta_varint, 0, 1000);
  BOOST_TEST(has(what, "1 index bytes for 0 entries"), what);
}

BOOST_AUTO_TEST_CASE(decoding_refuses_malformed_rice_codes) {
  // 5, 6 with b = 2 is {0x02, 0x05} (the_varint_convention).
  std::string what = refusal({0x20, 0x05}, index_coding::rice, 2, 10);
  BOOST_TEST(has(what, "rice parameter 32 is above 31"), what);
  what = refusal({}, index_coding::rice, 0, 10);
  BOOST_TEST(has(what, "without their parameter byte"), what);
  // A third entry: its quotient's zero is the padding bit, its low bits are missing.
  what = refusal({0x02, 0x05}, index_coding::rice, 3, 10);
  BOOST_TEST(has(what, "2 index bytes end inside the code of entry 2 of 3"), what);
  what = refusal({0x02, 0x05, 0x00}, index_coding::rice, 2, 10);
  BOOST_TEST(has(what, "3 index bytes for 2 entries: 1 left over"), what);
  what = refusal({0x02, 0x85}, index_coding::rice, 2, 10);
  BOOST_TEST(has(what, "padding"), what);
  what = refusal({0x02, 0x05}, index_coding::rice, 2, 6);
  BOOST_TEST(has(what, "index 1 is 6, beyond the model's 6 parameters"), what);
  // A long run of ones stops as soon as it is beyond the model.
  what = refusal({0x00, 0xff, 0xff, 0xff, 0xff}, index_coding::rice, 1, 10);
  BOOST_TEST(has(what, "index 0 is 10, beyond"), what);
}

BOOST_AUTO_TEST_CASE(decoding_refuses_impossible_counts_and_sizes) {
  std::string what = refusal({}, index_coding::fixed_bits, 0, (uint64_t{1} << 32) + 1);
  BOOST_TEST(has(what, "32-bit"), what);
  what = refusal({0x00, 0x00, 0x00}, index_coding::delta_varint, 3, 2);
  BOOST_TEST(has(what, "3 indices into 2 parameters"), what);
  what = refusal({}, static_cast<index_coding>(7), 0, 10);
  BOOST_TEST(has(what, "unknown index coding 7"), what);
}

BOOST_AUTO_TEST_CASE(random_bytes_never_crash) {
  // Whatever the bytes, decoding gives valid indices or throws codec_error.
  std::mt19937_64 rng(77);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    size_t count = rng() % 20;
    uint64_t numel = 1 + rng() % 5000;
    auto coding = static_cast<index_coding>(rng() % 3);
    std::vector<uint8_t> bytes(rng() % 40);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() % 4 ? rng() % 8 : rng());
    std::vector<uint32_t> out(count);
    try {
      decode_indices(bytes.data(), bytes.size(), coding, count, numel, out.data());
      ++accepted;
      for (size_t k = 0; k < count; ++k) {
        BOOST_REQUIRE(out[k] < numel);
        if (k) BOOST_REQUIRE(out[k] > out[k - 1]);
      }
    } catch (const codec_error&) {
    }
  }
  BOOST_TEST_MESSAGE(accepted << " of 20000 random index byte strings decoded");
}

BOOST_AUTO_TEST_SUITE_END()
