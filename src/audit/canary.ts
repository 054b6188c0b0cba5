/**
 * Canaries: every prompt the auditor sends carries markers unique to its tenant and request, and every response of
 * every other tenant is scanned for them. A model rarely repeats a marker whole, and a tokenizer may split it with
 * spaces, so matching works on a normalized form (lower-case letters and digits only) and reports any run of at least
 * `matchCharsMin` consecutive characters of a marker. Markers are random base-32 strings (≈5 bits a character): a run
 * of 12 matching by chance in ordinary text is about 2^-60 per position.
 *
 *   marker   "kvfq7m2xw4..."        ─ normalize ─▶ every window of matchCharsMin chars → (marker, owner) in one Map
 *   response "… KVFQ 7m2x w4 …"    ─ normalize ─▶ slide the same window; a hit is extended to its longest run
 */
import { randomBytes } from 'node:crypto';

export const MARKER_CHARS = 24;
const BASE32 = 'abcdefghijkmnpqrstuvwxyz23456789'; // no l, o, 0, 1: nothing a model "corrects"

export interface MarkerOwner {
  readonly marker: string;
  readonly tenant: string;
  /** the call that carried it (CallRecord.id), 0 for markers not yet sent */
  callId: number;
}

export interface CanaryMatch {
  readonly owner: MarkerOwner;
  /** the longest matching run, in normalized form */
  readonly matched: string;
  /** index in the scanned text where the run starts */
  readonly offset: number;
}

export function makeMarker(): string {
  const bytes = randomBytes(MARKER_CHARS);
  let marker = '';
  for (const b of bytes) marker += BASE32[b % BASE32.length];
  return marker;
}

/** Lower-case letters and digits, with a map back to the original text's offsets. */
export function normalize(text: string): { chars: string; offsets: number[] } {
  let chars = '';
  const offsets: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!.toLowerCase();
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      chars += c;
      offsets.push(i);
    }
  }
  return { chars, offsets };
}

export class CanaryIndex {
  private readonly windows = new Map<string, MarkerOwner>();
  private readonly owners: MarkerOwner[] = [];

  constructor(readonly matchCharsMin: number) {
    if (matchCharsMin < 8 || matchCharsMin > MARKER_CHARS) {
      throw new RangeError(`matchCharsMin must be 8..${MARKER_CHARS}`);
    }
  }

  get markerCount(): number {
    return this.owners.length;
  }

  /** A fresh marker owned by `tenant`. */
  issue(tenant: string): MarkerOwner {
    const owner: MarkerOwner = { marker: makeMarker(), tenant, callId: 0 };
    const { chars } = normalize(owner.marker);
    for (let i = 0; i + this.matchCharsMin <= chars.length; i++) {
      // a window shared by two markers is astronomically unlikely; keep the first owner
      const w = chars.slice(i, i + this.matchCharsMin);
      if (!this.windows.has(w)) this.windows.set(w, owner);
    }
    this.owners.push(owner);
    return owner;
  }

  /** Every run of another tenant's marker in `text` (the reader is `reader`). */
  scan(text: string, reader: string): CanaryMatch[] {
    const { chars, offsets } = normalize(text);
    const n = this.matchCharsMin;
    const matches: CanaryMatch[] = [];
    let i = 0;
    while (i + n <= chars.length) {
      const owner = this.windows.get(chars.slice(i, i + n));
      if (owner === undefined || owner.tenant === reader) {
        i++;
        continue;
      }
      const markerChars = normalize(owner.marker).chars;
      const at = markerChars.indexOf(chars.slice(i, i + n));
      let length = n;
      while (
        i + length < chars.length &&
        at + length < markerChars.length &&
        chars[i + length] === markerChars[at + length]
      ) {
        length++;
      }
      matches.push({ owner, matched: chars.slice(i, i + length), offset: offsets[i]! });
      i += length;
    }
    return matches;
  }
}
