// The schema a forced tool call is held to: every tool's parameters combined, their definitions kept apart and their
// references rewritten where schemas are, never inside literal data; arguments always an object. Each case let an
// answer through that the tool's own parameters refuse (a fuzz against ajv found them).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LIMITS } from '../util/limits.js';
import { type ChatTool, parseToolRequest, toolCallsSchema, toolConstraint } from './tool-request.js';

const tool = (parameters: Record<string, unknown>): ChatTool => ({ name: 'f', definition: {}, parameters });

test('a "$ref" inside a const is data, and $defs.X and definitions.X stay two definitions', () => {
  const schema = toolCallsSchema(
    [
      tool({
        type: 'object',
        properties: { link: { const: { $ref: '#' } }, a: { $ref: '#/$defs/X' }, b: { $ref: '#/definitions/X' } },
        $defs: { X: { type: 'string' } },
        definitions: { X: { type: 'integer' } },
      }),
    ],
    true,
  ) as { $defs: Record<string, { properties?: Record<string, unknown> }> };
  const own = schema.$defs['t0']!.properties!;
  assert.deepEqual(own['link'], { const: { $ref: '#' } });
  assert.deepEqual(own['a'], { $ref: '#/$defs/t0.$defs.X' });
  assert.deepEqual(own['b'], { $ref: '#/$defs/t0.definitions.X' });
  assert.deepEqual(schema.$defs['t0.$defs.X'], { type: 'string' });
  assert.deepEqual(schema.$defs['t0.definitions.X'], { type: 'integer' });
});

test('a forced call’s arguments are an object: {} reads as any object, another root type is refused', () => {
  const request = (parameters: object, tool_choice: unknown) =>
    parseToolRequest({ tools: [{ type: 'function', function: { name: 'f', parameters } }], tool_choice })!;
  const named = toolConstraint(request({}, { type: 'function', function: { name: 'f' } }));
  assert.deepEqual(named?.constraint, { kind: 'json_schema', schema: { type: 'object' } });
  assert.deepEqual(named?.checks, [{ constraint: named?.constraint, param: 'tools[0].function.parameters' }]);
  const required = toolConstraint(request({}, 'required'))!;
  const schema = (required.constraint as { schema: { $defs: Record<string, unknown> } }).schema;
  assert.deepEqual(schema.$defs['t0'], { type: 'object' });
  // the combined grammar first (it covers each tool's), each tool's only to name the one at fault
  assert.deepEqual(
    required.checks.map((c) => c.param),
    ['tools', 'tools[0].function.parameters'],
  );
  for (const parameters of [{ type: ['object', 'null'] }, { anyOf: [{ type: 'string' }, { type: 'object' }] }])
    assert.throws(() => toolConstraint(request(parameters, 'required')), /must be an object schema/);
  assert.equal(toolConstraint(request({ type: 'string' }, 'auto')), undefined, 'auto constrains nothing');
});

test('all the tools together are bounded, in bytes of JSON and in objects and arrays, each within its own bound', () => {
  // 128 tools of 9,000 empty objects each (3.5 MB) were taken: copied from the body thread to the event loop and on to
  // the tokenizer thread, they held the loop 0.76 s (I11 hunt)
  const named = (i: number, extra: unknown) => ({
    type: 'function',
    function: { name: `f${i}`, parameters: { type: 'object' } },
    x: extra,
  });
  const refused = (tools: unknown[]) =>
    assert.throws(
      () => parseToolRequest({ tools }),
      (e: { code?: string; param?: string; message?: string }) =>
        e.code === 'invalid_request_error' && e.param === 'tools' && /objects and arrays/.test(e.message!),
    );
  const nodes = (n: number) => Array.from({ length: n }, () => ({}));
  refused(Array.from({ length: 128 }, (_, i) => named(i, nodes(9_000))));
  refused(Array.from({ length: 3 }, (_, i) => named(i, nodes(LIMITS.toolsNodesMax / 2))));
  refused(Array.from({ length: 3 }, (_, i) => named(i, 'y'.repeat(LIMITS.schemaBytesMax - 200))));
  const within = Array.from({ length: 128 }, (_, i) => named(i, nodes(LIMITS.toolsNodesMax / 128 - 8)));
  assert.equal(parseToolRequest({ tools: within })?.tools.length, 128);
});
