import { systemClock } from '../../src/transfer/clock.js';
import { MemoryNetwork, MemoryTransport } from '../../src/transfer/memory-transport.js';
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
