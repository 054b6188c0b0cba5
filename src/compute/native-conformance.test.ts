import { describeBackendConformance } from '../../test/helpers/backend-conformance.js';
import { nativeBackendForTest } from '../../test/helpers/native.js';

// Every instruction set this CPU has (AVX-512, AVX2, portable), each checked on its own; the counters come from the
// addon, so a pass proves the native kernels ran.
const probe = nativeBackendForTest();
const isas = probe.supportedIsas;
probe.close();
for (const isa of isas) {
  describeBackendConformance({
    name: `native ${isa}`,
    make: () => {
      const backend = nativeBackendForTest();
      backend.useIsa(isa);
      return backend;
    },
    callCount: (backend, kernel) => backend.callCounts[kernel],
    dispose: (backend) => backend.close(),
  });
}
