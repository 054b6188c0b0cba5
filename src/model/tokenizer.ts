/**
 * Tokenizers built from GGUF metadata, reproducing llama.cpp's (src/llama-vocab.cpp) token ids exactly:
 * - `gpt2`: byte-level BPE: pre-tokenizer split, GPT-2 byte encoding, merges by rank (lowest first, leftmost on ties).
 * - `llama`: SentencePiece style: spaces written as ▁, a space prefixed to each text run, adjacent pieces merged by the
 *   score of the merged piece (highest first, leftmost on ties), unknown characters spelled as <0xXX> byte tokens.
 * Special tokens are cut out of the text first (llama.cpp's tokenizer_st_partition): control and unknown tokens only
 * when parseSpecial is set, user-defined tokens always, as llama.cpp does.
 *
 * Everything is hand-written rather than delegated to @huggingface/tokenizers: llama.cpp's word splitting, its
 * partition order, its `ignore_merges` and byte fallbacks, and its score-based SentencePiece merge differ from the
 * Hugging Face implementations in corner cases, and matching llama.cpp id for id is the requirement.
 */
import { assert } from '../util/assert.js';
import { KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';
import { finish, type Steps } from '../util/steps.js';
import { type GgufMetadata, metaBool, metaString } from './gguf-types.js';
import { MergeScratch } from './merge-queue.js';
import { BpeRules, SpmRules } from './merge-rules.js';
import {
  BYTE_TO_CHAR,
  byteOfChar,
  CodePoints,
  PAUSE,
  PRE_TOKENIZER_TRAITS,
  type PreTokenizerName,
  preTokenizerFor,
  wordEnds,
} from './pretokenizer.js';
import {
  ATTR_BYTE,
  ATTR_CONTROL,
  ATTR_NORMAL,
  ATTR_UNKNOWN,
  ATTR_USER_DEFINED,
  EOG_BY_NAME,
  FIM_EOG_BY_NAME,
  invalid,
  readMerges,
  readVocabulary,
  specialId,
  type TokenizerModel,
  type Vocabulary,
} from './tokenizer-vocab.js';

export interface EncodeOptions {
  /** add BOS (when addBos) and EOS (when tokenizer.ggml.add_eos_token) */
  addSpecial?: boolean;
  /** recognize control and unknown tokens written in the text (user-defined tokens are always recognized) */
  parseSpecial?: boolean;
  /**
   * [start, end) ranges of the text (UTF-16 offsets, ascending, disjoint) read as if parseSpecial were off: a control
   * token's text overlapping one is plain text. Chat message content is such a range, so a user who types
   * `<|im_start|>` in a message gets those characters, never a role marker.
   */
  literalRanges?: readonly (readonly [number, number])[];
}

export interface DecodeOptions {
  /** write control and unknown tokens as their text instead of dropping them */
  renderSpecial?: boolean;
}

export interface Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  /** tokenizer.ggml.add_bos_token, or llama.cpp's default for the vocabulary type when absent */
  readonly addBos: boolean;
  /**
   * the most UTF-16 code units of text one token stands for, but for the whitespace a special token that swallows any
   * run of it takes along (llama.cpp's RSTRIP, Phi-3 vocabularies): the gateway refuses a text longer than n × this for
   * n tokens, that whitespace counted (gateway/prompt-length.ts)
   */
  readonly longestTokenChars: number;
  /** ids for text; addSpecial adds BOS when addBos; parseSpecial recognizes special/control tokens written in the text */
  encode(text: string, options?: EncodeOptions): number[];
  /**
   * `text`'s ids when they number at most `max`, else undefined, known as soon as they are sure to pass it: a caller
   * that only needs to know that a prompt exceeds the context neither tokenizes the rest of it nor merges a word whose
   * length alone (over longestTokenChars a token) passes it
   */
  encodeUpTo(text: string, max: number, options?: EncodeOptions): number[] | undefined;
  /**
   * encodeUpTo a slice of work at a time: each `yield` is a pause, a few milliseconds of work after the last at most
   * but for steps that cannot pause (~0.1 s at most for 16 million characters), so that a thread can take turns
   * between prompts (encoder-thread.ts); what it returns is encodeUpTo's answer
   */
  encodeSteps(text: string, max: number, options?: EncodeOptions): Steps<number[] | undefined>;
  /** text as llama.cpp's llama_detokenize gives it (drops one leading space for SentencePiece, cleans spaces for some) */
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** decode with a pause (`yield`) after every IDS_STEP ids, for a thread that takes turns (encoder-thread.ts) */
  decodeSteps(ids: readonly number[], options?: DecodeOptions): Steps<string>;
  /** raw bytes of tokens, for streaming decoders that must not split a UTF-8 character */
  decodeBytes(ids: readonly number[]): Uint8Array;
  /** eos, eot, eom and tokens llama.cpp treats as end of generation by name (<|im_end|>, <|endoftext|>, </s> …) */
  isEndOfGeneration(id: number): boolean;
  /** whether the text holds a control or unknown token's text (what parseSpecial would turn into that token) */
  hasControlText(text: string): boolean;
  /** the vocabulary string of a token (for inspect/debug) */
  tokenText(id: number): string;
}

