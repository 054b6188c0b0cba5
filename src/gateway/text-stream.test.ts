import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Tokenizer } from '../model/tokenizer.js';
import { TextStream, tokenPiece } from './text-stream.js';

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
