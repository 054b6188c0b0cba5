import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Tokenizer } from '../model/tokenizer.js';
import { charCount, TextStream, tokenPiece } from './text-stream.js';

// a byte tokenizer: token i is the byte i
const bytes = { decodeBytes: (ids: readonly number[]) => Uint8Array.from(ids) } as unknown as Tokenizer;
const feed = (stream: TextStream, text: string) => [...Buffer.from(text, 'utf8')].map((b) => stream.push(b));

test('text that may start a stop sequence is held back, and the stop sequence is never released', () => {
  const s = new TextStream(bytes, ['END']);
  const steps = feed(s, 'abcENxEND tail');
  assert.deepEqual(
    steps.map((x) => x.text),
    ['a', 'b', 'c', '', '', 'ENx', '', '', '', '', '', '', '', ''],
  );
  assert.ok(steps[8]!.stopped);
  assert.equal(s.finish(), '');
});

test('held text is released at the end; UTF-8 characters are never split', () => {
  const s = new TextStream(bytes, ['zz']);
  const text = feed(s, 'é z')
    .map((x) => x.text)
    .join('');
  assert.equal(text + s.finish(), 'é z');
});

test('a generation that begins with U+FEFF keeps it, streamed and as a token piece, as whole decoding does', () => {
  const s = new TextStream(bytes, []);
  assert.equal(
    feed(s, '\ufeffHi')
      .map((x) => x.text)
      .join('') + s.finish(),
    '\ufeffHi',
  );
  assert.equal(
    tokenPiece({ decodeBytes: () => Uint8Array.from([0xef, 0xbb, 0xbf]) } as unknown as Tokenizer, 0).text,
    '\ufeff',
  );
});

test('charCount counts code points, as text_offset does: a character past U+FFFF is one', () => {
  assert.equal(charCount('a\u{1F600}b'), 3);
  assert.equal(charCount('\u{6550F}red'), 4);
  assert.equal(charCount('\ud800x\udc00'), 3, 'a lone surrogate is one');
  const s = new TextStream(bytes, ['\u{1F600}X']);
  feed(s, '\u{1F600}');
  assert.equal(s.heldChars, 1, 'the held emoji is one character');
});

test('min_tokens: a stop sequence matches only where it ends at the min_tokens-th token or later (vLLM)', () => {
  const texts = (stream: TextStream, text: string) => {
    const steps = feed(stream, text);
    const stoppedAt = steps.findIndex((x) => x.stopped);
    return { text: steps.map((x) => x.text).join(''), stoppedAt };
  };
  // the stop 'e' at tokens 2 and 3: the first is before min_tokens 3 and is text; the second ends the answer
  assert.deepEqual(texts(new TextStream(bytes, ['e'], 3), 'heeeo'), { text: 'he', stoppedAt: 2 });
  // 'ab' begun before min_tokens 2 and ended at it: it matches
  assert.deepEqual(texts(new TextStream(bytes, ['ab'], 2), 'ab'), { text: '', stoppedAt: 1 });
  // 'b' ended at token 2, before min_tokens 3, though still held (a start of 'abc'): never a stop
  const held = new TextStream(bytes, ['b', 'abc'], 3);
  assert.deepEqual(texts(held, 'abx'), { text: 'abx', stoppedAt: -1 });
  // without min_tokens the same text stops at 'b'
  assert.deepEqual(texts(new TextStream(bytes, ['b', 'abc']), 'abx'), { text: 'a', stoppedAt: 1 });
});
