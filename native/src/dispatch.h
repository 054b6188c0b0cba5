// Which kernel tables this CPU can run, best first. Decided once per context from CPUID, never from the build machine.
#pragma once

#include <vector>

#include "kernels.h"

namespace kvf {

// Tables the running CPU supports, best first; the portable table is always last.
std::vector<const KernelTable*> supportedKernels();

}  // namespace kvf
