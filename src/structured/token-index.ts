/**
 * What constrained decoding precomputes once per vocabulary: every token's bytes, a byte trie over them (tokens that
 * share a prefix are checked against a grammar position once for the prefix), and — lazily, per JSON-string
 * sub-state — how each token reads inside a string. Tokens without bytes (control tokens) are in neither: a grammar
 * never allows them; end-of-generation tokens are allowed apart, once a document is complete.
 *
 *   trie: root ─"─▶ n1 ─a─▶ n2 (tokens `"a`)      node arrays: byte, first child, next sibling, first token ending
 *              └{─▶ n3 ─"─▶ n4 (tokens `{"`)       here (tokens with equal bytes chain through tokenNext)
 */
import { assert } from '../util/assert.js';
import { STARTS_CHAR, STRING_SUB_COUNT, SUB, stringByte, subOf } from './json-string.js';

export interface VocabularySource {
  readonly vocabSize: number;
  /** the token's bytes as the output text gets them (empty for control tokens) */
  decodeBytes(ids: readonly number[]): Uint8Array;
  isEndOfGeneration(id: number): boolean;
}

/** How each token reads from one string sub-state. */
export interface StringScan {
  /** 0: breaks the string; 1: stays inside it; 2: closes it (the bytes from closeAt on follow the string) */
  kind: Uint8Array;
  /** characters the token starts before it ends or closes the string */
  chars: Uint16Array;
  /** the sub-state after the token (kind 1) */
  endSub: Uint8Array;
  /** the offset just past the closing quote (kind 2) */
  closeAt: Uint16Array;
  /** the tokens that stay inside (kind 1), one bit each: a mask takes them a word at a time */
  inside: Uint32Array;
  /** the most characters a token that stays inside starts */
  insideCharsMax: number;
  /** `insideUpTo[i]`: the tokens that stay inside starting at most INSIDE_STEPS[i] characters, one bit each */
  insideUpTo: Uint32Array[];
  /** the tokens that stay inside by the characters they start: those with c at [charsStart[c], charsStart[c + 1]) */
  insideByChars: Int32Array;
  charsStart: Int32Array;
  /** the tokens that close the string (kind 2) */
  closers: Int32Array;
  /** the most characters a closing token starts */
  closersCharsMax: number;
  /** each closer's bytes after the quote, as one of the scan's distinct tails (-1: none) */
  closerTail: Int32Array;
  /** the distinct tails as a trie: a mask checks them against the stack below the string in one walk */
  tails: TailTrie;
}

/**
 * Byte strings as a trie (node 0 the root, no byte): tails that share a prefix are stepped through it once, and a
 * prefix no stack reads prunes every tail under it. With Llama 3's vocabulary the 575 tails after a closing quote are
 * 914 trie nodes under 75 distinct first bytes, most of which a position rejects at once.
 */
export interface TailTrie {
  /** how many tails (ids 0 to count - 1) */
  count: number;
  nodeByte: Uint8Array;
  firstChild: Int32Array;
  nextSibling: Int32Array;
  /** the tail that ends at a node, or -1 */
  endOf: Int32Array;
}

/** the character counts of StringScan.insideUpTo's bitsets: a bounded string's mask ORs the largest that fits */
export const INSIDE_STEPS = [1, 2, 4, 8, 16, 32];

export const STRING_CLOSES = 2;
export const STRING_INSIDE = 1;

export class TokenIndex {
  readonly vocabSize: number;
  /** token id's bytes at [offsets[id], offsets[id + 1]) */
  readonly bytes: Uint8Array;
  readonly offsets: Uint32Array;
  readonly endOfGeneration: readonly number[];
  /** trie nodes; node 0 is the root */
  readonly nodeByte: Uint8Array;
  readonly firstChild: Int32Array;
  readonly nextSibling: Int32Array;
  readonly firstToken: Int32Array;
  readonly tokenNext: Int32Array;
  private readonly scans: (StringScan | undefined)[] = new Array(STRING_SUB_COUNT).fill(undefined);

