/**
 * Picks the compute backend once at startup. `auto` prefers the native kernels and falls back to the TypeScript
 * reference backend with one warning when the addon cannot load (not built, no compiler at install, foreign CPU);
 * `native` insists and fails with the reason; `reference` is the oracle itself. Q8 activations exist only in the
 * native kernels: asking for them where those cannot run fails instead of falling back, and where they run, `warn`
 * says so once.
 */
import { errorMessage, KvfenceError } from '../util/errors.js';
import type { Backend } from './backend.js';
import { NativeBackend, type NativeBackendOptions } from './native-backend.js';
import { ReferenceBackend } from './reference-backend.js';

export const BACKEND_PREFERENCES = ['auto', 'native', 'reference'] as const;
export type BackendPreference = (typeof BACKEND_PREFERENCES)[number];
const Q8_NEEDS_NATIVE = 'Q8 activations (--q8-activations) need the native backend';
/** Said once at start where the mode is on: its results are not the f32 products the default computes. */
const Q8_ON =
  "kvfence: quantized products on Q8 activations (--q8-activations): llama.cpp's arithmetic, not the f32 products";

export function selectBackend(
  preference: BackendPreference,
  warn: (line: string) => void,
  options: NativeBackendOptions = {},
): Backend {
  if (preference === 'reference') {
    if (options.q8Activations === true) throw new KvfenceError('invalid_argument', Q8_NEEDS_NATIVE);
    return new ReferenceBackend();
  }
  let native: NativeBackend;
  try {
    native = new NativeBackend(options);
  } catch (error) {
    const reason = firstLine(error);
    if (options.q8Activations === true) throw new KvfenceError('invalid_argument', `${Q8_NEEDS_NATIVE}: ${reason}`);
    if (preference === 'native') {
      throw new KvfenceError(
        'invalid_argument',
        `the native backend is not available: ${reason}. Build it with: npm run build:native`,
      );
    }
    warn(
      `kvfence: warning: native kernels unavailable (${reason}); using the much slower TypeScript backend. ` +
        'Build them with: npm run build:native',
    );
    return new ReferenceBackend();
  }
  if (native.q8Activations) warn(Q8_ON);
  return native;
}

function firstLine(error: unknown): string {
  const message = errorMessage(error);
  return message.split('\n')[0] ?? message;
}
