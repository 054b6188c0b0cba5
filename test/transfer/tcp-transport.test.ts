import { systemClock } from '../../src/util/clock.js';
import { TcpTransport } from '../../src/wire/tcp-transport.js';
import { transportConformance } from './transport-conformance.js';

transportConformance('tcp', {
  make: (options) => new TcpTransport({ ...options, clock: systemClock, handshakeTimeoutMs: 2_000 }),
  address: '127.0.0.1:0',
});
