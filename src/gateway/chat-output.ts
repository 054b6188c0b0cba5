/**
 * A chat answer as text arrives, shaped by the request's tool choice into content and tool calls — both for streaming
 * (the deltas to send now) and for the final message:
 *   text      content as it comes;
 *   named     the text is the forced function's arguments: one tool call, its arguments streamed as they come;
 *   required  the text is a JSON array of calls (constrained): parsed at the end, one delta per call;
 *   auto      content as it comes until the text may be starting a tool call (hermes: a prefix of <tool_call>;
 *             llama3_json: an answer that opens with '{'); from there it is held and parsed at the end — calls
 *             become tool_calls, anything else is released as content.
 */
import { callOf, HERMES_OPEN, parseToolCalls, type ToolCall, type ToolCallFormat, toolCallId } from './tool-calls.js';
import type { ToolChoice } from './tool-request.js';

export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

export type ChatDelta = { content: string } | { tool_calls: ToolCallDelta[] };

export interface ChatMessageOut {
  role: 'assistant';
  content: string | null;
  tool_calls?: ToolCall[];
}

export class ChatOutput {
  private text = '';
  /** auto: length of the text already released as content */
  private released = 0;
  /**
   * the text from `released` on, kept apart: `text` grows a piece at a time, and a slice of it copied all of it at
   * every token (64k tokens of a long answer: 88 s of event loop, one token up to 217 ms; I11 hunt)
   */
  private unreleased = '';
  private holding = false;
  private namedCall: ToolCall | undefined;

  constructor(
    private readonly choice: ToolChoice | undefined,
    private readonly format: ToolCallFormat,
    private readonly toolNames: ReadonlySet<string>,
  ) {}

  /** The deltas for newly released text. */
  push(piece: string): ChatDelta[] {
    if (piece === '') return [];
    this.text += piece;
    this.unreleased += piece;
    switch (this.choice?.kind) {
      case undefined:
      case 'none':
        return [{ content: piece }];
      case 'named':
        return this.namedDeltas(piece);
      case 'required':
        return [];
      case 'auto':
        return this.autoDeltas(piece);
    }
  }

  /** The last deltas and the whole message; `cut`: the output ended at max_tokens (no parse of a partial call). */
  finish(cut: boolean): { deltas: ChatDelta[]; message: ChatMessageOut } {
    const kind = this.choice?.kind;
    if (kind === 'named') {
      const deltas = this.namedCall === undefined ? this.namedDeltas('') : [];
      return { deltas, message: { role: 'assistant', content: null, tool_calls: [this.namedCall!] } };
    }
    const required = kind === 'required' && !cut ? this.requiredCalls() : undefined;
    if (required !== undefined) {
      return { deltas: callDeltas(required, 0), message: { role: 'assistant', content: null, tool_calls: required } };
    }
    if (kind === 'auto' && this.holding && !cut) {
      const parsed = parseToolCalls(this.unreleased, this.format, this.toolNames);
      if (parsed.toolCalls.length > 0) {
        const before = this.text.slice(0, this.released);
        const content = before + (parsed.content ?? '');
        const deltas: ChatDelta[] = parsed.content !== null ? [{ content: parsed.content }] : [];
        deltas.push(...callDeltas(parsed.toolCalls, 0));
        return {
          deltas,
          message: { role: 'assistant', content: content === '' ? null : content, tool_calls: parsed.toolCalls },
        };
      }
    }
    const rest = kind === 'none' || kind === undefined ? '' : this.unreleased;
    this.released = this.text.length;
    this.unreleased = '';
    return { deltas: rest === '' ? [] : [{ content: rest }], message: { role: 'assistant', content: this.text } };
  }

  /** The constrained array of calls (the grammar allows nothing else; anything else would be released as content). */
  private requiredCalls(): ToolCall[] | undefined {
    let parsed: unknown;
    try {
      parsed = JSON.parse(this.text);
    } catch {
      return undefined;
    }
    if (!Array.isArray(parsed) || parsed.length === 0) return undefined;
    const calls = parsed.map((c) => callOf(c, this.toolNames));
    return calls.every((c) => c !== undefined) ? (calls as ToolCall[]) : undefined;
  }

  private namedDeltas(piece: string): ChatDelta[] {
    const deltas: ChatDelta[] = [];
    if (this.namedCall === undefined) {
      const name = (this.choice as { name: string }).name;
      this.namedCall = { id: toolCallId(), type: 'function', function: { name, arguments: '' } };
      deltas.push({
        tool_calls: [{ index: 0, id: this.namedCall.id, type: 'function', function: { name, arguments: '' } }],
      });
    }
    this.namedCall.function.arguments += piece;
    if (piece !== '') deltas.push({ tool_calls: [{ index: 0, function: { arguments: piece } }] });
    return deltas;
  }

  private autoDeltas(piece: string): ChatDelta[] {
    if (this.holding) return [];
    const pending = this.unreleased;
    let keep: number;
    if (this.format === 'hermes') {
      const open = pending.indexOf(HERMES_OPEN);
      if (open >= 0) {
        this.holding = true;
        keep = pending.length - open;
      } else {
        keep = heldPrefixLength(pending, HERMES_OPEN);
      }
    } else {
      // nothing released yet (and not holding) means all before this piece was whitespace, so the new piece alone
      // says whether the answer opens with '{': trimming the whole answer at every token was quadratic in an answer of
      // whitespace (6.9 s of event loop for 8,192 tokens; I11 review)
      if (this.released === 0) {
        const start = piece.search(NON_SPACE);
        if (start < 0) return [];
        if (piece[start] === '{') {
          this.holding = true;
          return [];
        }
      }
      keep = 0;
    }
    const out = pending.slice(0, pending.length - keep);
    this.released += out.length;
    this.unreleased = pending.slice(out.length);
    return out === '' ? [] : [{ content: out }];
  }
}

/** what String.prototype.trimStart does not remove */
const NON_SPACE = /\S/;

function callDeltas(calls: readonly ToolCall[], first: number): ChatDelta[] {
  return calls.map((c, i) => ({
    tool_calls: [{ index: first + i, id: c.id, type: 'function', function: { ...c.function } }],
  }));
}

/** Length of the longest suffix of `text` that is a proper prefix of `marker`. */
function heldPrefixLength(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}
