// Q5_0 blocks rewritten as Q8_0 blocks of the same values (widen-q5-0.cc; src/model/widen-q5-0.ts says why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace kvf {

constexpr size_t kQ5_0BlockBytes = 22;  // the Q8_0 blocks written are kQ8BlockBytes (kernels.h)

// block b of src (22 bytes) becomes block b of dst (34 bytes): the f16 scale copied, then each value's u − 16 as int8
void widenQ5_0(const uint8_t* src, size_t blocks, uint8_t* dst);

}  // namespace kvf
