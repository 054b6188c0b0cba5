/**
 * JSON.stringify in steps (steps.ts): the same text for the plain data an answer is made of (objects, arrays, strings,
 * numbers, booleans, null; properties that are undefined, functions or symbols left out, as JSON.stringify leaves
 * them), with a pause after every ITEMS_STEP items of a long array. A non-streamed answer with logprobs (2,000
 * tokens, 20 alternatives each: ~5 MB of JSON) was serialized in one go on the event loop.
 */
import type { Steps } from './steps.js';

const ITEMS_STEP = 256;

export function* jsonSteps(value: unknown): Steps<string> {
  const parts: string[] = [];
  yield* write(value, parts);
  return parts.join('');
}

function* write(value: unknown, parts: string[]): Steps<void> {
  if (Array.isArray(value)) {
    parts.push('[');
    const long = value.length > ITEMS_STEP;
    for (let i = 0; i < value.length; i++) {
      if (i > 0) parts.push(',');
      const item: unknown = value[i];
      // a long array's items are written whole (each a token's logprobs), a short one's looked into (the choices)
      if (long || !isContainer(item)) parts.push(JSON.stringify(item) ?? 'null');
      else yield* write(item, parts);
      if (i % ITEMS_STEP === ITEMS_STEP - 1) yield;
    }
    parts.push(']');
    return;
  }
  if (isContainer(value)) {
    parts.push('{');
    let first = true;
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined || typeof item === 'function' || typeof item === 'symbol') continue;
      parts.push(first ? '' : ',', JSON.stringify(key), ':');
      first = false;
      yield* write(item, parts);
    }
    parts.push('}');
    return;
  }
  parts.push(JSON.stringify(value));
}

function isContainer(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}
