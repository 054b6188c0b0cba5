// The keys a chunk's attention reads, in closed form, against counting them row by row as the forward pass's rows do.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { keyCounter } from './attended-keys.js';

test('keys of n tokens from a position: every layer, each row p + 1 keys, at most the window on sliding layers', () => {
  const shapes = [
    { layerCount: 3, slidingLayers: [false, false, false], slidingWindow: 0 },
    { layerCount: 4, slidingLayers: [true, false, true, true], slidingWindow: 5 },
    { layerCount: 2, slidingLayers: [true, true], slidingWindow: 1 },
  ];
  for (const shape of shapes) {
    const keysOf = keyCounter(shape);
    for (let start = 0; start < 12; start++)
      for (let n = 0; n < 10; n++) {
        let rows = 0;
        for (const sliding of shape.slidingLayers)
          for (let p = start; p < start + n; p++)
            rows += p + 1 - (sliding ? Math.max(0, p + 1 - shape.slidingWindow) : 0);
        assert.equal(keysOf(start, n), rows, `${JSON.stringify(shape)} from ${start}, ${n} tokens`);
      }
  }
});