  constructor(vocab: VocabularySource) {
    const n = vocab.vocabSize;
    this.vocabSize = n;
    const pieces: Uint8Array[] = [];
    this.offsets = new Uint32Array(n + 1);
    const eog: number[] = [];
    for (let id = 0; id < n; id++) {
      const piece = vocab.decodeBytes([id]);
      assert(piece.length < 0xffff, 'a token is shorter than 64 KiB');
      pieces.push(piece);
      this.offsets[id + 1] = this.offsets[id]! + piece.length;
      if (vocab.isEndOfGeneration(id)) eog.push(id);
    }
    this.bytes = new Uint8Array(this.offsets[n]!);
    pieces.forEach((p, id) => {
      this.bytes.set(p, this.offsets[id]!);
    });
    this.endOfGeneration = eog;
    const trie = buildTrie(this.bytes, this.offsets);
    this.nodeByte = trie.nodeByte;
    this.firstChild = trie.firstChild;
    this.nextSibling = trie.nextSibling;
    this.firstToken = trie.firstToken;
    this.tokenNext = trie.tokenNext;
  }

  tokenLength(id: number): number {
    return this.offsets[id + 1]! - this.offsets[id]!;
  }

  /** Computes every string sub-state's scan now (grammar-cache.ts: before a worker serves). */
  scanStrings(): void {
    for (let sub = SUB.OPEN + 1; sub < SUB.CLOSED; sub++) this.stringScan(sub);
  }

  /** Sub-states whose scan is computed */
  get scannedStrings(): number {
    return this.scans.filter((scan) => scan !== undefined).length;
  }

  /** How every token reads from `sub` (computed on first use, then kept: 6 bytes per token per sub-state). */
  stringScan(sub: number): StringScan {
    assert(sub > SUB.OPEN && sub < SUB.CLOSED, 'string scans start inside a string');
    let scan = this.scans[sub];
    if (scan === undefined) {
      scan = this.scanFrom(sub);
      this.scans[sub] = scan;
    }
    return scan;
  }

  private scanFrom(start: number): StringScan {
    const n = this.vocabSize;
    const scan: StringScan = {
      kind: new Uint8Array(n),
      chars: new Uint16Array(n),
      endSub: new Uint8Array(n),
      closeAt: new Uint16Array(n),
      inside: new Uint32Array(Math.ceil(n / 32)),
      insideCharsMax: 0,
      insideUpTo: [],
      insideByChars: new Int32Array(0),
      charsStart: new Int32Array(0),
      closers: new Int32Array(0),
      closersCharsMax: 0,
      closerTail: new Int32Array(0),
      tails: tailTrieOf(new TrieBuilder(), 0),
    };
    const closers: number[] = [];
    for (let id = 0; id < n; id++) {
      const from = this.offsets[id]!;
      const to = this.offsets[id + 1]!;
      if (from === to) continue; // control tokens never appear in a string
      let sub = start;
      let chars = 0;
      let kind = STRING_INSIDE;
      for (let i = from; i < to; i++) {
        const step = stringByte(sub, this.bytes[i]!);
        if (step < 0) {
          kind = 0;
          break;
        }
        if (step & STARTS_CHAR) chars++;
        sub = subOf(step);
        if (sub === SUB.CLOSED) {
          kind = STRING_CLOSES;
          scan.closeAt[id] = i + 1 - from;
          break;
        }
      }
      scan.kind[id] = kind;
      scan.chars[id] = chars;
      scan.endSub[id] = sub;
      if (kind === STRING_CLOSES) {
        closers.push(id);
        scan.closersCharsMax = Math.max(scan.closersCharsMax, chars);
      } else if (kind === STRING_INSIDE) {
        scan.inside[id >>> 5]! |= 1 << (id & 31);
        scan.insideCharsMax = Math.max(scan.insideCharsMax, chars);
      }
    }
    sortInside(scan);
    scan.closers = Int32Array.from(closers);
    // the same bytes end at the same trie node: its first closer numbers the tail, the rest find it there
    const trie = new TrieBuilder();
    let tailCount = 0;
    scan.closerTail = Int32Array.from(closers, (id) => {
      const from = this.offsets[id]! + scan.closeAt[id]!;
      const to = this.offsets[id + 1]!;
      if (from === to) return -1;
      const node = trie.insert(this.bytes, from, to);
      if (trie.value[node] === -1) trie.value[node] = tailCount++;
      return trie.value[node]!;
    });
    scan.tails = tailTrieOf(trie, tailCount);
    return scan;
  }
}

