/**
 * Generated tokens → text, as it may be released to the client: UTF-8 characters are never split across tokens, and
 * text that could be the start of a stop sequence is held back until it is known not to be one. When a stop sequence
 * appears, the text before it is released and the stop sequence itself is not (OpenAI's behaviour).
 */
import type { Tokenizer } from '../model/tokenizer.js';

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

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly stops: readonly string[],
  ) {}

  push(tokenId: number): TextStep {
    if (this.done) return { text: '', stopped: true };
    this.held += this.decoder.decode(this.tokenizer.decodeBytes([tokenId]), { stream: true });
    return this.release();
  }

  /** Characters decoded and held back (a possible start of a stop sequence), not yet released. */
  get heldChars(): number {
    return this.held.length;
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
      const at = this.held.indexOf(stop);
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

/** A token's own text and bytes, for logprobs (a token may hold part of a UTF-8 character). */
export function tokenPiece(tokenizer: Tokenizer, id: number): { text: string; bytes: number[] } {
  const bytes = tokenizer.decodeBytes([id]);
  return { text: new TextDecoder('utf-8', { ignoreBOM: true }).decode(bytes), bytes: Array.from(bytes) };
}
