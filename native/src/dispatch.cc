#include "dispatch.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kvf {

namespace {

#if defined(__x86_64__)
// F16C is CPUID.1:ECX bit 29; __builtin_cpu_supports has no name for it in every compiler we build with.
bool cpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 29)) != 0;
}

// __builtin_cpu_supports also checks that the OS saves the wide registers (XGETBV).
bool cpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuHasF16c();
}

bool cpuHasAvx512() {
  return cpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
#endif

}  // namespace

std::vector<const KernelTable*> supportedKernels() {
  std::vector<const KernelTable*> tables;
#if defined(__x86_64__)
  if (cpuHasAvx512() && kernelsAvx512() != nullptr) tables.push_back(kernelsAvx512());
  if (cpuHasAvx2() && kernelsAvx2() != nullptr) tables.push_back(kernelsAvx2());
#endif
  tables.push_back(kernelsPortable());
  return tables;
}

}  // namespace kvf
