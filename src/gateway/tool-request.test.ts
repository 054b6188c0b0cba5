// The schema a forced tool call is held to: every tool's parameters combined, their definitions kept apart and their
// references rewritten where schemas are, never inside literal data; arguments always an object. Each case let an
// answer through that the tool's own parameters refuse (a fuzz against ajv found them).
import assert from 'node:assert/strict';
import { test } from 'node:test';
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
