/**
 * How many cached keys attention reads for `n` new tokens from position `start`, over all layers: a token at position
 * p reads p + 1 keys, on a sliding-window layer at most the window. A prompt's time per token grows with it (on the 15m
 * test shape at two cores, a token 13,000 positions into its prompt took ~7.5 ms, one at the start ~0.4 ms), so the
 * forward pass counts each step's keys and the prefill pace prices a chunk by them (prefill-pace.ts).
 */
import type { ModelConfig } from '../model/model-config.js';

export type KeyCount = (start: number, n: number) => number;

export function keyCounter(c: Pick<ModelConfig, 'layerCount' | 'slidingLayers' | 'slidingWindow'>): KeyCount {
  const sliding = c.slidingLayers.filter(Boolean).length;
  const global = c.layerCount - sliding;
  const window = c.slidingWindow;
  return (start, n) => {
    const all = keysBelow(start, n);
    if (sliding === 0) return global * all;
    const inside = Math.min(Math.max(window - start, 0), n); // tokens that see all their keys: p + 1 ≤ window
    return global * all + sliding * (keysBelow(start, inside) + (n - inside) * window);
  };
}

/** Σ (p + 1) for p in [start, start + n): the keys of n tokens that each see every earlier position. */
function keysBelow(start: number, n: number): number {
  return n * start + (n * (n + 1)) / 2;
}
