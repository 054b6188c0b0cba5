// XXH64 with seed 0 (xxh64.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvf {

uint64_t xxh64(const uint8_t* data, size_t length);

}  // namespace kvf
