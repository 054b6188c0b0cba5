// XXH64 (seed 0) of a byte range, for the transfer's per-page checksums (src/transfer/page-checksum.ts), alone or
// while copying the range (the receiver's page into its pool). The same values as xxhash-wasm, which stays the
// checksum where the addon is not built and is the oracle of the tests (src/transfer/page-checksum.test.ts); computed
// here it reads the page where it lies, where xxhash-wasm first copies every byte into its WebAssembly memory
// (docs/protocol.md §8).
#include "xxh64.h"

#include <cstdint>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvf {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
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
inline uint32_t load32(const uint8_t* p) { return loadLe<uint32_t>(p); }
inline uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t merge(uint64_t h, uint64_t lane) { return (h ^ round(0, lane)) * kP1 + kP4; }

// a 64-bit store that skips the caches where the CPU has one (x86-64's movnti), else an ordinary one
inline void store64(uint8_t* p, uint64_t v) {
#if defined(__x86_64__)
  _mm_stream_si64(reinterpret_cast<long long*>(p), static_cast<long long>(v));
#else
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);  // back to the bytes loadLe read
#endif
  std::memcpy(p, &v, sizeof v);
#endif
}
// orders the streamed stores before anything after them
inline void storeFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// the tail (under 32 bytes, from p to end) and the avalanche
uint64_t finish(uint64_t h, size_t length, const uint8_t* p, const uint8_t* end) {
  h += static_cast<uint64_t>(length);
  for (; end - p >= 8; p += 8) h = rotl(h ^ round(0, load64(p)), 27) * kP1 + kP4;
  if (end - p >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(load32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; p++) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

// One pass for both: with `out`, each 32-byte stripe is stored there from the very registers it is hashed from, so the
// value covers the bytes as written, not as they were read. The stores bypass the caches where the CPU offers it: the
// destination (a KV page of the decode pool) is not read again until the whole transfer has landed, and a cached store
// would first read the line it overwrites.
template <bool kCopy>
uint64_t hashStripes(const uint8_t* p, size_t length, uint8_t* out) {
  const uint8_t* const end = p + length;
  uint64_t h;
  if (length >= 32) {
    // four lanes over 32-byte stripes
    uint64_t v1 = kP1 + kP2, v2 = kP2, v3 = 0, v4 = 0 - kP1;
    for (const uint8_t* last = end - 32; p <= last; p += 32) {
      const uint64_t a = load64(p), b = load64(p + 8), c = load64(p + 16), d = load64(p + 24);
      if constexpr (kCopy) {
        store64(out, a);
        store64(out + 8, b);
        store64(out + 16, c);
        store64(out + 24, d);
        out += 32;
      }
      v1 = round(v1, a);
      v2 = round(v2, b);
      v3 = round(v3, c);
      v4 = round(v4, d);
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(merge(merge(merge(h, v1), v2), v3), v4);
  } else {
    h = kP5;
  }
  if constexpr (kCopy) {
    storeFence();
    // the last 0..31 bytes: copied first, then hashed from where they now lie (no memcpy of nothing: an empty array's
    // data pointer may be null)
    if (end != p) std::memcpy(out, p, static_cast<size_t>(end - p));
    return finish(h, length, out, out + (end - p));
  } else {
    return finish(h, length, p, end);
  }
}

}  // namespace

uint64_t xxh64(const uint8_t* p, size_t length) { return hashStripes<false>(p, length, nullptr); }

uint64_t xxh64Copy(const uint8_t* source, size_t length, uint8_t* destination) {
  return hashStripes<true>(source, length, destination);
}

}  // namespace kvf
