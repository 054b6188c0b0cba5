/**
 * Pre-tokenization for byte-level BPE vocabularies, as llama.cpp does it (src/llama-vocab.cpp, src/unicode.cpp):
 * the text is cut into words by the `tokenizer.ggml.pre` type's split expressions, then each word's UTF-8 bytes are
 * written with GPT-2's byte-to-character table so that BPE merges work on printable characters.
 *
 * llama.cpp does not run these expressions through a regex engine: gpt-2, llama3 and qwen2 have hand-written scanners
 * (which differ from true regex semantics at fragment edges) and the rest run on a "collapsed" text where each non-ASCII
 * code point stands for its Unicode category. The scanners below port that logic, and classify code points with
 * llama.cpp's own Unicode table, so that word boundaries match it exactly; the expressions themselves are kept in
 * PRE_TOKENIZER_REGEXES for reference and for differential tests.
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import type { Steps } from '../util/steps.js';

/** `default` is what llama.cpp uses when `tokenizer.ggml.pre` is absent (it is not the gpt-2 split). */
export type PreTokenizerName = 'default' | 'gpt-2' | 'llama3' | 'qwen2' | 'smollm';

const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const LLAMA3_TAIL = '| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';

/** llama.cpp's regex_exprs per pre-tokenizer, applied in order, each one splitting the pieces of the one before. */
export const PRE_TOKENIZER_REGEXES: Readonly<Record<PreTokenizerName, readonly string[]>> = {
  default: ['[\\p{P}\\$\\+<=>\\^~\\|]+', GPT2_REGEX, '\\p{N}+', '[0-9][0-9][0-9]'],
  'gpt-2': [GPT2_REGEX],
  llama3: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}${LLAMA3_TAIL}`],
  qwen2: [`${CONTRACTIONS}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}${LLAMA3_TAIL}`],
  smollm: ['\\p{N}', GPT2_REGEX],
};

/** Per-type switches llama.cpp sets next to the pre-tokenizer (llama_vocab::impl::load). */
export interface PreTokenizerTraits {
  /** a word that is already a whole token is emitted without running merges */
  ignoreMerges: boolean;
  /** detokenize removes the space before . , ! ? and some contractions */
  cleanSpaces: boolean;
  /** BOS is added when `tokenizer.ggml.add_bos_token` is absent */
  addBosDefault: boolean;
}

export const PRE_TOKENIZER_TRAITS: Readonly<Record<PreTokenizerName, PreTokenizerTraits>> = {
  default: { ignoreMerges: false, cleanSpaces: true, addBosDefault: false },
  'gpt-2': { ignoreMerges: false, cleanSpaces: true, addBosDefault: false },
  llama3: { ignoreMerges: true, cleanSpaces: true, addBosDefault: true },
  qwen2: { ignoreMerges: false, cleanSpaces: false, addBosDefault: false },
  smollm: { ignoreMerges: false, cleanSpaces: false, addBosDefault: false },
};

const PRE_TOKENIZER_ALIASES: Readonly<Record<string, PreTokenizerName>> = {
  default: 'default',
  'gpt-2': 'gpt-2',
  llama3: 'llama3',
  'llama-bpe': 'llama3',
  'llama-v3': 'llama3',
  qwen2: 'qwen2',
  smollm: 'smollm',
};

/** Maps a `tokenizer.ggml.pre` value (absent → llama.cpp's default split) to a supported pre-tokenizer. */
export function preTokenizerFor(pre: string | undefined): PreTokenizerName {
  if (pre === undefined || pre === '') return 'default';
  const name = Object.hasOwn(PRE_TOKENIZER_ALIASES, pre) ? PRE_TOKENIZER_ALIASES[pre] : undefined;
  if (name === undefined) {
    const known = Object.keys(PRE_TOKENIZER_ALIASES).join(', ');
    throw new KvfenceError('unsupported_model', `unsupported tokenizer.ggml.pre '${pre}' (supported: ${known})`);
  }
  return name;
}

// Code point classes, as bits. IN_RANGE stands for llama.cpp's "flags != 0": every code point inside the fragment has
// some category (unassigned ones are UNDEFINED), positions outside it have none.
const IN_RANGE = 1;
const LETTER = 2;
const NUMBER = 4;
const WHITESPACE = 8;
const PUNCTUATION = 16;

/** llama.cpp's unicode_set_whitespace: not JavaScript's \s (it has U+0085, lacks U+FEFF). */
const WHITESPACE_CODE_POINTS: ReadonlySet<number> = new Set([
  0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x20, 0x85, 0xa0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
  0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000,
]);

function classify(cp: number): number {
  let flags = IN_RANGE | CATEGORY_TABLE.flagsOf(cp);
  if (WHITESPACE_CODE_POINTS.has(cp)) flags |= WHITESPACE;
  return flags;
}

function flagsOf(cp: number): number {
  return cp < 128 ? ASCII_FLAGS[cp] : classify(cp);
}

/**
 * A text's code points as llama.cpp sees its UTF-8 (a lone surrogate is U+FFFD, as Node's encoder writes it) and their
 * classes, read a bounded number at a time (`read`): a prompt can be 16 million characters long.
 */
export class CodePoints {
  readonly cps: Int32Array;
  readonly flags: Uint8Array;
  /** code points read so far */
  count = 0;
  /** the UTF-16 offset reading goes on from */
  private unit = 0;

  constructor(readonly text: string) {
    this.cps = new Int32Array(text.length);
    this.flags = new Uint8Array(text.length);
  }

  /** Reads up to `max` more code points; true once the whole text is read. */
  read(max: number): boolean {
    const { text, cps, flags } = this;
    let unit = this.unit;
    let count = this.count;
    for (let n = 0; n < max && unit < text.length; n++) {
      let cp = text.charCodeAt(unit++);
      if (cp >= 0xd800 && cp <= 0xdfff) {
        const low = cp <= 0xdbff && unit < text.length ? text.charCodeAt(unit) : 0;
        if ((low & 0xfc00) === 0xdc00) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          unit++;
        } else cp = 0xfffd;
      }
      cps[count] = cp;
      flags[count++] = flagsOf(cp);
    }
    this.unit = unit;
    this.count = count;
    return unit >= text.length;
  }

  /** Code points [start, end) as a string, a bounded slice at a time: a word may be as long as the whole text. */
  textOf(start: number, end: number): string {
    let text = '';
    for (let at = start; at < end; at += SLICE)
      text += String.fromCodePoint(...this.cps.subarray(at, Math.min(end, at + SLICE)));
    return text;
  }

  /** Code points [start, end) as their UTF-8 bytes written as byte-level characters (one char a byte: GPT-2's table). */
  byteLevelOf(start: number, end: number): string {
    const units = 4 * (end - start) <= BYTE_SCRATCH_UNITS ? byteScratch : new Uint16Array(4 * (end - start));
    return unitsText(units, this.writeByteLevel(units, 0, start, end));
  }

  /** byteLevelOf for a long word, pausing after each READ_STEP code points written (16 million took ~80 ms) */
  *byteLevelSteps(start: number, end: number): Steps<string> {
    const units = new Uint16Array(4 * (end - start));
    let n = 0;
    for (let at = start; at < end; at += READ_STEP) {
      n = this.writeByteLevel(units, n, at, Math.min(end, at + READ_STEP));
      yield;
    }
    return unitsText(units, n);
  }

  /** Writes code points [start, end) into `units` from `n` on as byte-level characters; where the next goes. */
  private writeByteLevel(units: Uint16Array, n: number, start: number, end: number): number {
    const { cps } = this;
    let at = n;
    for (let i = start; i < end; i++) {
      const cp = cps[i]!;
      if (cp < 0x80) units[at++] = BYTE_UNITS[cp]!;
      else if (cp < 0x800) {
        units[at++] = BYTE_UNITS[0xc0 | (cp >> 6)]!;
        units[at++] = BYTE_UNITS[0x80 | (cp & 0x3f)]!;
      } else if (cp < 0x10000) {
        units[at++] = BYTE_UNITS[0xe0 | (cp >> 12)]!;
        units[at++] = BYTE_UNITS[0x80 | ((cp >> 6) & 0x3f)]!;
        units[at++] = BYTE_UNITS[0x80 | (cp & 0x3f)]!;
      } else {
        units[at++] = BYTE_UNITS[0xf0 | (cp >> 18)]!;
        units[at++] = BYTE_UNITS[0x80 | ((cp >> 12) & 0x3f)]!;
        units[at++] = BYTE_UNITS[0x80 | ((cp >> 6) & 0x3f)]!;
        units[at++] = BYTE_UNITS[0x80 | (cp & 0x3f)]!;
      }
    }
    return at;
  }
}

/** The first `n` of `units` as a string. */
function unitsText(units: Uint16Array, n: number): string {
  if (n <= SLICE) return String.fromCharCode(...units.subarray(0, n));
  // decoded natively as UTF-16LE: concatenating slices of 4,096 took ~0.9 s for 16 million (each unit is below
  // 0x200, never a surrogate)
  if (!LITTLE_ENDIAN) for (let i = 0; i < n; i++) units[i] = ((units[i]! & 0xff) << 8) | (units[i]! >> 8);
  return Buffer.from(units.buffer, units.byteOffset, 2 * n).toString('utf16le');
}

/** far below any engine's argument limit */
const SLICE = 4096;
/** byteLevelOf's buffer for words of up to a quarter of this many code points; a longer word gets one of its own */
const BYTE_SCRATCH_UNITS = 1 << 14;
const byteScratch = new Uint16Array(BYTE_SCRATCH_UNITS);
const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

/** A view of one fragment [start, end) of the code points, answering like llama.cpp's _get_cpt/_get_flags. */
class Fragment {
  constructor(
    readonly points: CodePoints,
    readonly start: number,
    readonly end: number,
  ) {}
  cp(pos: number): number {
    return pos >= this.start && pos < this.end ? this.points.cps[pos]! : -1;
  }
  flags(pos: number): number {
    return pos >= this.start && pos < this.end ? this.points.flags[pos]! : 0;
  }
  /** the fragment [start, end) of the same code points */
  part(start: number, end: number): Fragment {
    return new Fragment(this.points, start, end);
  }
}

const APOSTROPHE = 0x27;
const SPACE = 0x20;
const CR = 0x0d;
const LF = 0x0a;

/** Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0. ASCII case folding suffices for these letters. */
function contractionLength(f: Fragment, pos: number, ignoreCase: boolean): number {
  if (f.cp(pos) !== APOSTROPHE || pos + 1 >= f.end) return 0;
  const fold = (cp: number) => (ignoreCase && cp >= 0x41 && cp <= 0x5a ? cp + 32 : cp);
  const next = fold(f.cp(pos + 1));
  if (next === 0x73 || next === 0x74 || next === 0x6d || next === 0x64) return 2; // s t m d
  if (pos + 2 >= f.end) return 0;
  const after = fold(f.cp(pos + 2));
  const twoLetter = (next === 0x72 || next === 0x76) && after === 0x65; // re ve
  return twoLetter || (next === 0x6c && after === 0x6c) ? 3 : 0; // ll
}

/** The first position from `pos` on whose code point has none of the class bits `cls`, or the fragment's end. */
function runEnd(f: Fragment, pos: number, cls: number): number {
  const { flags } = f.points;
  let at = pos;
  while (at < f.end && flags[at]! & cls) at++;
  return at;
}

/** The first position from `pos` on whose code point has one of the class bits `cls`, or the fragment's end. */
function runEndBefore(f: Fragment, pos: number, cls: number): number {
  const { flags } = f.points;
  let at = pos;
  while (at < f.end && !(flags[at]! & cls)) at++;
  return at;
}

/**
 * Whitespace run at pos (ending at `end`): \s+(?!\S) leaves the last space to the next word, unless the run ends the
 * fragment.
 */
function whitespaceRunEnd(f: Fragment, pos: number, end = runEnd(f, pos, WHITESPACE)): number {
  const count = end - pos;
  if (count > 1 && f.cp(pos + count) !== -1) return pos + count - 1;
  if (count > 0) return pos + count;
  return pos + 1; // no match: the code point stands alone
}

/** Port of unicode_regex_split_custom_gpt2. */
function* splitGpt2(f: Fragment): Generator<number, void, void> {
  const CLASSES = WHITESPACE | LETTER | NUMBER;
  for (let pos = f.start; pos < f.end; ) {
    const contraction = contractionLength(f, pos, false);
    if (contraction > 0) {
      pos += contraction;
      yield pos;
      continue;
    }
    const cp = f.cp(pos);
    const flags2 = cp === SPACE ? f.flags(pos + 1) : f.flags(pos);
    const runClass = flags2 & LETTER ? LETTER : flags2 & NUMBER ? NUMBER : 0;
    if (runClass !== 0) {
      if (cp === SPACE) pos++;
      pos = runEnd(f, pos, runClass);
      yield pos;
      continue;
    }
    if (!(flags2 & CLASSES) && flags2 !== 0) {
      if (cp === SPACE) pos++;
      pos = runEndBefore(f, pos, CLASSES);
      yield pos;
      continue;
    }
    pos = whitespaceRunEnd(f, pos);
    yield pos;
  }
}

/** Port of unicode_regex_split_custom_llama3 (digitsMax 3) and _qwen2 (digitsMax 1). */
function* splitLlama3(f: Fragment, digitsMax: number): Generator<number, void, void> {
  const CLASSES = WHITESPACE | LETTER | NUMBER;
  for (let pos = f.start; pos < f.end; ) {
    const contraction = contractionLength(f, pos, true);
    if (contraction > 0) {
      pos += contraction;
      yield pos;
      continue;
    }
    const cp = f.cp(pos);
    const flags = f.flags(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(cp === CR || cp === LF || flags & NUMBER) && (flags & LETTER || f.flags(pos + 1) & LETTER)) {
      pos = runEnd(f, pos + 1, LETTER);
      yield pos;
      continue;
    }
    // \p{N}{1,digitsMax}
    if (flags & NUMBER) {
      let groupStart = pos;
      while (f.flags(pos) & NUMBER) {
        if (++pos - groupStart >= digitsMax) {
          yield pos;
          groupStart = pos;
        }
      }
      yield pos;
      continue;
    }
    // <space>?[^\s\p{L}\p{N}]+[\r\n]*
    const flags2 = cp === SPACE ? f.flags(pos + 1) : flags;
    if (!(flags2 & CLASSES) && flags !== 0) {
      if (cp === SPACE) pos++;
      pos = runEndBefore(f, pos, CLASSES);
      while (f.cp(pos) === CR || f.cp(pos) === LF) pos++;
      yield pos;
      continue;
    }
    // \s*[\r\n]+ takes the run up to its last line break
    const { cps, flags: classes } = f.points;
    let lineBreakEnd = 0;
    let end = pos;
    for (; end < f.end && classes[end]! & WHITESPACE; end++) {
      if (cps[end] === CR || cps[end] === LF) lineBreakEnd = end + 1;
    }
    pos = lineBreakEnd > 0 ? lineBreakEnd : whitespaceRunEnd(f, pos, end);
    yield pos;
  }
}

/** std::regex_iterator over one fragment: matches and the gaps between them both become words. */
function* splitByMatches(f: Fragment, matchEnd: (pos: number) => number): Generator<number, void, void> {
  let pos = f.start;
  while (pos < f.end) {
    const end = matchEnd(pos);
    if (end > pos) {
      yield pos;
      yield end;
      pos = end;
    } else {
      pos++;
    }
  }
  yield f.end;
}

// Character classes of the collapsed-text expressions, as llama.cpp's k_ucat_map defines them for ASCII.
const DEFAULT_PUNCT_ASCII = new Set(Array.from('!"#%&\'()*,-./:;?@[\\]_{}$+<=>^~|', (c) => c.charCodeAt(0)));

function isDefaultPunct(cp: number): boolean {
  if (cp < 128) return DEFAULT_PUNCT_ASCII.has(cp);
  const flags = flagsOf(cp);
  return !(flags & WHITESPACE) && (flags & PUNCTUATION) !== 0;
}

function isNumberCp(cp: number): boolean {
  return (flagsOf(cp) & NUMBER) !== 0;
}

function isAsciiDigit(cp: number): boolean {
  return cp >= 0x30 && cp <= 0x39;
}

/** the ends of a fragment's words, ascending; an end may repeat (an empty word, which is no word) */
type Splitter = (f: Fragment) => Iterable<number>;

const runOf =
  (member: (cp: number) => boolean): Splitter =>
  (f) =>
    splitByMatches(f, (pos) => {
      let end = pos;
      while (end < f.end && member(f.points.cps[end]!)) end++;
      return end;
    });

const SPLITTERS: Readonly<Record<PreTokenizerName, readonly Splitter[]>> = {
  default: [
    runOf(isDefaultPunct),
    splitGpt2,
    runOf(isNumberCp),
    (f) =>
      splitByMatches(f, (pos) =>
        pos + 3 <= f.end && isAsciiDigit(f.cp(pos)) && isAsciiDigit(f.cp(pos + 1)) && isAsciiDigit(f.cp(pos + 2))
          ? pos + 3
          : pos,
      ),
  ],
  'gpt-2': [splitGpt2],
  llama3: [(f) => splitLlama3(f, 3)],
  qwen2: [(f) => splitLlama3(f, 1)],
  smollm: [(f) => splitByMatches(f, (pos) => (isNumberCp(f.cp(pos)) ? pos + 1 : pos)), splitGpt2],
};

/** what `wordEnds` yields for a pause: code points were read, no word ended yet */
export const PAUSE = -1;
/** code points read between pauses: ~1–4 ms */
const READ_STEP = 1 << 18;

/**
 * The ends of the text's words (code point offsets into `points`, ascending, each word from the end before), as
 * llama.cpp's unicode_regex_split cuts them, one word at a time, so that a caller can stop at any word; PAUSE while
 * the code points are read, READ_STEP at a time. Each of the pre-tokenizer's expressions splits the words of the one
 * before.
 */
export function* wordEnds(points: CodePoints, pre: PreTokenizerName): Generator<number, void, void> {
  while (!points.read(READ_STEP)) yield PAUSE;
  yield* stageEnds(new Fragment(points, 0, points.count), SPLITTERS[pre], 0);
}

function* stageEnds(f: Fragment, stages: readonly Splitter[], stage: number): Generator<number, void, void> {
  const splitter = stages[stage];
  if (splitter === undefined) {
    yield f.end;
    return;
  }
  let start = f.start;
  for (const end of splitter(f)) {
    if (end <= start) continue;
    yield* stageEnds(f.part(start, end), stages, stage + 1);
    start = end;
  }
}

/** Splits text into words (plain strings, not yet byte-encoded) as llama.cpp's unicode_regex_split does. */
export function preTokenize(text: string, pre: PreTokenizerName): string[] {
  const points = new CodePoints(text);
  const words: string[] = [];
  let start = 0;
  for (const end of wordEnds(points, pre)) {
    if (end === PAUSE) continue;
    words.push(points.textOf(start, end));
    start = end;
  }
  return words;
}

/** GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others map to U+0100 upwards in byte order. */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const table: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) table.push(String.fromCharCode(printable(b) ? b : next++));
  return table;
})();

/** BYTE_TO_CHAR as UTF-16 code units */
const BYTE_UNITS = Uint16Array.from(BYTE_TO_CHAR, (ch) => ch.charCodeAt(0));

const CHAR_TO_BYTE: ReadonlyMap<string, number> = new Map(BYTE_TO_CHAR.map((ch, b) => [ch, b]));

/** The byte a byte-level character stands for, or undefined for characters outside the table. */
export function byteOfChar(ch: string): number | undefined {
  return CHAR_TO_BYTE.get(ch);
}

/** A word's UTF-8 bytes written as byte-level characters (one JS char per byte), as CodePoints.byteLevelOf writes them. */
export function byteLevelEncode(word: string): string {
  const points = new CodePoints(word);
  points.read(word.length);
  return points.byteLevelOf(0, points.count);
}

/**
 * Letter, number and punctuation classes of every code point, from llama.cpp's own table (unicode_ranges_flags in
 * src/unicode-data.cpp of the release node-llama-cpp 3.21.1 bundles) rather than JavaScript's \p{L} \p{N} \p{P}:
 * Node's ICU knows newer Unicode versions, and code points llama.cpp does not know must split the way it splits them.
 * Run-length encoded from U+0000: a class letter (O other, L letter, N number, P punctuation) then the run's length
 * in lowercase base 36.
 */
const CATEGORY_RUNS =
  'OxP3O1P6O1P4NaP2O3P2LqP3O1P1O1LqP1O1P1OzP1O5P1O2L1P1O6N2O1L1P2O1N1L1P1N3P1LnO1LvO1LcqO4LcOeL5O7L1O1L1O3lL5O1L2' +
  'O2L4P1L1O6L1P1L3O1L1O1LkO1L2bO1L3vO8L4mO1L12O2L1P6L15P2O1fP1O1P1O2P1O2P1O9LrO4L4P2OkP2O1P2OdP1O1P3L17OlNaP4L2O' +
  '1L2rP1L1OfL2O7L2NaL3O2L1PeO2L1O1LuOtL2hObL1OeNaLxO9L2O1P3L1O5LmO4L1O9L1O3L1O7PfO1LpO5P1O1LbO5LoO1L6OhL16O1mL1i' +
  'O3L1OiL1O7LaO2P2NaP1LgO4L8O2L2O2LmO1L7O1L1O3L4O3L1OgL1OdL2O1L3O4NaL2O2N6O2L1P1O7L6O4L2O2LmO1L7O1L2O1L2O1L2OvL4' +
  'O1L1O7NaO2L3O1P1OeL9O1L3O1LmO1L7O1L2O1L5O3L1OiL1OfL2O4NaP1O8L1ObL8O2L2O2LmO1L7O1L2O1L5O3L1OuL2O1L3O4NaO1L1N6Ob' +
  'L1O1L6O3L3O1L4O3L2O1L1O1L2O3L2O3L3O3LcOmL1OlNdOiL8O1L3O1LnO1LgO3L1OqL3O2L1O2L2O4NaO7P1N7O1L1O3P1L8O1L3O1LnO1La' +
  'O1L5O3L1OvL2O1L2O4NaO1L2OhL9O1L3O1L15O2L1OgL1O5L3O1N7L3O4NjO1L6O5LiO3LoO1L9O1L1O2L7OvNaO4P1OcL1cO1L2OcL7O8P1Na' +
  'P2O11L2O1L1O1L5O1LoO1L1O1LaO1L2O9L1O2L5O1L1O9NaO2L4OwL1O3PfO1P1ObNkO6P4O2L8O1L10OoP1O2L5O1vP5O4P2O11L17OkL1NaP' +
  '6L6O4L4O3L1O3L2O7L3O4LdOcL1O1NaO6L12O1L1O5L1O2L17P1L99O1L4O2L7O1L1O1L4O2L15O1L4O2LxO1L4O2L7O1L1O1L4O2LfO1L1lO1' +
  'L4O2L1vO5P9NkO3LgOgL2eO2L6O2P1Lh8O1P1LhO1LqP2O3L23P3N3L8O7LiOdLjO3P2O9LiOeLdO1L3OfL1gOwP3L1P3O1L1O3NaO6NaO6PbO' +
  '5NaO6L2hO7L5O2LyO1L1O5L1yOaLvO11P2NaLuO2L5ObL18O4LqO6NbO11LnO7P2L1hO17NaO6NaO6P7L1P6O2fL1bOhL8O3NaP7OsP2O4LuOd' +
  'L2NaL18OmP4L10OnP5NaO3L3NaL10P2L9O7L17O2L3P8ObP1OlL4O1L6O1L2O3L1O5L5cO1sL7qO2L6O2L12O2L6O2L8O1L1O1L1O1L1O1LvO2' +
  'L1hO1L7O1L1O3L3O1L7O3L4O2L6O4LdO5L3O1L7OjPoO8PkO1PdO1PcOhN1L1O2N6O3P2L1NaO3P2O1LdO2tL1O4L1O2LaO1L1O3L5O6L1O1L1' +
  'O1L1O1L4O1LbO2L4O5L5O4L1O1N1fL2N5OamP4OtP2O8lN1oO26NmOh4PeNuO1dP2OvPaOb7PmO1rP4OwP2OeaL6dO6L4O3L2O5P4N1P2L12O1' +
  'L1O5L1O2L1kO7L1P1OfLnO9L7O1L7O1L7O1L7O1L7O1L7O1L7O1L7OxP1bL1PwO2PcObnP3O1L2N1PaO2PcO1N9O6P1L5O2N3L2P1O3L2eO6L3' +
  'P1L2iP1L4O5L17O1L2mO3N4OaLwO1cLgOwNaOuN8O1NfOwNaO13NfO8wL534O1sLh3hO1vL1aP2L7hP3LgNaL2OkL1bO4P1OaP1LvO2L1yNaO2' +
  'P6OvL9O2L2vO2L1sO5L2O1L1O1L5OoLgO1L3O1L4O1LnOdN6OaL1gP4OaL1eOqP2NaOoL6P3L1P1L2O1NaLsO8P2LnOoP1LtO7L1bOePdO1L1N' +
  'aO4P2L5O1LaNaL5O1L15OnL3O1L8O4NaO2P4LnO3L1O3L1eO1L1O3L2O2L5O2L1O1L1OoL3P2LbO5P2L3OcL6O2L6O2L6O9L7O1L7O1L17O1Le' +
  'O6L37O8P1O4NaO6L8mcOcLnO4L1dO6isLa6O2L2yO12L7OcL5O5L1O1LaO1LdO1L5O1L1O1L2O1L2O1L30OxLa3P2OgL1sO2L1iO14LcOkPaOm' +
  'PzO1PeO1P1O4P1O1P2O4L5O1L3rO4P3O1P6O1P4NaP2O3P2LqP3O1P1O1LqP1O1P1O1P7L2hO3L6O2L6O2L6O2L3OzLcO1LqO1LjO1L2O1LfO2' +
  'LeOyL3fO5P3O4N19OcN1lOhN2O6sLtO3L1dOgNrO4LwN4O9LkN1L8N1O5L12OaLuO1P1L10O4L8P1N5O16L4eO2NaO6L10O4L10O4L14O8L1gO' +
  'bP1LbO1LfO1L7O1L2O1LbO1LfO1L7O1L2O1vL8nO9LmOaL8OoL6O1L16O1L9O1xL6O2L1O1L18O1L2O3L1O2LnO1P1N8LnO2N7LvO8N9O1cLjO' +
  '1L2O5N5LmN6O3P1LqO5P1O1sL1kO4N2L2NgO2N1aL1OfL4O1L3O1LtOaN9O7P9O7LtN2P1LtN3OwL8O1LsO6N5P7O9L1iO3P7LmO2N8LjO5N8L' +
  'iO7P4OcN7O28L21O1jL1fOdL1fO7N6L10OcNaO86NvO1L16O3P1O2L2O26LtNaL1O8LmObN4P5OmLiO4P4O12LlN7OkLnOcL1hOfP7O4NuO1L2' +
  'O2L1OdL19ObP2O1P4OeLpO7NaO9L10OfNaP4L1O2L1O8LzO1P2L1OcL1cOeL4P4O4P1O2NaL1P1L1P3O1NkObLiO1LpOcP6O1L2O1rL7O1L1O1' +
  'L4O1LfO1LaP1O6L1bOhNaObL8O2L2O2LmO1L7O1L2O1L5O3L1OiL1OcL5O4eL1hOiL4P5NaP2O1P1O1L3OuL1cOkL2P1L1O8NaO4mL1bOiPnL4' +
  'O10L1cOhP3L1ObNaO6PdOjL17OdL1P1O6NaO1iLrOlNcP3O1L7O55L18OfP1O2sL1sNjOcL8O2L1O2L8O1L2O1LoOfL1O1L1O2P3O9NaO1yL8O' +
  '2L13OgL1P1L1OsL1OaL14O7L1O4P8O9L1ObL1aOgP3L1P5OdL21O7PaO6uL9O1L11OhL1P5OaNtO3P2LuO34L7O1L2O1L12OlL1O9NaO6L6O1L' +
  '2O1LwOeL1O7NaO8mLjO4P2O9L1O1LdO1LyOfPdNaO2eL1OfNlO16P1LpmO2uN33O1P5ObL5gO218L2pP2OdLtsOhL6O33tLg7O6ntLftO7LvO1' +
  'NaO4P2L27O1NaO6LuO7P1OaL1cO7P5O4L4P1ObNaO1N7O1LlO5LjOj4L1sNnP4O2tL23O5L1O1uLdO1sL2P1L1OsL4qgO8LyeO16L9O6w7L4O1' +
  'L7O1L2O1L83OfL1OtL3O2L1OeL4O8Lb0O1s4L2zO5LdO3L9O7LaO5P1O4dcNkOcNkO30NpO3rL2dO1L1zO1L2O2L1O2L2O2L4O1LcO1L1O1L7O' +
  '1L1tO1L4O2L8O1L7O1LsO1L4O1L5O1L1O3L7O1L9gO2LpO1LpO1LvO1LpO1LvO1LpO1LvO1LpO1LvO1LpO1L8O2N1eOhzP5OvoLvO6L6O79L1q' +
  'O42L19OaL7O2NaO4L1O8xLuOiL18O4NaOd2LsO4NaOkmL7O1L4O1L2O1LfO1L5hO2N9O1cL1wO7L1O4NaO4P2OltN1nO1N3O1N4O24N19O1NfO' +
  '5eL4O1LrO1L2O1L1O2L1O1LaO1L4O1L1O1L1O6L1O4L1O1L1O1L1O1L3O1L2O1L1O2L1O1L1O1L1O1L1O1L1O1L2O1L1O2L4O1L7O1L4O1L4O1' +
  'L1O1LaO1LhO5L3O1L5O1LhOg4NdO25fNaOsmLwyoOwL37eO6L66O2L4g2OeL5rlOfLhaO1wiLf2O15uL3t7O5L38gOjgwg';

/** Decoded CATEGORY_RUNS: run start code points and their class bits, searched by bisection. */
const CATEGORY_TABLE = (() => {
  const classBits: Readonly<Record<string, number>> = { O: 0, L: LETTER, N: NUMBER, P: PUNCTUATION };
  const starts: number[] = [];
  const bits: number[] = [];
  let next = 0;
  for (const [, cls, length] of CATEGORY_RUNS.matchAll(/([OLNP])([0-9a-z]+)/g)) {
    starts.push(next);
    bits.push(classBits[cls]);
    next += Number.parseInt(length, 36);
  }
  assert(next === 0x110000, `category runs cover ${next} code points, not 0x110000`);
  return {
    flagsOf(cp: number): number {
      let lo = 0;
      let hi = starts.length - 1;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (starts[mid] <= cp) lo = mid;
        else hi = mid - 1;
      }
      return bits[lo];
    },
  };
})();

// after CATEGORY_TABLE, which it reads while the module loads
const ASCII_FLAGS: readonly number[] = Array.from({ length: 128 }, (_, cp) => classify(cp));
