/**
 * Tool calling, as a chat request asks for it: `tools` (functions with JSON Schema parameters) reach the chat template
 * as its `tools` variable; `tool_choice` says what the answer may be:
 *   none      text only (tool calls in the text are not parsed);
 *   auto      the model decides; its tool calls are parsed from its own format (tool-calls.ts);
 *   required  one or more calls, constrained to [{"name": <a tool>, "arguments": <its parameters>}, …];
 *   named     exactly that function, the output constrained to its parameters: the output is the arguments.
 * The constrained forms always parse; their schemas are refused with a 400 naming the keyword like a response format.
 */
import { type ConstrainedOutput, checkSchemaSize, type OutputConstraint } from '../structured/grammar-cache.js';
import { JSON_DEPTH_MAX } from '../structured/json-schema.js';
import { clientText, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export interface ChatTool {
  name: string;
  /** the function's definition as the client sent it (for the chat template) */
  definition: Record<string, unknown>;
  /** its parameters schema (an empty object schema when absent) */
  parameters: unknown;
}

export type ToolChoice = { kind: 'none' } | { kind: 'auto' } | { kind: 'required' } | { kind: 'named'; name: string };

export interface ToolRequest {
  tools: ChatTool[];
  choice: ToolChoice;
  /** more than one call allowed (required) */
  parallel: boolean;
}

const NO_PARAMETERS = { type: 'object', properties: {}, additionalProperties: false };

function bad(message: string, param: string): KvfenceError {
  return new KvfenceError('invalid_request_error', message, param);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `tools`, `tool_choice` and `parallel_tool_calls` of a chat body; undefined when no tools are given. */
export function parseToolRequest(body: Record<string, unknown>): ToolRequest | undefined {
  const raw = body['tools'] ?? undefined;
  const choiceRaw = body['tool_choice'] ?? undefined;
  const parallel = body['parallel_tool_calls'] ?? true;
  if (typeof parallel !== 'boolean') throw bad('parallel_tool_calls must be a boolean', 'parallel_tool_calls');
  if (raw === undefined) {
    if (choiceRaw !== undefined && choiceRaw !== 'none') throw bad('tool_choice needs tools', 'tool_choice');
    return undefined;
  }
  if (!Array.isArray(raw) || raw.length === 0 || raw.length > LIMITS.toolsMax)
    throw bad(`tools must be an array of 1 to ${LIMITS.toolsMax} tools`, 'tools');
  const size = { bytes: 0, nodes: 0 };
  const tools = raw.map((t: unknown, i) => {
    const tool = parseTool(t, `tools[${i}]`, size);
    if (size.bytes > LIMITS.toolsBytesMax || size.nodes > LIMITS.toolsNodesMax)
      throw bad(
        `tools hold more than ${LIMITS.toolsBytesMax} bytes of JSON or ${LIMITS.toolsNodesMax} objects and arrays`,
        'tools',
      );
    return tool;
  });
  const names = new Set(tools.map((t) => t.name));
  if (names.size !== tools.length) throw bad('tool names must be distinct', 'tools');
  const choice = parseToolChoice(choiceRaw, names);
  return { tools, choice, parallel };
}

/** One tool definition; its size is added to `size`, all the request's tools' so far. */
function parseTool(value: unknown, param: string, size: { bytes: number; nodes: number }): ChatTool {
  if (!isObject(value) || value['type'] !== 'function' || !isObject(value['function']))
    throw bad(`${param} must be {"type": "function", "function": {...}}`, param);
  const fn = value['function'];
  const name = fn['name'];
  if (typeof name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(name))
    throw bad(`${param}.function.name must be 1 to 64 letters, digits, _ or -`, `${param}.function.name`);
  const parameters = fn['parameters'] ?? NO_PARAMETERS;
  if (!isObject(parameters)) throw bad(`${param}.function.parameters must be a JSON Schema object`, param);
  // the definition goes to the chat template as it is: bounded like a schema, whatever the tool choice (a junk field
  // of 490k objects held the event loop 0.1-0.3 s coming back from the body thread)
  const { bytes, nodes } = checkSchemaSize(value, param);
  size.bytes += bytes;
  size.nodes += nodes;
  return { name, definition: value, parameters };
}

function parseToolChoice(value: unknown, names: ReadonlySet<string>): ToolChoice {
  if (value === undefined || value === 'auto') return { kind: 'auto' };
  if (value === 'none') return { kind: 'none' };
  if (value === 'required') return { kind: 'required' };
  if (isObject(value) && value['type'] === 'function' && isObject(value['function'])) {
    const name = value['function']['name'];
    if (typeof name !== 'string') throw bad("tool_choice's function name must be a string", 'tool_choice');
    if (names.has(name)) return { kind: 'named', name };
    throw bad(`tool_choice names ${JSON.stringify(clientText(name))}, which is not in tools`, 'tool_choice');
  }
  throw bad('tool_choice must be none, auto, required or {"type": "function", "function": {"name": …}}', 'tool_choice');
}

/**
 * The output constraint a tool choice imposes (none for none/auto), with the grammar builds that check it (run off the
 * event loop: checkGrammars; a forced choice over many large tools cost the event loop seconds a request).
 */
export function toolConstraint(request: ToolRequest): ConstrainedOutput | undefined {
  const { choice, tools } = request;
  if (choice.kind === 'named') {
    const index = tools.findIndex((t) => t.name === choice.name);
    const param = `tools[${index}].function.parameters`;
    const constraint: OutputConstraint = { kind: 'json_schema', schema: argumentsSchema(tools[index]!, index) };
    checkSchemaSize(constraint.schema, param);
    return { constraint, checks: [{ constraint, param }] };
  }
  if (choice.kind !== 'required') return undefined;
  const constrained = tools.map((t, i) => ({ ...t, parameters: argumentsSchema(t, i) }));
  const constraint: OutputConstraint = { kind: 'json_schema', schema: toolCallsSchema(constrained, request.parallel) };
  // the combined schema's size now (cheap), which bounds every tool's own too; its grammar covers theirs, which are
  // read (not built) only to name the tool at fault
  checkSchemaSize(constraint.schema, 'tools');
  const perTool = constrained.map((t, i) => ({
    constraint: { kind: 'json_schema' as const, schema: t.parameters },
    param: `tools[${i}].function.parameters`,
  }));
  return { constraint, checks: [{ constraint, param: 'tools' }, ...perTool] };
}

/**
 * What a forced call's arguments must be: an object (a call's arguments are one, and tool-calls.ts refuses others, so
 * a schema that allowed `null` would end the answer as text, not a call). `{}` reads as any object; a root that is not
 * `type: "object"` is refused.
 */
function argumentsSchema(tool: ChatTool, index: number): Record<string, unknown> {
  const parameters = tool.parameters as Record<string, unknown>;
  if (Object.keys(parameters).length === 0) return { type: 'object' };
  if (parameters['type'] !== 'object') {
    const param = `tools[${index}].function.parameters`;
    throw bad(`${param} must be an object schema ("type": "object") for a forced tool call`, param);
  }
  return parameters;
}

/**
 * [{"name": …, "arguments": …}, …] over every tool. Each tool's own `$defs` move to the root under a prefix
 * (t<index>.<name>) and its `$ref`s are rewritten to them, so tools with recursive parameters combine.
 */
export function toolCallsSchema(tools: readonly ChatTool[], parallel: boolean): Record<string, unknown> {
  const defs: Record<string, unknown> = {};
  const options = tools.map((tool, i) => {
    const prefix = `t${i}`;
    const params = tool.parameters as Record<string, unknown>;
    const { $defs, definitions, ...own } = params;
    for (const [groupName, group] of [
      ['$defs', $defs],
      ['definitions', definitions],
    ] as const) {
      if (!isObject(group)) continue;
      // each group under its own name: a $defs.X and a definitions.X stay two
      for (const [name, def] of Object.entries(group))
        defs[`${prefix}.${groupName}.${name}`] = rewriteRefs(def, prefix);
    }
    defs[prefix] = rewriteRefs(own, prefix);
    return {
      type: 'object',
      properties: { name: { const: tool.name }, arguments: { $ref: `#/$defs/${prefix}` } },
      required: ['name', 'arguments'],
      additionalProperties: false,
    };
  });
  return {
    type: 'array',
    items: options.length === 1 ? options[0] : { anyOf: options },
    minItems: 1,
    ...(parallel ? {} : { maxItems: 1 }),
    $defs: defs,
  };
}

const LITERAL_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);

/** Depth-bounded (the schemas were checked, so this never meets a deeper one): no stack overflow on any input. */
function rewriteRefs(value: unknown, prefix: string, depth = 0): unknown {
  if (depth > JSON_DEPTH_MAX) throw bad(`tools: parameters nested deeper than ${JSON_DEPTH_MAX}`, 'tools');
  if (Array.isArray(value)) return value.map((v) => rewriteRefs(v, prefix, depth + 1));
  if (!isObject(value)) return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key === '$ref' && typeof v === 'string') {
      const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(v);
      out[key] = v === '#' ? `#/$defs/${prefix}` : m !== null ? `#/$defs/${prefix}.${m[1]}.${m[2]}` : v;
    } else if (LITERAL_KEYWORDS.has(key)) {
      out[key] = v; // data, not schemas: a "$ref" inside a const is text to match
    } else {
      out[key] = rewriteRefs(v, prefix, depth + 1);
    }
  }
  return out;
}
