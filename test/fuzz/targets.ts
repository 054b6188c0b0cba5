/** Every fuzz target, for the suite (fuzz.test.ts) and the long runs (fuzz-main.ts). */

import { channelTarget, handshakeTarget } from './channel-target.js';
import type { FuzzTarget } from './fuzz-target.js';
import { httpTarget } from './http-target.js';
import { controlTarget, ggufTarget, transferTarget } from './parser-targets.js';

export const FUZZ_TARGETS: readonly FuzzTarget<never>[] = [
  httpTarget,
  controlTarget,
  transferTarget,
  ggufTarget,
  channelTarget,
  handshakeTarget,
] as unknown as readonly FuzzTarget<never>[];
