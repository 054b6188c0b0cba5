/**
 * The forward pass's activation buffers, kept from one call to the next: a call then neither allocates nor zeroes
 * its buffers, nor page-faults in fresh mappings for the large ones (they are past malloc's mmap threshold), which on
 * a small model is a measurable share of a call.
 *
 * Never shared between calls in flight: each ForwardPass owns one, and ForwardPass.run is synchronous and calls
 * nothing that could re-enter it (backend kernels and the page pool's checks); a worker thread has its own objects.
 *
 * A view may hold what an earlier call (another request) left in it. That never reaches an output because the
 * forward pass writes every element of a view before it reads it in the same call (see ForwardPass.runBatch), and
 * nothing it returns is a view of these buffers: logits are copied out.
 */

/** Retained floats in all, so a one-off huge batch does not stay resident; calls beyond it allocate as before. */
const RETAINED_BYTES_MAX = 64 * 1024 * 1024;

export type ScratchRole = 'x' | 'xb' | 'q' | 'k' | 'v' | 'att' | 'gate' | 'up' | 'picked' | 'normed' | 'logits';

export class ForwardScratch {
  private readonly buffers = new Map<ScratchRole, Float32Array>();
  private retainedFloats = 0;

  /** `floats` floats for `role`, exactly that long; contents unspecified (the caller writes before it reads). */
  take(role: ScratchRole, floats: number): Float32Array {
    const kept = this.buffers.get(role);
    if (kept !== undefined && kept.length >= floats) return kept.subarray(0, floats);
    const others = this.retainedFloats - (kept?.length ?? 0);
    if ((others + floats) * Float32Array.BYTES_PER_ELEMENT > RETAINED_BYTES_MAX) return new Float32Array(floats);
    const grown = new Float32Array(floats);
    this.buffers.set(role, grown);
    this.retainedFloats = others + floats;
    return grown;
  }

  /** Floats held across calls (tests check the bound). */
  get retained(): number {
    return this.retainedFloats;
  }
}
