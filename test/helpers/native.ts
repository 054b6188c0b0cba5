/**
 * The native backend for tests. It must load: on CI the addon is built by `npm ci`, and a missing addon fails every
 * native test with this message instead of skipping them (a suite that silently falls back tests nothing).
 */
import { NativeBackend, type NativeBackendOptions } from '../../src/compute/native-backend.js';
import { assertSameBits } from './backend-conformance.js';

export function nativeBackendForTest(options: NativeBackendOptions = {}): NativeBackend {
  try {
    return new NativeBackend({ threadCount: 2, ...options });
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new Error(`the native addon must be built for these tests (npm run build:native): ${reason}`);
  }
}

/**
 * Runs `logits(backend)` on a fresh native backend (with `options`) of each thread count, once per instruction set it supports, and
 * asserts every result equals `want` bit for bit (the ISA paths and thread counts must not change a single bit).
 */
export function assertSameOnEveryIsa(
  logits: (backend: NativeBackend) => Float32Array,
  want: Float32Array,
  what: string,
  threadCounts: readonly number[] = [1, 3],
  options: NativeBackendOptions = {},
): void {
  for (const threadCount of threadCounts) {
    const backend = nativeBackendForTest({ ...options, threadCount });
    try {
      for (const isa of backend.supportedIsas) {
        backend.useIsa(isa);
        assertSameBits(logits(backend), want, `${what}: ${isa}, ${threadCount} threads`);
      }
    } finally {
      backend.close();
    }
  }
}
