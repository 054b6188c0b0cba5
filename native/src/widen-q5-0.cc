#include "widen-q5-0.h"

#include <array>
#include <cstring>

namespace kvf {
namespace {

// byte k of centre[b]: what turns a value's low nibble into its u − 16 when its fifth bit is bit k of b: 0 if the bit
// is set (u − 16 is the nibble), else 0xf0 (u − 16 = nibble − 16, the nibble with the int8's high bits set)
constexpr std::array<uint64_t, 256> centres() {
  std::array<uint64_t, 256> table{};
  for (int b = 0; b < 256; b++) {
    for (int k = 0; k < 8; k++) {
      if (((b >> k) & 1) == 0) table[b] |= uint64_t{0xf0} << (8 * k);
    }
  }
  return table;
}
constexpr std::array<uint64_t, 256> kCentre = centres();
constexpr uint64_t kLowNibbles = 0x0f0f0f0f0f0f0f0full;

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }

}  // namespace

// eight values at a time in 64-bit words (GGUF and every target kvfence builds for are little-endian): value j's
// nibble is the low half of byte j (j < 16) or the high half of byte j − 16, and its fifth bit bit j of the 32 bits
void widenQ5_0(const uint8_t* src, size_t blocks, uint8_t* dst) {
  for (size_t b = 0; b < blocks; b++, src += kQ5_0BlockBytes, dst += kQ8BlockBytes) {
    uint32_t high;
    std::memcpy(&high, src + 2, sizeof high);
    const uint64_t n0 = load64(src + 6);
    const uint64_t n1 = load64(src + 14);
    dst[0] = src[0];
    dst[1] = src[1];
    store64(dst + 2, (n0 & kLowNibbles) | kCentre[high & 0xff]);
    store64(dst + 10, (n1 & kLowNibbles) | kCentre[(high >> 8) & 0xff]);
    store64(dst + 18, ((n0 >> 4) & kLowNibbles) | kCentre[(high >> 16) & 0xff]);
    store64(dst + 26, ((n1 >> 4) & kLowNibbles) | kCentre[high >> 24]);
  }
}

}  // namespace kvf
