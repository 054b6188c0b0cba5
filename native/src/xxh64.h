// XXH64 with seed 0, alone or fused with a copy (xxh64.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvf {

uint64_t xxh64(const uint8_t* data, size_t length);
// copies `length` bytes from `source` to `destination` (not overlapping) and returns their XXH64, in one pass
uint64_t xxh64Copy(const uint8_t* source, size_t length, uint8_t* destination);

}  // namespace kvf