/** GGUF token types (tokenizer.ggml.token_type). */

/** A run of text (at its offset in the whole text) or a special token cut out of it. */
type Fragment = { text: string; at: number } | { id: number };

const UTF8_ENCODER = new TextEncoder();
/** encodeSteps pauses after words of this many code points, and after each special token's search of a longer text */
const WORDS_STEP_CHARS = 8192;
const PARTITION_PAUSE_CHARS = 1 << 16;
/** what a fragment costs encodeSteps beside its words, in code points of words (~0.5–1 µs) */
const FRAGMENT_UNITS = 16;
/** decodeSteps pauses after this many ids (~5–10 ms) */
export const IDS_STEP = 8192;
const UTF8_DECODER = new TextDecoder('utf-8', { ignoreBOM: true }); // a leading U+FEFF is text, not a mark
const SPM_SPACE = '\u2581';
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

class GgufTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number | undefined;
  readonly eosId: number | undefined;
  readonly addBos: boolean;
  readonly longestTokenChars: number;
  private readonly addEos: boolean;
  private readonly addSpacePrefix: boolean;
  private readonly cleanSpaces: boolean;
  private readonly ignoreMerges: boolean;
  private readonly eogIds: ReadonlySet<number>;
  /** control, user-defined and unknown tokens, longest text first: the order llama.cpp cuts them out of text */
  private readonly specialIds: readonly number[];
  /** of those, the ones cut out of text without parseSpecial: user-defined tokens (not control, not unknown) */
  private readonly userDefinedIds: readonly number[];
  /** special tokens that swallow the whitespace after them when cut out of text (llama.cpp's RSTRIP attribute) */
  private readonly rstripIds: ReadonlySet<number>;
  /** each token's bytes as llama.cpp renders it with special = true: token id's at [offsets[id], offsets[id + 1]) */
  private readonly pieceBytes: Uint8Array;
  private readonly pieceOffsets: Uint32Array;
  /** the merge loop's arrays for short words, reused word after word (encoding runs to its end without yielding) */
  private readonly scratch = new MergeScratch();

  constructor(
    private readonly model: TokenizerModel,
    private readonly pre: PreTokenizerName,
    private readonly vocab: Vocabulary,
    private readonly rules: BpeRules | SpmRules,
    meta: GgufMetadata,
  ) {
    const count = vocab.texts.length;
    this.vocabSize = count;
    const spm = model === 'llama';
    // llama.cpp's defaults when the ids are absent: 1/2 for llama, 11/11 for gpt2 (GPT-2's own files carry them)
    this.bosId = specialId(meta, 'bos_token_id', spm ? 1 : 11, count);
    this.eosId = specialId(meta, 'eos_token_id', spm ? 2 : 11, count);
    const eog = new Set<number>();
    for (const key of ['eot_token_id', 'eom_token_id', 'fim_pad_token_id', 'fim_rep_token_id', 'fim_sep_token_id']) {
      const id = specialId(meta, key, undefined, count);
      if (id !== undefined) eog.add(id);
    }
    if (this.eosId !== undefined) eog.add(this.eosId);
    vocab.texts.forEach((text, id) => {
      if (EOG_BY_NAME.has(text) || FIM_EOG_BY_NAME.has(text)) eog.add(id);
    });
    this.eogIds = eog;
    this.addBos = metaBool(meta, 'tokenizer.ggml.add_bos_token') ?? (spm || PRE_TOKENIZER_TRAITS[pre].addBosDefault);
    this.addEos = metaBool(meta, 'tokenizer.ggml.add_eos_token') ?? false;
    this.addSpacePrefix = metaBool(meta, 'tokenizer.ggml.add_space_prefix') ?? spm;
    this.cleanSpaces = !spm && PRE_TOKENIZER_TRAITS[pre].cleanSpaces;
    this.ignoreMerges = !spm && PRE_TOKENIZER_TRAITS[pre].ignoreMerges;
    if (this.addBos && this.bosId === undefined) throw invalid('tokenizer adds BOS but has no bos_token_id');
    if (this.addEos && this.eosId === undefined) throw invalid('tokenizer adds EOS but has no eos_token_id');
    const specialMask = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN;
    this.specialIds = vocab.texts
      .map((_, id) => id)
      .filter((id) => vocab.attrs[id] & specialMask)
      .sort((a, b) => vocab.texts[b].length - vocab.texts[a].length || a - b);
    this.userDefinedIds = this.specialIds.filter((id) => !isControl(vocab.attrs[id]!));
    this.rstripIds = rstripIdsOf(meta, vocab, this.specialIds);
    const pieces: Uint8Array[] = [];
    this.pieceOffsets = new Uint32Array(count + 1);
    let room = LIMITS.tokenizerPieceBytesMax;
    for (let id = 0; id < count; id++) {
      const piece = this.renderPiece(id, room);
      if (piece === undefined)
        throw invalid(
          `token ${id}'s text renders the vocabulary past ${LIMITS.tokenizerPieceBytesMax} bytes ` +
            '(LIMITS.tokenizerPieceBytesMax: each character outside the byte-level table is spelled with the whole token)',
        );
      pieces.push(piece);
      room -= piece.length;
      this.pieceOffsets[id + 1] = this.pieceOffsets[id]! + piece.length;
    }
    this.pieceBytes = concatBytes(pieces, this.pieceOffsets[count]!);
    // a byte-level BPE token's text has one character per byte it stands for, a SentencePiece piece one per character
    // (▁ for a space), a special token its own text, a byte token (<0xXX>) more than the one byte: all upper bounds.
    // A BPE vocabulary without a token for every byte drops the bytes it cannot spell (as llama.cpp does): no bound.
    const spellsEveryByte = spm || BYTE_TO_CHAR.every((ch) => vocab.idOf.has(ch));
    this.longestTokenChars = spellsEveryByte
      ? vocab.texts.reduce((longest, text) => Math.max(longest, text.length), 1)
      : Number.POSITIVE_INFINITY;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    const ids = this.encodeUpTo(text, Number.POSITIVE_INFINITY, options);
    assert(ids !== undefined, 'ids within no bound');
    return ids;
  }

  encodeUpTo(text: string, max: number, options: EncodeOptions = {}): number[] | undefined {
    return finish(this.encodeSteps(text, max, options));
  }

  *encodeSteps(rawText: string, max: number, options: EncodeOptions = {}): Steps<number[] | undefined> {
    // llama.cpp sees the text's UTF-8, where a lone surrogate is U+FFFD: same length, so offsets stay valid
    const text = rawText.replace(LONE_SURROGATE, '\uFFFD');
    const addSpecial = options.addSpecial ?? false;
    const output: number[] = [];
    if (addSpecial && this.addBos) output.push(this.bosId!);
    // ids for `chars` more characters pass `max` for sure: each stands for at most longestTokenChars of them. A word of
    // 262,144 CJK letters took 1.2 s to merge only to be refused (I11 review, Llama 3's vocabulary)
    const surelyPast = (chars: number) => output.length + Math.ceil(chars / this.longestTokenChars) > max;
    let previousWasSpecial = true; // SentencePiece prefixes a space to the first run and to runs after special tokens
    const literal = options.literalRanges ?? [];
    const fragments = yield* this.partition(text, options.parseSpecial ?? false, literal, max - output.length);
    if (fragments === undefined) return undefined;
    // work since the last pause, in code points of words (a fragment counts FRAGMENT_UNITS more): `units` more of it,
    // and whether a pause is due
    let sincePause = 0;
    const pauseDue = (units: number): boolean => {
      sincePause += units;
      if (sincePause < WORDS_STEP_CHARS) return false;
      sincePause = 0;
      return true;
    };
    for (const fragment of fragments) {
      if (output.length > max) return undefined;
      if (pauseDue(FRAGMENT_UNITS)) yield;
      if ('id' in fragment) {
        output.push(fragment.id);
        previousWasSpecial = true;
      } else if (this.model === 'llama') {
        const prefixed = this.addSpacePrefix && previousWasSpecial ? ` ${fragment.text}` : fragment.text;
        if (surelyPast(prefixed.length)) return undefined;
        yield* this.encodeSentencePiece(prefixed.replaceAll(' ', SPM_SPACE), output, max);
        previousWasSpecial = false;
      } else {
        // each word's ids are at least its bytes over longestTokenChars, so the fragment's at least all its bytes over
        // it: checked before the words are cut, which for a 262,144-letter word allocated ~10 MB
        if (surelyPast(Buffer.byteLength(fragment.text))) return undefined;
        const points = new CodePoints(fragment.text);
        let start = 0;
        for (const end of wordEnds(points, this.pre)) {
          if (end === PAUSE) {
            yield;
            continue;
          }
          const long = end - start > WORDS_STEP_CHARS;
          if (long) yield; // after its cut (~60 ms for 16 million spaces)
          const word = long ? yield* points.byteLevelSteps(start, end) : points.byteLevelOf(start, end);
          const chars = end - start;
          start = end;
          if (surelyPast(word.length)) return undefined;
          yield* this.encodeBpeWord(word, output, max);
          if (output.length > max) return undefined;
          if (pauseDue(chars)) yield;
        }
      }
    }
    if (addSpecial && this.addEos) output.push(this.eosId!);
    return output.length > max ? undefined : output;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    return finish(this.decodeSteps(ids, options));
  }

  *decodeSteps(ids: readonly number[], options: DecodeOptions = {}): Steps<string> {
    const renderSpecial = options.renderSpecial ?? false;
    const parts: Uint8Array[] = [];
    for (let index = 0; index < ids.length; index++) {
      let piece = this.piece(ids[index]!, renderSpecial);
      // llama.cpp strips one leading space from the first token only (the one SentencePiece encoding added)
      if (index === 0 && this.addSpacePrefix && piece[0] === 0x20) piece = piece.subarray(1);
      parts.push(piece);
      if (index % IDS_STEP === IDS_STEP - 1) yield;
    }
    const bytes = Buffer.concat(parts);
    return UTF8_DECODER.decode(this.cleanSpaces ? cleanSpaces(bytes) : bytes);
  }

  decodeBytes(ids: readonly number[]): Uint8Array {
    return new Uint8Array(Buffer.concat(ids.map((id) => this.piece(id, false))));
  }

  isEndOfGeneration(id: number): boolean {
    return this.eogIds.has(id);
  }

  tokenText(id: number): string {
    this.checkId(id);
    return this.vocab.texts[id];
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new KvfenceError('invalid_argument', `token id ${id} is outside the vocabulary of ${this.vocabSize}`);
    }
  }

  private piece(id: number, renderSpecial: boolean): Uint8Array {
    this.checkId(id);
    if (!renderSpecial && this.vocab.attrs[id] & (ATTR_UNKNOWN | ATTR_CONTROL)) return new Uint8Array(0);
    return this.pieceBytes.subarray(this.pieceOffsets[id], this.pieceOffsets[id + 1]);
  }

  /** llama.cpp's token_to_piece with special = true; undefined when longer than `room` bytes. */
  private renderPiece(id: number, room: number): Uint8Array | undefined {
    const attr = this.vocab.attrs[id];
    const text = this.vocab.texts[id];
    let piece: Uint8Array | undefined;
    if (attr & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER_DEFINED)) piece = UTF8_ENCODER.encode(text);
    else if (attr & ATTR_NORMAL)
      piece =
        this.model === 'llama' ? UTF8_ENCODER.encode(text.replaceAll(SPM_SPACE, ' ')) : byteLevelDecode(text, room);
    else if (attr & ATTR_BYTE) piece = Uint8Array.of(Number.parseInt(text.slice(3, 5), 16) || 0);
    else piece = new Uint8Array(0); // unused and undefined tokens render as nothing
    return piece !== undefined && piece.length <= room ? piece : undefined;
  }

  /**
   * Cuts special tokens out of the text, longest token first, as llama.cpp's tokenizer_st_partition does, with a pause
   * after each token's search through a long text; undefined once more than `max` are cut, each an id of the text's
   * (1.5 million `<|eot_id|>a` made 3 million fragments in one pass, ~0.3 s).
   */
  private *partition(
    text: string,
    parseSpecial: boolean,
    literal: readonly (readonly [number, number])[],
    max: number,
  ): Steps<Fragment[] | undefined> {
    let fragments: Fragment[] | undefined = text === '' ? [] : [{ text, at: 0 }];
    const cut = { count: 0 };
    for (const id of parseSpecial ? this.specialIds : this.userDefinedIds) {
      fragments = this.cutSpecial(fragments, id, isControl(this.vocab.attrs[id]!), literal, cut, max);
      if (fragments === undefined) return undefined;
      if (text.length > PARTITION_PAUSE_CHARS) yield;
    }
    return fragments;
  }

  /** partition's pass for special token `id`; undefined once `cut.count`, the tokens cut so far, passes `max`. */
  private cutSpecial(
    fragments: readonly Fragment[],
    id: number,
    control: boolean,
    literal: readonly (readonly [number, number])[],
    cut: { count: number },
    max: number,
  ): Fragment[] | undefined {
    const special = this.vocab.texts[id];
    const isLiteral = (start: number) =>
      control && literal.some(([from, to]) => start < to && start + special.length > from);
    const next: Fragment[] = [];
    for (const fragment of fragments) {
      if ('id' in fragment) {
        next.push(fragment);
        continue;
      }
      const { text: t, at: base } = fragment;
      let from = 0;
      for (let at = t.indexOf(special); at >= 0; at = t.indexOf(special, at + 1)) {
        if (at < from || isLiteral(base + at)) continue;
        if (at > from) next.push({ text: t.slice(from, at), at: base + from });
        next.push({ id });
        if (++cut.count > max) return undefined;
        from = at + special.length;
        if (this.rstripIds.has(id)) while (from < t.length && C_SPACES.has(t[from]!)) from++;
      }
      if (from < t.length) next.push({ text: t.slice(from), at: base + from });
    }
    return next;
  }

  hasControlText(text: string): boolean {
    return this.specialIds.some((id) => isControl(this.vocab.attrs[id]!) && text.includes(this.vocab.texts[id]));
  }

  /**
   * llama.cpp's llm_tokenizer_bpe_session for one byte-encoded word; its ids stop once `output` holds more than `max`
   * (a CJK word of 5 million letters left ~5 million symbols: ~0.1 s to push them all, for a refusal)
   */
  private *encodeBpeWord(word: string, output: number[], max: number): Steps<void> {
    const { idOf } = this.vocab;
    const whole = this.ignoreMerges ? idOf.get(word) : undefined;
    if (whole !== undefined) {
      output.push(whole);
      return;
    }
    const symbols = yield* this.scratch.merged(word, this.rules);
    for (let at = 0; at >= 0 && at < word.length && output.length <= max; at = symbols.next[at]!) {
      const id = symbols.id[at]!;
      if (id >= 0) {
        output.push(id);
        continue;
      }
      // a character without a token (a merged symbol always has one): llama.cpp looks each UTF-8 byte up as a one-byte
      // token text; only ASCII bytes can match one
      for (const b of UTF8_ENCODER.encode(symbols.text(at))) {
        const byteId = b < 0x80 ? idOf.get(String.fromCharCode(b)) : undefined;
        if (byteId !== undefined) output.push(byteId);
      }
    }
  }

  /** llama.cpp's llm_tokenizer_spm_session: merge by the score of the merged piece, then spell leftovers as bytes. */
  private *encodeSentencePiece(text: string, output: number[], max: number): Steps<void> {
    const { idOf } = this.vocab;
    const symbols = yield* this.scratch.merged(text, this.rules);
    for (let at = 0; at >= 0 && at < text.length && output.length <= max; at = symbols.next[at]!) {
      const piece = symbols.text(at);
      const id = idOf.get(piece);
      if (id !== undefined) {
        output.push(id);
        continue;
      }
      for (const b of UTF8_ENCODER.encode(piece)) output.push(this.byteToken(b));
    }
  }

  private byteToken(b: number): number {
    const hex = b.toString(16).toUpperCase().padStart(2, '0');
    const id = this.vocab.idOf.get(`<0x${hex}>`) ?? this.vocab.idOf.get(String.fromCharCode(b));
    if (id === undefined) throw invalid(`vocabulary has no byte token <0x${hex}> to spell an unknown character`);
    return id;
  }
}

