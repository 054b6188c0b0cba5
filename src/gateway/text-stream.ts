/**
 * Generated tokens → text, as it may be released to the client: UTF-8 characters are never split across tokens, and
 * text that could be the start of a stop sequence is held back until it is known not to be one. When a stop sequence
 * appears, the text before it is released and the stop sequence itself is not (OpenAI's behaviour).
 */
import { IDS_STEP, type Tokenizer } from '../model/tokenizer.js';
import { mapSteps, type Steps } from '../util/steps.js';

export interface TextStep {
  /** text released by this token (possibly empty) */
  text: string;
  /** a stop sequence completed: generation must end here */
  stopped: boolean;
}

export class TextStream {
  private readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true }); // a leading U+FEFF is generated text
  private held = '';
  private done = false;
  private tokens = 0;
  /** the held text's first `floor` UTF-16 units came before `minTokens`: a stop sequence must end past them */
  private floor = 0;

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly stops: readonly string[],
    /** stop sequences match only from the answer's minTokens-th token on (vLLM's min_tokens), ending there or later */
    private readonly minTokens = 0,
  ) {}

  push(tokenId: number): TextStep {
    if (this.done) return { text: '', stopped: true };
    this.held += this.decoder.decode(this.tokenizer.decodeBytes([tokenId]), { stream: true });
    if (++this.tokens < this.minTokens) this.floor = this.held.length;
    return this.release();
  }

  /** Characters (code points: charCount) decoded and held back (a possible start of a stop sequence), not released. */
  get heldChars(): number {
    return charCount(this.held);
  }

  /** The end of generation: whatever is held is final text. */
  finish(): string {
    if (this.done) return '';
    this.held += this.decoder.decode();
    const step = this.release();
    const rest = step.stopped ? '' : this.held;
    this.held = '';
    this.done = true;
    return step.text + rest;
  }

  private release(): TextStep {
    let first = -1;
    for (const stop of this.stops) {
      const at = this.held.indexOf(stop, Math.max(0, this.floor - stop.length + 1));
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
      const text = this.held.slice(0, first);
      this.held = '';
      this.done = true;
      return { text, stopped: true };
    }
    const keep = this.heldBackLength();
    const text = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    this.floor = Math.max(0, this.floor - text.length);
    return { text, stopped: false };
  }

  /** Length of the longest suffix of the held text that is a proper prefix of a stop sequence. */
  private heldBackLength(): number {
    let keep = 0;
    for (const stop of this.stops) {
      for (let n = Math.min(stop.length - 1, this.held.length); n > keep; n--) {
        if (this.held.endsWith(stop.slice(0, n))) {
          keep = n;
          break;
        }
      }
    }
    return keep;
  }
}

/** one decoder for every piece: without `stream` a decode call keeps nothing from the last */
const PIECE_DECODER = new TextDecoder('utf-8', { ignoreBOM: true });

/**
 * A token's own text and bytes, for logprobs (a token may hold part of a UTF-8 character). Called for every token and
 * each of its top alternatives (21 a token at top_logprobs 20): a fresh decoder and Array.from's iteration each time
 * took a 2,000-token reply's pieces ~0.26 s on the event loop (I11 review).
 */
export function tokenPiece(tokenizer: Tokenizer, id: number): { text: string; bytes: number[] } {
  const raw = tokenizer.decodeBytes([id]);
  const bytes = new Array<number>(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw[i]!;
  return { text: PIECE_DECODER.decode(raw), bytes };
}

/** Each id's piece as text (tokenPiece's), with a pause (`yield`) after every IDS_STEP, for a thread taking turns. */
export function pieceTextSteps(tokenizer: Tokenizer, ids: readonly number[]): Steps<string[]> {
  return mapSteps(ids, (id) => PIECE_DECODER.decode(tokenizer.decodeBytes([id])), IDS_STEP);
}

/**
 * Characters as text_offset counts them: code points, as OpenAI's and vLLM's Python strings do, so that a client's
 * `text[offset:]` starts at the token; a character past U+FFFF is one, not JavaScript's two UTF-16 units.
 */
export function charCount(text: string): number {
  let pairs = 0;
  for (let i = 0; i + 1 < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        pairs++;
        i++;
      }
    }
  }
  return text.length - pairs;
}
