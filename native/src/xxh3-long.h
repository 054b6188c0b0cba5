// XXH3's constants, helpers and long-input loop (xxh3.cc), shared by the forms of that loop: xxh3.cc instantiates it
// with its portable stripe, xxh3-avx2.cc with its AVX2 one under that target. Everything here has internal linkage on
// purpose: each file compiles its own copy for its own target, so no copy built for AVX2 can be linked into the
// portable path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvf {

// the long-input loop compiled for AVX2 (xxh3-avx2.cc); only where the CPU has it
uint64_t xxh3LongAvx2(const uint8_t* p, size_t length, uint8_t* out);

namespace {  // one copy per target, above

constexpr uint64_t kP32_1 = 0x9E3779B1u;
constexpr uint64_t kP32_2 = 0x85EBCA77u;
constexpr uint64_t kP32_3 = 0xC2B2AE3Du;
constexpr uint64_t kP64_1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP64_2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP64_3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP64_4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP64_5 = 0x27D4EB2F165667C5ull;
constexpr uint64_t kMx1 = 0x165667919E3779F9ull;
constexpr uint64_t kMx2 = 0x9FB21C651E98DF25ull;

// the default secret (192 bytes)
alignas(64) constexpr uint8_t kSecret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, 0xde, 0xd4, 0x6d, 0xe9,
    0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, 0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78,
    0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, 0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6,
    0x81, 0x3a, 0x26, 0x4c, 0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, 0xa8, 0xfa, 0x76, 0x3f,
    0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, 0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31,
    0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, 0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff,
    0xfa, 0x13, 0x63, 0xeb, 0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, 0x45, 0xcb, 0x3a, 0x8f,
    0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};
constexpr size_t kStripe = 64;
// the stripes of a block: each consumes 8 more bytes of the secret, whose last 64 scramble the accumulators
constexpr size_t kStripesPerBlock = (sizeof kSecret - kStripe) / 8;

// a little-endian load, whatever the host (memcpy: no alignment assumed)
template <typename T>
inline T loadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  if constexpr (sizeof v == 8) v = __builtin_bswap64(v);
  if constexpr (sizeof v == 4) v = __builtin_bswap32(v);
#endif
  return v;
}
inline uint64_t load64(const uint8_t* p) { return loadLe<uint64_t>(p); }
// the 128-bit product's halves, xored
inline uint64_t mulFold(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}
inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= kMx1;
  return h ^ (h >> 32);
}

// inputs over 240 bytes: stripes of 64 bytes, the accumulators scrambled after each block of them, then the last 64
// bytes again (they overlap what came before, unless the length is a multiple of 64)
template <typename Isa>
uint64_t hashLong(const uint8_t* p, size_t length, uint8_t* out) {
  alignas(32) uint64_t acc[8] = {kP32_3, kP64_1, kP64_2, kP64_3, kP64_4, kP32_2, kP64_5, kP32_1};
  const size_t stripes = (length - 1) / kStripe;
  for (size_t n = 0; n < stripes; n++) {
    Isa::stripe(acc, p + n * kStripe, kSecret + 8 * (n % kStripesPerBlock), out == nullptr ? nullptr : out + n * kStripe);
    if (n % kStripesPerBlock == kStripesPerBlock - 1) Isa::scramble(acc, kSecret + sizeof kSecret - kStripe);
  }
  const uint8_t* last = p + length - kStripe;
  if (out != nullptr) {
    Isa::fence();
    // the 1..64 bytes no stripe covered: copied, then the last stripe hashed from where it now lies
    const size_t done = stripes * kStripe;
    std::memcpy(out + done, p + done, length - done);
    last = out + length - kStripe;
  }
  Isa::stripe(acc, last, kSecret + sizeof kSecret - kStripe - 7, nullptr);
  uint64_t h = length * kP64_1;
  for (size_t i = 0; i < 4; i++) {
    h += mulFold(acc[2 * i] ^ load64(kSecret + 11 + 16 * i), acc[2 * i + 1] ^ load64(kSecret + 11 + 16 * i + 8));
  }
  return avalanche(h);
}

}  // namespace
}  // namespace kvf