/** control and unknown tokens: cut out of text only with parseSpecial, and then never inside a literal range */
function isControl(attr: number): boolean {
  return (attr & (ATTR_CONTROL | ATTR_UNKNOWN)) !== 0;
}

/** C's isspace in the "C" locale, which llama.cpp's RSTRIP uses on the text's bytes. */
const C_SPACES: ReadonlySet<string> = new Set([' ', '\t', '\n', '\v', '\f', '\r']);

/**
 * llama.cpp (llama_vocab::impl::load) gives models named like Phi-3 the RSTRIP attribute on every special token but
 * <unk>, <s> and <|endoftext|>, and on </s>; it refuses such a model without those four tokens.
 */
function rstripIdsOf(meta: GgufMetadata, vocab: Vocabulary, specialIds: readonly number[]): ReadonlySet<number> {
  const name = (metaString(meta, 'general.name') ?? '').toLowerCase();
  if (!name.includes('phi-3') && !name.includes('phi3')) return new Set();
  const idOf = (text: string) => {
    const id = vocab.idOf.get(text);
    if (id === undefined) throw invalid(`a Phi-3 vocabulary needs the token ${text}`);
    return id;
  };
  const ids = new Set([...specialIds, idOf('</s>')]);
  for (const text of ['<unk>', '<s>', '<|endoftext|>']) ids.delete(idOf(text));
  return ids;
}

