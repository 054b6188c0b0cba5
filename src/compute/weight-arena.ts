/**
 * Memory for a model's weight arena (model/gguf-read.ts puts every tensor in one buffer). A decode step streams every
 * weight once; on 4 KiB pages that is a TLB miss and a page walk every 4 KiB of the stream, on 2 MiB pages one every
 * 2 MiB. So the arena is advised onto transparent huge pages through the native addon before the loader first touches
 * it (a fresh large ArrayBuffer is untouched mmap'ed memory, so its first touch faults in huge pages). Without the
 * addon, or on a system without THP, the arena is ordinary memory: the advice is a hint and nothing depends on it.
 * Measured in docs/native.md ("Weights on huge pages").
 */
import { loadAddon, type NativeAddon } from './native-backend.js';

let addon: NativeAddon | null | undefined;

function nativeAddon(): NativeAddon | null {
  if (addon === undefined) {
    try {
      addon = loadAddon();
    } catch {
      addon = null; // selectBackend says why when the native backend is asked for
    }
  }
  return addon;
}

export interface WeightArena {
  buffer: ArrayBuffer;
  /** the part advised onto huge pages */
  hugePageBytes: number;
}

export function allocateWeightArena(bytes: number): WeightArena {
  const buffer = new ArrayBuffer(bytes);
  return { buffer, hugePageBytes: nativeAddon()?.adviseHugePages(buffer) ?? 0 };
}
