/**
 * Memory for a model's weight arena (model/gguf-read.ts puts every tensor in one buffer). A decode step streams every
 * weight once; on 4 KiB pages that is a TLB miss and a page walk every 4 KiB of the stream, on 2 MiB pages one every
 * 2 MiB. So the arena is advised onto transparent huge pages through the native addon before the loader first touches
 * it: an ArrayBuffer above glibc's mmap threshold (32 MiB at most) is fresh mmap'ed memory, so its first touch faults
 * in huge pages (a smaller one may come from the heap, already touched: it stays on small pages). Without the addon,
 * or where THP is off or absent, the arena is ordinary memory: the advice is a hint and nothing depends on it.
 * One buffer also means a tensor the model does not use (an f16 norm converted to f32, an unknown extra tensor) stays
 * in memory with the rest. Measured in docs/native.md ("Weights on huge pages").
 */
import { existsSync, readFileSync } from 'node:fs';
import { sharedAddon } from './native-backend.js';

const THP_ENABLED = '/sys/kernel/mm/transparent_hugepage/enabled';
const THP_PAGE_BYTES = '/sys/kernel/mm/transparent_hugepage/hpage_pmd_size';
const HUGE_PAGE_BYTES = 2 * 1024 * 1024;

/** THP is in the kernel, not switched off, and its pages are the 2 MiB the addon aligns to (not so on 64 KiB arm64). */
export function thpUsable(): boolean {
  return (
    existsSync(THP_ENABLED) &&
    !readFileSync(THP_ENABLED, 'utf8').includes('[never]') &&
    existsSync(THP_PAGE_BYTES) &&
    Number(readFileSync(THP_PAGE_BYTES, 'utf8')) === HUGE_PAGE_BYTES
  );
}

export interface WeightArena {
  buffer: ArrayBuffer;
  /** the part advised onto huge pages */
  hugePageBytes: number;
}

let usable: boolean | undefined;

export function allocateWeightArena(bytes: number): WeightArena {
  const buffer = new ArrayBuffer(bytes);
  usable ??= thpUsable();
  return { buffer, hugePageBytes: usable ? (sharedAddon()?.adviseHugePages(buffer) ?? 0) : 0 };
}