/**
 * llama_decode_text: byte-level characters back to bytes; characters outside the table are spelled out, each with the
 * whole token's text (llama.cpp's quirk). Undefined when that makes more than `room` bytes, found before they are made.
 */
function byteLevelDecode(text: string, room: number): Uint8Array | undefined {
  const whole = UTF8_ENCODER.encode(text);
  const spellings: Uint8Array[] = [];
  let length = 0;
  for (const ch of text) {
    if (byteOfChar(ch) !== undefined) {
      length += 1;
    } else {
      const hex = Array.from(UTF8_ENCODER.encode(ch), (x) => x.toString(16).padStart(2, '0')).join('');
      const spelling = UTF8_ENCODER.encode(`[UNK_BYTE_0x${hex}`);
      spellings.push(spelling);
      length += spelling.length + whole.length + 1;
    }
    if (length > room) return undefined;
  }
  const out = new Uint8Array(length);
  let at = 0;
  let next = 0;
  for (const ch of text) {
    const b = byteOfChar(ch);
    if (b !== undefined) {
      out[at++] = b;
      continue;
    }
    const spelling = spellings[next++]!;
    out.set(spelling, at);
    out.set(whole, at + spelling.length);
    at += spelling.length + whole.length;
    out[at++] = 0x5d; // ]
  }
  return out;
}

