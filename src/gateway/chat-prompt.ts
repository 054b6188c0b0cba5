/**
 * Chat messages through the model's chat template, with the spans of the text that came from message content: the
 * tokenizer reads those as plain text (EncodeOptions.literalRanges), so a user who types `<|im_start|>system` in a
 * message gets those characters, never a forged role (docs/api.md). The template's own special tokens are parsed.
 *
 * When no message holds control-token text the rendered text is used as it is (token for token what llama.cpp's
 * server gives). Otherwise the template renders each content wrapped in two marker characters that no message holds;
 * the markers give the spans and are removed. A template that drops, repeats or cuts into the markers is refused:
 * it cannot be served with such content safely. Control-token text anywhere else a client writes (tool definitions,
 * tool calls in the history, their ids) is refused outright: templates render those in ways no span can follow.
 */
import { type ChatMessage, renderChatTemplate } from '../model/chat-template.js';
import type { Tokenizer } from '../model/tokenizer.js';
import { KvfenceError } from '../util/errors.js';

export interface ChatPrompt {
  text: string;
  literalRanges: [number, number][];
}

export function renderChatPrompt(
  template: Parameters<typeof renderChatTemplate>[0],
  messages: readonly ChatMessage[],
  tokenizer: Tokenizer,
  tools: readonly unknown[] | undefined,
): ChatPrompt {
  const render = (m: readonly ChatMessage[]) =>
    renderChatTemplate(template, m, {
      addGenerationPrompt: true,
      ...templateTokens(tokenizer),
      ...(tools !== undefined ? { tools } : {}),
    });
  const structured = JSON.stringify([tools ?? [], messages.map((m) => [m.tool_calls ?? [], m.tool_call_id ?? ''])]);
  if (tokenizer.hasControlText(structured))
    throw refused('the tools or the tool calls in the messages hold special-token text');
  if (!messages.some((m) => tokenizer.hasControlText(m.content))) return { text: render(messages), literalRanges: [] };
  const [open, close] = markersAbsentFrom(messages);
  const marked = render(messages.map((m) => ({ ...m, content: `${open}${m.content}${close}` })));
  return unmark(marked, open, close);
}

/** The template's bos_token and eos_token: the vocabulary's texts of those tokens ('' where there is none). */
export function templateTokens(tokenizer: Tokenizer): { bosToken: string; eosToken: string } {
  return {
    bosToken: tokenizer.bosId !== undefined ? tokenizer.tokenText(tokenizer.bosId) : '',
    eosToken: tokenizer.eosId !== undefined ? tokenizer.tokenText(tokenizer.eosId) : '',
  };
}

/** Two private-use code points (plane 16) that no message holds. */
function markersAbsentFrom(messages: readonly ChatMessage[]): [string, string] {
  for (let cp = 0x10fff0; cp + 1 <= 0x10fffd; cp += 2) {
    const pair: [string, string] = [String.fromCodePoint(cp), String.fromCodePoint(cp + 1)];
    if (!messages.some((m) => m.content.includes(pair[0]) || m.content.includes(pair[1]))) return pair;
  }
  throw refused('the messages hold special-token text and every marker character this server could use');
}

function unmark(marked: string, open: string, close: string): ChatPrompt {
  let text = '';
  const literalRanges: [number, number][] = [];
  let from = 0;
  for (let start = marked.indexOf(open); start >= 0; start = marked.indexOf(open, from)) {
    const end = marked.indexOf(close, start + open.length);
    const between = marked.slice(from, start);
    const inner = marked.slice(start + open.length, end);
    if (end < 0 || between.includes(close) || inner.includes(open))
      throw refused('a message holds special-token text and the chat template cuts message content');
    text += between;
    if (inner !== '') literalRanges.push([text.length, text.length + inner.length]);
    text += inner;
    from = end + close.length;
  }
  if (marked.includes(close, from))
    throw refused('a message holds special-token text and the chat template cuts message content');
  return { text: text + marked.slice(from), literalRanges };
}

function refused(why: string): KvfenceError {
  return new KvfenceError('invalid_request_error', `${why}: remove the special-token text`, 'messages');
}
