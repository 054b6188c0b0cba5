/**
 * One of a request's n answers as the gateway builds it: its text (stop sequences), its chat shape (content and tool
 * calls), and, for a body answer, its tokens and text. A stream keeps only counts (what it holds is bounded by its
 * writer, not by its length).
 */
import type { FinishReason, GeneratedToken } from '../engine/request.js';
import type { Tokenizer } from '../model/tokenizer.js';
import { ChatOutput } from './chat-output.js';
import type { ParsedRequest } from './schemas.js';
import { charCount, TextStream } from './text-stream.js';
import type { ToolCallFormat } from './tool-calls.js';

export class ChoiceState {
  readonly text: TextStream;
  /** chat: the answer as content and tool calls */
  readonly chat: ChatOutput | undefined;
  /** the tokens and text of a body answer */
  readonly tokens: GeneratedToken[] = [];
  /** where each of `tokens` starts in the answer's text, in characters (charCount: completions' text_offset, before any echo) */
  readonly offsets: number[] = [];
  content = '';
  contentChars = 0;
  completionTokens = 0;
  lastTokenMs: number | undefined;
  /** 'stop' once a stop sequence ended this answer here (the request's other answers may still be generating) */
  ended: FinishReason | undefined;

  constructor(
    readonly index: number,
    tokenizer: Tokenizer,
    parsed: ParsedRequest,
    toolCallFormat: ToolCallFormat,
  ) {
    this.text = new TextStream(tokenizer, parsed.stop, parsed.sampling.minTokens);
    const tools = parsed.tools;
    this.chat =
      parsed.endpoint === 'chat'
        ? new ChatOutput(tools?.choice, toolCallFormat, new Set(tools?.tools.map((t) => t.name)))
        : undefined;
  }

  /**
   * Where the next token's text starts in the answer: the characters decoded from the tokens before it, released or
   * held back (a stop's possible start); bytes of a character not yet complete are not counted.
   */
  get nextOffset(): number {
    return this.contentChars + this.text.heldChars;
  }

  addContent(text: string, keep: boolean): void {
    this.contentChars += charCount(text);
    if (keep) this.content += text;
  }
}
