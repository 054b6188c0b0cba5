/**
 * JSON.stringify in steps (steps.ts): the same text for the plain data an answer is made of (objects, arrays, strings,
 * numbers, booleans, null; properties that are undefined, functions or symbols left out, as JSON.stringify leaves
 * them), with a pause after about every STEP_CHARS characters written. A non-streamed answer with logprobs (2,000
 * tokens, 20 alternatives each: ~2 MB of JSON) was serialized in one go on the event loop, and so were 32 answers
 * echoing a prompt of a million characters each (34 MB: 0.35 s).
 */
import type { Steps } from './steps.js';

const STEP_CHARS = 1 << 16;
/** an array of more items than this has each written whole */
const WHOLE_ITEMS_FROM = 64;
/** a string longer than this is written a slice at a time */
const STRING_SLICE = 1 << 16;

export function* jsonSteps(value: unknown): Steps<string> {
  const out = { parts: [] as string[], since: 0 };
  yield* write(value, out);
  return out.parts.join('');
}

type Output = { parts: string[]; since: number };

/** Appends `text`; a pause once STEP_CHARS have been written since the last. */
function* put(text: string, out: Output): Steps<void> {
  out.parts.push(text);
  out.since += text.length;
  if (out.since >= STEP_CHARS) {
    out.since = 0;
    yield;
  }
}

/** What JSON.stringify leaves out of an object and writes as null in an array. */
function unwritten(value: unknown): boolean {
  return value === undefined || typeof value === 'function' || typeof value === 'symbol';
}

function* write(value: unknown, out: Output): Steps<void> {
  if (Array.isArray(value)) {
    yield* put('[', out);
    // a long array's items are written whole (each a token's logprobs: looking into each through steps cost 10x), a
    // short one's looked into (the choices, each holding a long array or a long text)
    const whole = value.length > WHOLE_ITEMS_FROM;
    for (let i = 0; i < value.length; i++) {
      if (i > 0) yield* put(',', out);
      const item: unknown = value[i];
      if (whole || unwritten(item)) yield* put(JSON.stringify(item) ?? 'null', out);
      else yield* write(item, out);
    }
    yield* put(']', out);
    return;
  }
  if (typeof value === 'object' && value !== null) {
    yield* put('{', out);
    let first = true;
    for (const [key, item] of Object.entries(value)) {
      if (unwritten(item)) continue;
      yield* put(`${first ? '' : ','}${JSON.stringify(key)}:`, out);
      first = false;
      yield* write(item, out);
    }
    yield* put('}', out);
    return;
  }
  if (typeof value === 'string' && value.length > STRING_SLICE) {
    // slices end between characters, never inside a surrogate pair: JSON.stringify escapes a lone surrogate
    yield* put('"', out);
    for (let at = 0; at < value.length; ) {
      let end = Math.min(value.length, at + STRING_SLICE);
      if (end < value.length && (value.charCodeAt(end - 1) & 0xfc00) === 0xd800) end--;
      yield* put(JSON.stringify(value.slice(at, end)).slice(1, -1), out);
      at = end;
    }
    yield* put('"', out);
    return;
  }
  yield* put(JSON.stringify(value), out);
}
