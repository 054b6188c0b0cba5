// XXH3 (64-bit, seed 0), alone or fused with a copy (xxh3.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvf {

// the forms of the long-input loop; every one gives the same values
enum class Xxh3Isa { avx2, portable };

// the forms this CPU runs, best first; the portable one is always last
const std::vector<Xxh3Isa>& xxh3Isas();
uint64_t xxh3(const uint8_t* data, size_t length, Xxh3Isa isa);
// copies `length` bytes from `source` to `destination` (not overlapping) and returns their XXH3, in one pass
uint64_t xxh3Copy(const uint8_t* source, size_t length, uint8_t* destination, Xxh3Isa isa);

}  // namespace kvf
