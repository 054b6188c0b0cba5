/** Inputs for parsers: valid encodings with bytes flipped, cut, inserted or spliced, and plain random bytes. */
import fc from 'fast-check';

export type Edit =
  | { kind: 'flip'; at: number; value: number }
  | { kind: 'cut'; at: number }
  | { kind: 'insert'; at: number; bytes: Uint8Array }
  | { kind: 'duplicate'; from: number; length: number; at: number };

const edit: fc.Arbitrary<Edit> = fc.oneof(
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array({ maxLength: 16 }) }),
  fc.record({ kind: fc.constant('duplicate' as const), from: fc.nat(), length: fc.nat({ max: 64 }), at: fc.nat() }),
);

/** Up to `max` edits of a byte string, to apply with `applyEdits` to bytes known only at check time. */
export function byteEdits(max: number): fc.Arbitrary<Edit[]> {
  return fc.array(edit, { minLength: 1, maxLength: max });
}

export function applyEdits(bytes: Uint8Array, edits: readonly Edit[], span = Number.POSITIVE_INFINITY): Uint8Array {
  return edits.reduce((b, e) => apply(b, e, span), bytes);
}

function apply(bytes: Uint8Array, e: Edit, span: number): Uint8Array {
  if (bytes.length === 0) return e.kind === 'insert' ? e.bytes : bytes;
  const at = ('at' in e ? e.at : 0) % (Math.min(bytes.length, span) + 1);
  switch (e.kind) {
    case 'flip': {
      const out = Uint8Array.from(bytes);
      out[at % bytes.length] = e.value;
      return out;
    }
    case 'cut':
      return bytes.subarray(0, at);
    case 'insert':
      return Buffer.concat([bytes.subarray(0, at), e.bytes, bytes.subarray(at)]);
    case 'duplicate': {
      const from = e.from % Math.min(bytes.length, span);
      return Buffer.concat([bytes.subarray(0, at), bytes.subarray(from, from + e.length), bytes.subarray(at)]);
    }
  }
}

/**
 * One of `seeds` with up to `editsMax` edits inside its first `span` bytes, or (one time in eight) random bytes of up
 * to `randomMax` bytes.
 */
export function mutatedBytes(
  seeds: readonly Uint8Array[],
  editsMax = 4,
  randomMax = 512,
  span = Number.POSITIVE_INFINITY,
): fc.Arbitrary<Uint8Array> {
  const mutated = fc
    .tuple(fc.constantFrom(...seeds), byteEdits(editsMax))
    .map(([seed, edits]) => applyEdits(seed, edits, span));
  return fc.oneof({ weight: 7, arbitrary: mutated }, { weight: 1, arbitrary: fc.uint8Array({ maxLength: randomMax }) });
}