/** `pieces` one after the other in one array of `length` bytes (their total). */
function concatBytes(pieces: readonly Uint8Array[], length: number): Uint8Array {
  const out = new Uint8Array(length);
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return out;
}

/** Every change cleanSpaces makes starts with a space and then one of these */
const AFTER_CLEANED_SPACE = [..."?!.,'"].map((c) => c.charCodeAt(0));

/** Whether a space comes right before one of AFTER_CLEANED_SPACE, found by native searches for those bytes. */
function hasCleanedSpace(bytes: Buffer): boolean {
  for (const c of AFTER_CLEANED_SPACE)
    for (let at = bytes.indexOf(c, 1); at > 0; at = bytes.indexOf(c, at + 1)) if (bytes[at - 1] === 0x20) return true;
  return false;
}

/**
 * llama_detokenize's clean_spaces, ported pass for pass (including its in-place quirks): drop the space before
 * ? ! . , ; drop both spaces around a lone apostrophe; drop the space before 's 'm 're 've. Bytes holding none of
 * the pairs those start with come back as they are (hasCleanedSpace): the three byte-by-byte passes took the event loop
 * ~200 ms for the 16.7 MB of /detokenize's 131,000 tokens of 128 spaces (I11 review).
 */
function cleanSpaces(input: Uint8Array): Uint8Array {
  if (!hasCleanedSpace(Buffer.from(input.buffer, input.byteOffset, input.byteLength))) return input;
  const text = Uint8Array.from(input);
  const SP = 0x20;
  const QUOTE = 0x27;
  const ch = (c: string) => c.charCodeAt(0);
  let total = text.length;
  const total1 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total1; i++) {
    const x = text[i];
    if (text[i - 1] === SP && (x === ch('?') || x === ch('!') || x === ch('.') || x === ch(','))) total--;
    text[total++] = x;
  }
  const total2 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total2; i++) {
    const x = text[i];
    if (x === QUOTE && i + 1 < total2 && text[i - 1] === SP && text[i + 1] === SP) {
      total--;
      text[++i] = 0;
    }
    text[total++] = x;
  }
  const total3 = total;
  total = total ? 1 : 0;
  for (let i = 1; i < total3; i++) {
    const x = text[i];
    if (text[i - 1] === SP && x === QUOTE && i + 1 < total3) {
      const x1 = text[i + 1];
      if (x1 === ch('s') || x1 === ch('m')) {
        total--;
      } else if (x1 !== ch('t') && x1 !== ch('d') && i + 2 < total3) {
        const x2 = text[i + 2];
        if ((x1 === ch('r') || x1 === ch('v')) && x2 === ch('e')) total--;
      }
    }
    text[total++] = x;
  }
  return text.subarray(0, total);
}

/** Builds the tokenizer a GGUF file describes; fails with invalid_model_file or unsupported_model on bad metadata. */
export function tokenizerFromGguf(meta: GgufMetadata): Tokenizer {
  const model = metaString(meta, 'tokenizer.ggml.model');
  if (model === undefined) throw invalid('tokenizer.ggml.model is missing');
  if (model !== 'gpt2' && model !== 'llama') {
    throw new KvfenceError('unsupported_model', `unsupported tokenizer.ggml.model '${model}' (supported: gpt2, llama)`);
  }
  const vocab = readVocabulary(meta);
  // llama.cpp reads the pre-tokenizer only for BPE vocabularies
  const pre = model === 'gpt2' ? preTokenizerFor(metaString(meta, 'tokenizer.ggml.pre')) : 'default';
  const rules =
    model === 'gpt2' ? new BpeRules(vocab.idOf, readMerges(meta, vocab)) : new SpmRules(vocab.idOf, vocab.scores);
  return new GgufTokenizer(model, pre, vocab, rules, meta);
}
