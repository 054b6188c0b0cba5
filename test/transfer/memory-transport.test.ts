import { systemClock } from '../../src/util/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/wire/memory-transport.js';
import { transportConformance } from './transport-conformance.js';

const network = new MemoryNetwork();
let n = 0;
transportConformance('memory', {
  make: (options) =>
    new MemoryTransport({
      ...options,
      network,
      clock: systemClock,
      handshakeTimeoutMs: 2_000,
      highWaterBytes: 1 << 20,
    }),
  get address() {
    return `decode-${n++}`;
  },
});