/** The tokens that stay inside by their characters (a counting sort) and as bitsets up to each of INSIDE_STEPS. */
function sortInside(scan: StringScan): void {
  const { kind, chars } = scan;
  const start = new Int32Array(scan.insideCharsMax + 2);
  for (let id = 0; id < kind.length; id++) if (kind[id] === STRING_INSIDE) start[chars[id]! + 1]!++;
  for (let c = 1; c < start.length; c++) start[c]! += start[c - 1]!;
  const next = start.slice(0, -1);
  const byChars = new Int32Array(start[start.length - 1]!);
  for (let id = 0; id < kind.length; id++) if (kind[id] === STRING_INSIDE) byChars[next[chars[id]!]!++] = id;
  scan.insideByChars = byChars;
  scan.charsStart = start;
  scan.insideUpTo = INSIDE_STEPS.filter((k) => k < scan.insideCharsMax).map((k) => {
    const bits = new Uint32Array(scan.inside.length);
    for (let i = 0; i < start[k + 1]!; i++) bits[byChars[i]! >>> 5]! |= 1 << (byChars[i]! & 31);
    return bits;
  });
}

/**
 * A byte trie being built: node 0 is the root, a node's children are linked through nextSibling (the newest first),
 * and `value` holds one id per node for the caller (-1 for none).
 */
class TrieBuilder {
  readonly nodeByte: number[] = [0];
  readonly firstChild: number[] = [-1];
  readonly nextSibling: number[] = [-1];
  readonly value: number[] = [-1];
  private readonly children = new Map<number, number>(); // node * 256 + byte → child

  /** The node that spells bytes[from, to), added with whatever part of its path is missing. */
  insert(bytes: Uint8Array, from: number, to: number): number {
    let node = 0;
    for (let i = from; i < to; i++) {
      const b = bytes[i]!;
      let child = this.children.get(node * 256 + b);
      if (child === undefined) {
        child = this.nodeByte.length;
        this.nodeByte.push(b);
        this.firstChild.push(-1);
        this.nextSibling.push(this.firstChild[node]!);
        this.value.push(-1);
        this.firstChild[node] = child;
        this.children.set(node * 256 + b, child);
      }
      node = child;
    }
    return node;
  }

  get links() {
    return {
      nodeByte: Uint8Array.from(this.nodeByte),
      firstChild: Int32Array.from(this.firstChild),
      nextSibling: Int32Array.from(this.nextSibling),
    };
  }
}

/** The trie of `count` distinct tails, each one's id the value of the node where it ends. */
function tailTrieOf(trie: TrieBuilder, count: number): TailTrie {
  return { count, ...trie.links, endOf: Int32Array.from(trie.value) };
}

/** The vocabulary's trie: each node's tokens listed from firstToken through tokenNext. */
function buildTrie(bytes: Uint8Array, offsets: Uint32Array) {
  const trie = new TrieBuilder();
  const count = offsets.length - 1;
  const tokenNext = new Int32Array(count).fill(-1);
  for (let id = 0; id < count; id++) {
    const from = offsets[id]!;
    const to = offsets[id + 1]!;
    if (from === to) continue;
    const node = trie.insert(bytes, from, to);
    tokenNext[id] = trie.value[node]!;
    trie.value[node] = id;
  }
  return { ...trie.links, firstToken: Int32Array.from(trie.value), tokenNext };
}
