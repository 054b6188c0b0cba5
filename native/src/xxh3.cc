// XXH3 (64-bit, seed 0, the default secret) of a byte range, for the transfer's per-page checksums
// (src/transfer/page-checksum.ts), alone or while copying the range (the receiver's page into its pool). The same values
// as hash-wasm's xxhash3, which stays the checksum where the addon is not built and is the oracle of the tests
// (src/transfer/page-checksum.test.ts). Written from the XXH3 specification; the long-input loop has an AVX2 form,
// picked at run time, and a portable one, and they give the same values (the tests run both).
#include "xxh3.h"

#include "xxh3-long.h"

#include <cstdint>
#include <cstring>

namespace kvf {
namespace {

// inputs up to this long take the short forms (hashShort)
constexpr size_t kMidSizeMax = 240;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint32_t load32(const uint8_t* p) { return loadLe<uint32_t>(p); }
inline uint64_t avalanche64(uint64_t h) {
  h ^= h >> 33;
  h *= kP64_2;
  h ^= h >> 29;
  h *= kP64_3;
  return h ^ (h >> 32);
}
inline uint64_t rrmxmx(uint64_t h, uint64_t length) {
  h ^= rotl(h, 49) ^ rotl(h, 24);
  h *= kMx2;
  h ^= (h >> 35) + length;
  h *= kMx2;
  return h ^ (h >> 28);
}
inline uint64_t mix16(const uint8_t* p, const uint8_t* secret) {
  return mulFold(load64(p) ^ load64(secret), load64(p + 8) ^ load64(secret + 8));
}

// inputs of 0 to 240 bytes
uint64_t hashShort(const uint8_t* p, size_t length) {
  const uint8_t* const s = kSecret;
  const uint64_t n = length;
  if (length > 128) {
    uint64_t acc = n * kP64_1;
    for (size_t i = 0; i < 8; i++) acc += mix16(p + 16 * i, s + 16 * i);
    uint64_t accEnd = mix16(p + length - 16, s + 136 - 17);
    acc = avalanche(acc);
    for (size_t i = 8; i < length / 16; i++) accEnd += mix16(p + 16 * i, s + 16 * (i - 8) + 3);
    return avalanche(acc + accEnd);
  }
  if (length > 16) {
    uint64_t acc = n * kP64_1;
    // pairs from both ends, the outermost first in the secret
    for (size_t i = 0, pairs = (length - 1) / 32 + 1; i < pairs; i++) {
      acc += mix16(p + 16 * i, s + 32 * i);
      acc += mix16(p + length - 16 * (i + 1), s + 32 * i + 16);
    }
    return avalanche(acc);
  }
  if (length > 8) {
    const uint64_t lo = load64(p) ^ (load64(s + 24) ^ load64(s + 32));
    const uint64_t hi = load64(p + length - 8) ^ (load64(s + 40) ^ load64(s + 48));
    return avalanche(n + __builtin_bswap64(lo) + hi + mulFold(lo, hi));
  }
  if (length >= 4) {
    const uint64_t in = load32(p + length - 4) + (static_cast<uint64_t>(load32(p)) << 32);
    return rrmxmx(in ^ (load64(s + 8) ^ load64(s + 16)), n);
  }
  if (length > 0) {
    const uint32_t combined = (static_cast<uint32_t>(p[0]) << 16) | (static_cast<uint32_t>(p[length >> 1]) << 24) |
                              static_cast<uint32_t>(p[length - 1]) | (static_cast<uint32_t>(length) << 8);
    return avalanche64(combined ^ static_cast<uint64_t>(load32(s) ^ load32(s + 4)));
  }
  return avalanche64(load64(s + 56) ^ load64(s + 64));
}

// One stripe into the eight accumulators, then (after each block) their scramble; with `out`, the stripe is stored
// there from the registers it is hashed from, so the value covers the bytes as written, not as they were read.
// The stores are ordinary ones: movnti, 8 bytes at a time, made the copy slower here (8.3 against 11.2 GB/s into a
// 256 MiB pool), and this form runs only where the CPU lacks AVX2.
struct Portable {
  static void stripe(uint64_t* acc, const uint8_t* p, const uint8_t* secret, uint8_t* out) {
    uint64_t v[8];
    for (size_t i = 0; i < 8; i++) v[i] = load64(p + 8 * i);
    if (out != nullptr) {
      for (size_t i = 0; i < 8; i++) {
        uint64_t w = v[i];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);  // back to the bytes loadLe read
#endif
        std::memcpy(out + 8 * i, &w, sizeof w);
      }
    }
    for (size_t i = 0; i < 8; i++) {
      const uint64_t key = v[i] ^ load64(secret + 8 * i);
      acc[i ^ 1] += v[i];
      acc[i] += (key & 0xFFFFFFFFu) * (key >> 32);
    }
  }
  static void scramble(uint64_t* acc, const uint8_t* secret) {
    for (size_t i = 0; i < 8; i++) acc[i] = (acc[i] ^ (acc[i] >> 47) ^ load64(secret + 8 * i)) * kP32_1;
  }
  static void fence() {}
};

bool hasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

uint64_t hashLongBy(Xxh3Isa isa, const uint8_t* p, size_t length, uint8_t* out) {
#if defined(__x86_64__)
  if (isa == Xxh3Isa::avx2 && hasAvx2()) return xxh3LongAvx2(p, length, out);
#endif
  return hashLong<Portable>(p, length, out);
}

}  // namespace

const std::vector<Xxh3Isa>& xxh3Isas() {
  static const std::vector<Xxh3Isa> isas = hasAvx2() ? std::vector{Xxh3Isa::avx2, Xxh3Isa::portable}
                                                     : std::vector{Xxh3Isa::portable};
  return isas;
}

uint64_t xxh3(const uint8_t* p, size_t length, Xxh3Isa isa) {
  return length > kMidSizeMax ? hashLongBy(isa, p, length, nullptr) : hashShort(p, length);
}

uint64_t xxh3Copy(const uint8_t* source, size_t length, uint8_t* destination, Xxh3Isa isa) {
  if (length > kMidSizeMax) return hashLongBy(isa, source, length, destination);
  // a short page: copied, then hashed from where it now lies (no memcpy of nothing: an empty array's data pointer may
  // be null)
  if (length > 0) std::memcpy(destination, source, length);
  return hashShort(destination, length);
}

}  // namespace kvf
