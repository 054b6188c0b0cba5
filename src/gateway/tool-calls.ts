/**
 * Tool calls in a model's own output (tool_choice auto), in the formats of the families kvfence serves:
 *   hermes       Qwen 2.5/3, Hermes, SmolLM3 templates: <tool_call>{"name": …, "arguments": {…}}</tool_call> blocks,
 *                anywhere in the text (the text around them is the message's content);
 *   llama3_json  Llama 3.1+: the whole answer is {"name": …, "parameters": {…}} (several separated by ';').
 * The format follows the chat template: one that writes <tool_call> is hermes, any other llama3_json. Output that
 * does not parse as calls of the request's tools is plain content, never a half-made call.
 */
import { randomBytes } from 'node:crypto';

export type ToolCallFormat = 'hermes' | 'llama3_json';

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ParsedOutput {
  content: string | null;
  toolCalls: ToolCall[];
}

export const HERMES_OPEN = '<tool_call>';
const HERMES_CLOSE = '</tool_call>';

export function toolCallFormatOf(chatTemplate: string | undefined): ToolCallFormat {
  return chatTemplate?.includes(HERMES_OPEN) === true ? 'hermes' : 'llama3_json';
}

export function toolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/** A call from a parsed object with a known tool name and object arguments; undefined otherwise. */
export function callOf(value: unknown, names: ReadonlySet<string>): ToolCall | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  const args = v['arguments'] ?? v['parameters'];
  if (typeof v['name'] !== 'string' || !names.has(v['name'])) return undefined;
  if (typeof args !== 'object' || args === null || Array.isArray(args)) return undefined;
  return { id: toolCallId(), type: 'function', function: { name: v['name'], arguments: JSON.stringify(args) } };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export function parseToolCalls(text: string, format: ToolCallFormat, names: ReadonlySet<string>): ParsedOutput {
  const plain: ParsedOutput = { content: text, toolCalls: [] };
  if (format === 'llama3_json') {
    const trimmed = text.trim();
    if (!trimmed.startsWith('{')) return plain;
    const whole = callOf(parseJson(trimmed), names);
    if (whole !== undefined) return { content: null, toolCalls: [whole] };
    const calls = trimmed.split(/}\s*;\s*{/).map((part, i, all) => {
      const json = (i > 0 ? '{' : '') + part + (i < all.length - 1 ? '}' : '');
      return callOf(parseJson(json), names);
    });
    return calls.every((c) => c !== undefined) ? { content: null, toolCalls: calls as ToolCall[] } : plain;
  }
  const calls: ToolCall[] = [];
  let content = '';
  let at = 0;
  for (;;) {
    const open = text.indexOf(HERMES_OPEN, at);
    if (open < 0) break;
    content += text.slice(at, open);
    const close = text.indexOf(HERMES_CLOSE, open);
    const body = text.slice(open + HERMES_OPEN.length, close < 0 ? text.length : close);
    const call = callOf(parseJson(body.trim()), names);
    if (call === undefined) return plain;
    calls.push(call);
    at = close < 0 ? text.length : close + HERMES_CLOSE.length;
  }
  if (calls.length === 0) return plain;
  content += text.slice(at);
  return { content: content.trim() === '' ? null : content.trim(), toolCalls: calls };
}
