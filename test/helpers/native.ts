/**
 * The native backend for tests. It must load: on CI the addon is built by `npm ci`, and a missing addon fails every
 * native test with this message instead of skipping them (a suite that silently falls back tests nothing).
 */
import { NativeBackend, type NativeBackendOptions } from '../../src/compute/native-backend.js';

export function nativeBackendForTest(options: NativeBackendOptions = {}): NativeBackend {
  try {
    return new NativeBackend({ threadCount: 2, ...options });
  } catch (error) {
    const reason = error instanceof Error ? error.message.split('\n')[0] : String(error);
    throw new Error(`the native addon must be built for these tests (npm run build:native): ${reason}`);
  }
}
