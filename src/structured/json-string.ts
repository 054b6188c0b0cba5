/**
 * The body of a JSON string as a byte machine, kept apart from the grammar's DFAs because strings are where almost
 * every token of a vocabulary is allowed: a string frame is (sub-state, characters so far), and token masks for it are
 * computed from a per-vocabulary table (token-index.ts) instead of a walk over the token trie.
 *
 *   OPEN ─"─▶ BODY ─"─▶ CLOSED (only with minLength characters)
 *              │ printable ASCII except " and \ : one character, stays in BODY
 *              ├─ \ ─▶ ESC ─ " \ / b f n r t ─▶ BODY        (one character)
 *              │            └ u ─▶ HEX1 ─▶ HEX2 ─▶ HEX3 ─▶ HEX4 ─▶ BODY   (HEX2_LOW after d/D: no surrogate escapes,
 *              │                                                            so a character is one escape, as counted)
 *              └─ UTF-8 lead byte ─▶ CONT… ─▶ BODY          (one character; only well-formed UTF-8, Unicode table 3-7)
 *
 * Characters are counted when they start, so `maxLength` is checked before a character begins and `minLength` at the
 * closing quote. Without a maxLength the count saturates at minLength, so string frames of any length stay few.
 */

export const SUB = {
  OPEN: 0,
  BODY: 1,
  ESC: 2,
  HEX1: 3,
  HEX2_LOW: 4,
  HEX2: 5,
  HEX3: 6,
  HEX4: 7,
  CONT1: 8,
  CONT2: 9,
  CONT3: 10,
  E0: 11,
  ED: 12,
  F0: 13,
  F4: 14,
  CLOSED: 15,
} as const;
export const STRING_SUB_COUNT = 16;

/** Result flag: the byte starts a new character. */
export const STARTS_CHAR = 32;
const SUB_MASK = 31;

export function subOf(step: number): number {
  return step & SUB_MASK;
}

const ESCAPES = new Set([0x22, 0x5c, 0x2f, 0x62, 0x66, 0x6e, 0x72, 0x74]);

function isHex(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
}

/** One byte in a string sub-state: the next sub-state (| STARTS_CHAR when a character begins), or -1. */
export function stringByte(sub: number, b: number): number {
  switch (sub) {
    case SUB.OPEN:
      return b === 0x22 ? SUB.BODY : -1;
    case SUB.BODY:
      return bodyByte(b);
    case SUB.ESC:
      if (ESCAPES.has(b)) return SUB.BODY;
      return b === 0x75 ? SUB.HEX1 : -1;
    case SUB.HEX1:
      if (b === 0x64 || b === 0x44) return SUB.HEX2_LOW;
      return isHex(b) ? SUB.HEX2 : -1;
    case SUB.HEX2_LOW:
      return b >= 0x30 && b <= 0x37 ? SUB.HEX3 : -1;
    case SUB.HEX2:
      return isHex(b) ? SUB.HEX3 : -1;
    case SUB.HEX3:
      return isHex(b) ? SUB.HEX4 : -1;
    case SUB.HEX4:
      return isHex(b) ? SUB.BODY : -1;
    case SUB.CONT1:
      return b >= 0x80 && b <= 0xbf ? SUB.BODY : -1;
    case SUB.CONT2:
      return b >= 0x80 && b <= 0xbf ? SUB.CONT1 : -1;
    case SUB.CONT3:
      return b >= 0x80 && b <= 0xbf ? SUB.CONT2 : -1;
    case SUB.E0:
      return b >= 0xa0 && b <= 0xbf ? SUB.CONT1 : -1;
    case SUB.ED:
      return b >= 0x80 && b <= 0x9f ? SUB.CONT1 : -1;
    case SUB.F0:
      return b >= 0x90 && b <= 0xbf ? SUB.CONT2 : -1;
    case SUB.F4:
      return b >= 0x80 && b <= 0x8f ? SUB.CONT2 : -1;
    default:
      return -1; // CLOSED takes nothing more
  }
}

function bodyByte(b: number): number {
  if (b === 0x22) return SUB.CLOSED;
  if (b === 0x5c) return SUB.ESC | STARTS_CHAR;
  if (b < 0x20) return -1;
  if (b < 0x80) return SUB.BODY | STARTS_CHAR;
  if (b >= 0xc2 && b <= 0xdf) return SUB.CONT1 | STARTS_CHAR;
  if (b === 0xe0) return SUB.E0 | STARTS_CHAR;
  if (b === 0xed) return SUB.ED | STARTS_CHAR;
  if (b >= 0xe1 && b <= 0xef) return SUB.CONT2 | STARTS_CHAR;
  if (b === 0xf0) return SUB.F0 | STARTS_CHAR;
  if (b >= 0xf1 && b <= 0xf3) return SUB.CONT3 | STARTS_CHAR;
  if (b === 0xf4) return SUB.F4 | STARTS_CHAR;
  return -1;
}

/** The character count after one more character, saturated at minLength when there is no maxLength. */
export function nextCount(count: number, minLength: number, maxLength: number | undefined): number {
  return maxLength === undefined ? Math.min(count + 1, minLength) : count + 1;
}
