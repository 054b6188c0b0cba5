/**
 * Whether `value` (parsed JSON) holds at most about `chars` characters: its strings counted by their length, each other
 * node as one, the walk given up as soon as it is over. Work of at most `chars` nodes, not of the text, where
 * JSON.stringify wrote out all of it: 15 messages of 10 MiB in all took the event loop 20–50 ms a request that way,
 * before the tokenizer thread and its per-tenant bound (review finding, reproduced).
 */
export function textWithin(value: unknown, chars: number): boolean {
  let left = chars;
  const stack = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') left -= v.length;
    else if (Array.isArray(v)) {
      left -= 1 + v.length; // each item at least one more
      if (left >= 0) stack.push(...v);
    } else if (typeof v === 'object' && v !== null) {
      const entries = Object.entries(v);
      left -= 1 + entries.length;
      if (left >= 0)
        for (const [key, item] of entries) {
          left -= key.length;
          stack.push(item);
        }
    } else left -= 1;
    if (left < 0) return false;
  }
  return true;
}
