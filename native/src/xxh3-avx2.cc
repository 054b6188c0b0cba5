// The AVX2 form of XXH3's long-input loop (xxh3-long.h), compiled for that target whatever the build machine's default;
// xxh3.cc calls it only when the CPU reports AVX2.
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif

#include <immintrin.h>

#include "xxh3-long.h"

namespace kvf {
namespace {

// Two 256-bit halves a stripe. The copy's stores skip the caches (the page is not read again until the whole transfer
// has landed, and a cached store would first read the line it overwrites) where the destination is 16-byte aligned,
// as every page of a pool is (V8 gives large buffers 16-byte alignment, not 32: a 32-byte streamed store would never
// apply), 16 bytes at a time; other destinations (tests) take ordinary stores.
struct Avx2 {
  static void stripe(uint64_t* acc, const uint8_t* p, const uint8_t* secret, uint8_t* out) {
    const bool stream = (reinterpret_cast<uintptr_t>(out) & 15) == 0;
    for (size_t h = 0; h < 2; h++) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
      if (out != nullptr) {
        if (stream) {
          _mm_stream_si128(reinterpret_cast<__m128i*>(out + 32 * h), _mm256_castsi256_si128(v));
          _mm_stream_si128(reinterpret_cast<__m128i*>(out + 32 * h + 16), _mm256_extracti128_si256(v, 1));
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * h), v);
        }
      }
      const __m256i key = _mm256_xor_si256(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + 32 * h)));
      const __m256i product = _mm256_mul_epu32(key, _mm256_shuffle_epi32(key, _MM_SHUFFLE(0, 3, 0, 1)));
      __m256i* a = reinterpret_cast<__m256i*>(acc) + h;
      const __m256i swapped = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2));
      _mm256_store_si256(a, _mm256_add_epi64(product, _mm256_add_epi64(_mm256_load_si256(a), swapped)));
    }
  }
  static void scramble(uint64_t* acc, const uint8_t* secret) {
    const __m256i prime = _mm256_set1_epi32(static_cast<int>(kP32_1));
    for (size_t h = 0; h < 2; h++) {
      __m256i* a = reinterpret_cast<__m256i*>(acc) + h;
      __m256i x = _mm256_load_si256(a);
      x = _mm256_xor_si256(_mm256_xor_si256(x, _mm256_srli_epi64(x, 47)),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(secret + 32 * h)));
      const __m256i low = _mm256_mul_epu32(x, prime);
      const __m256i high = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), prime);
      _mm256_store_si256(a, _mm256_add_epi64(low, _mm256_slli_epi64(high, 32)));
    }
  }
  // orders the streamed stores before anything after them
  static void fence() { _mm_sfence(); }
};

}  // namespace

uint64_t xxh3LongAvx2(const uint8_t* p, size_t length, uint8_t* out) { return hashLong<Avx2>(p, length, out); }

}  // namespace kvf

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
