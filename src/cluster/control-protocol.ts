/**
 * Control messages between the gateway and its workers (DESIGN §3 steps 1, 2, 5 and the token stream of §1 step 4):
 * JSON objects, one per sealed frame of an authenticated channel (the transfer layer's handshake and MAC, I10), each
 * at most LIMITS.controlMessageBytesMax bytes. Every message is checked field by field when it arrives; one that does
 * not parse closes the connection (fail closed), which fails that connection's requests.
 *
 *   gateway → worker   reserve(request)              decode: reserve pages, answer reserved(ticket) or end(failed)
 *                      prefill(request, ticket, to)  prefill: compute, push the KV to `to`, answer prefilled or end(failed)
 *                      cancel(request)               both: drop it, free and scrub its pages; no answer
 *                      end_choice(request, choice)   decode, n > 1: stop generating that answer (a stop sequence
 *                                                    ended it), free its own pages; sent only to a worker whose
 *                                                    hello says `endChoice` (an older one would refuse the type)
 *                      stats(id)                     both: answer stats(id, …)
 *                      page_map(id)                  both: answer page_map(id, report): the pool's page map for
 *                                                    the dashboard (states and tenants only, bounded: page-map.ts)
 *   worker → gateway   hello(…)                      first message of every connection: role, model, proven context
 *                      reserved · token · end · prefilled · stats · page_map · incident
 *                      stats(0, busyMs)              unasked: a forward pass that may hold the worker's thread up
 *                                                    to busyMs starts (the heartbeat waits that much longer)
 *                      stats(0)                      unasked: that pass has ended (the heartbeat's bound again)
 *                      draining                      the worker is shutting down: route nothing new to it; it
 *                                                    finishes what it holds, then the gateway closes the connection
 */
import type {
  ChoiceEnd,
  FinishReason,
  GeneratedToken,
  GenerationEnd,
  GenerationRequest,
  IsolationIncident,
  TokenLogprob,
} from '../engine/request.js';
import type { SamplingParams } from '../engine/sampler.js';
import {
  PAGE_CELL_STATES,
  PAGE_MAP_CELLS_MAX,
  PAGE_MAP_TRANSFERS_MAX,
  type PageMapReport,
  type TransferProgress,
} from '../kv/page-map.js';
import type { PageOwner } from '../kv/page-owner.js';
import type { OutputConstraint } from '../structured/grammar-cache.js';
import { checkJsonDepth } from '../structured/json-schema.js';
import type { TransferTicket } from '../transfer/ticket.js';
import { type ErrorCode, isErrorCode, KvfenceError } from '../util/errors.js';
import { LIMITS } from '../util/limits.js';

export type WorkerRole = 'prefill' | 'decode';

export interface WorkerHello {
  role: WorkerRole;
  /** the worker's name in logs and metrics (e.g. decode-0) */
  name: string;
  modelName: string;
  vocabSize: number;
  layerCount: number;
  kvDim: number;
  pageSize: number;
  /** the worker's own I1 proof */
  provenContext: number;
  /** decode only: where prefill workers push KV */
  transferAddress?: string;
  /** prefill only: pages a tenant's prefix cache may hold there (absent: no cache); the gateway routes by it */
  prefixCachePages?: number;
  /** decode only: the worker takes end_choice messages (absent: an older worker, which gets none) */
  endChoice?: true;
}

export interface PoolStats {
  pagesTotal: number;
  pagesFree: number;
  reservations: number;
  running: number;
  waiting: number;
  /** pages the worker's prefix cache holds (absent: no cache) */
  pagesCached?: number;
  /** pages read from the prefix cache instead of computed, since the worker started */
  pagesReused?: number;
  /** per tenant: requests in flight and pages held */
  tenants: [string, { requests: number; pages: number }][];
}

export type FailedEnd = { kind: 'failed'; code: ErrorCode; message: string; param?: string };
export type EndWire = Exclude<GenerationEnd, { kind: 'failed' }> | FailedEnd;

export type ControlMessage =
  | { type: 'hello'; hello: WorkerHello }
  | { type: 'reserve'; request: GenerationRequest }
  | { type: 'reserved'; request: string; ticket: TransferTicket }
  | { type: 'prefill'; request: GenerationRequest; ticket: TransferTicket; decodeAddress: string }
  | { type: 'prefilled'; request: string }
  | { type: 'cancel'; request: string }
  | { type: 'end_choice'; request: string; choice: number }
  /** `choice`: which of the request's n answers (absent: 0) */
  | { type: 'token'; request: string; token: GeneratedToken; choice?: number }
  | { type: 'end'; request: string; end: EndWire }
  /**
   * `busyMs`, worker → gateway only, unasked (id 0): the worker starts a forward pass that may hold its thread this
   * long, answering nothing meanwhile (cluster/long-pass.ts); id 0 without it: that pass has ended. An older gateway
   * reads either as a stats answer nobody asked for, and drops it
   */
  | { type: 'stats'; id: number; stats?: PoolStats; busyMs?: number }
  /** the dashboard's page map: asked with `id` alone, answered with the same `id` and the report */
  | { type: 'page_map'; id: number; report?: PageMapReport }
  /** a worker recorded an isolation incident (the gateway counts it; the record is in the worker's store) */
  | { type: 'incident'; incident: IsolationIncident }
  /** the worker got SIGTERM: it serves what it holds, and the gateway sends it no new request */
  | { type: 'draining' };

export function endToWire(end: GenerationEnd): EndWire {
  return end.kind === 'failed' ? errorToWire(end.error) : end;
}

export function endFromWire(end: EndWire): GenerationEnd {
  return end.kind === 'failed' ? { kind: 'failed', error: errorFromWire(end) } : end;
}

export function errorToWire(e: KvfenceError): FailedEnd {
  return { kind: 'failed', code: e.code, message: e.message, ...(e.param !== undefined ? { param: e.param } : {}) };
}

export function errorFromWire(e: FailedEnd): KvfenceError {
  return new KvfenceError(e.code, e.message, e.param);
}

/**
 * JSON has no NaN or infinities, and JSON.stringify writes them as null: a logprob the model made non-finite travels as
 * `{"number": "-Infinity"}` (or "Infinity", "NaN") instead, so the gateway gets what a colocated server would, and one
 * request's odd value is not a protocol violation that ends the connection and every request on it
 */
const NON_FINITE = new Set(['NaN', 'Infinity', '-Infinity']);

export function encodeControl(message: ControlMessage): Uint8Array {
  const json = JSON.stringify(message, (_key, value: unknown) => {
    if (value instanceof Uint8Array) return { base64: Buffer.from(value).toString('base64') };
    if (typeof value === 'number' && !Number.isFinite(value)) return { number: String(value) };
    return value;
  });
  const bytes = new Uint8Array(Buffer.from(json, 'utf8'));
  if (bytes.byteLength > LIMITS.controlMessageBytesMax) {
    throw new KvfenceError('invalid_argument', `a control message of ${bytes.byteLength} bytes is over its bound`);
  }
  return bytes;
}

/** Parses and checks one message; throws a KvfenceError (invalid_argument) naming the first bad field. */
export function decodeControl(bytes: Uint8Array): ControlMessage {
  if (bytes.byteLength > LIMITS.controlMessageBytesMax) bad('message', 'over its size bound');
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch {
    bad('message', 'not JSON');
  }
  const m = obj(value, 'message');
  const type = str(m['type'], 'type');
  switch (type) {
    case 'hello':
      return { type, hello: hello(m['hello']) };
    case 'reserve':
      return { type, request: request(m['request']) };
    case 'reserved':
      return { type, request: id(m['request'], 'request'), ticket: ticket(m['ticket']) };
    case 'prefill':
      return {
        type,
        request: request(m['request']),
        ticket: ticket(m['ticket']),
        decodeAddress: id(m['decodeAddress'], 'decodeAddress'),
      };
    case 'prefilled':
    case 'cancel':
      return { type, request: id(m['request'], 'request') };
    case 'end_choice':
      return {
        type,
        request: id(m['request'], 'request'),
        choice: int(m['choice'], 'choice', 0, LIMITS.choicesMax - 1),
      };
    case 'token':
      return {
        type,
        request: id(m['request'], 'request'),
        token: token(m['token']),
        ...(m['choice'] !== undefined ? { choice: int(m['choice'], 'choice', 0, LIMITS.choicesMax - 1) } : {}),
      };
    case 'end':
      return { type, request: id(m['request'], 'request'), end: end(m['end']) };
    case 'stats':
      return {
        type,
        id: int(m['id'], 'id', 0, Number.MAX_SAFE_INTEGER),
        ...(m['stats'] !== undefined ? { stats: stats(m['stats']) } : {}),
        ...(m['busyMs'] !== undefined ? { busyMs: int(m['busyMs'], 'busyMs', 1, LIMITS.workerBusyMsMax) } : {}),
      };
    case 'page_map':
      return {
        type,
        id: int(m['id'], 'id', 0, Number.MAX_SAFE_INTEGER),
        ...(m['report'] !== undefined ? { report: pageMapReport(m['report']) } : {}),
      };
    case 'incident':
      return { type, incident: incident(m['incident']) };
    case 'draining':
      return { type };
    default:
      return bad('type', `unknown message type ${type}`);
  }
}

function bad(field: string, why: string): never {
  throw new KvfenceError('invalid_argument', `control message: ${field} ${why}`);
}

function obj(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) bad(field, 'is not an object');
  return value as Record<string, unknown>;
}

function str(value: unknown, field: string): string {
  if (typeof value !== 'string') bad(field, 'is not a string');
  return value;
}

function bool(value: unknown, field: string): boolean {
  if (typeof value !== 'boolean') bad(field, 'is not a boolean');
  return value;
}

function id(value: unknown, field: string): string {
  const s = str(value, field);
  if (s.length < 1 || Buffer.byteLength(s) > LIMITS.transferIdBytesMax * 2) bad(field, 'has a bad length');
  return s;
}

function num(value: unknown, field: string): number {
  if (typeof value !== 'number' || Number.isNaN(value)) bad(field, 'is not a number');
  return value;
}

function int(value: unknown, field: string, min: number, max: number): number {
  const n = num(value, field);
  if (!Number.isInteger(n) || n < min || n > max) bad(field, `is not an integer from ${min} to ${max}`);
  return n;
}

function arr(value: unknown, field: string, max: number): unknown[] {
  if (!Array.isArray(value) || value.length > max) bad(field, `is not an array of at most ${max} items`);
  return value;
}

function bytes(value: unknown, field: string): Uint8Array {
  const b = str(obj(value, field)['base64'], field);
  return new Uint8Array(Buffer.from(b, 'base64'));
}

function hello(value: unknown): WorkerHello {
  const h = obj(value, 'hello');
  const role = str(h['role'], 'role');
  if (role !== 'prefill' && role !== 'decode') bad('role', `is ${role}`);
  return {
    role,
    name: id(h['name'], 'name'),
    modelName: str(h['modelName'], 'modelName'),
    vocabSize: int(h['vocabSize'], 'vocabSize', 1, LIMITS.vocabSizeMax),
    layerCount: int(h['layerCount'], 'layerCount', 1, LIMITS.layerCountMax),
    kvDim: int(h['kvDim'], 'kvDim', 1, 1 << 20),
    pageSize: int(h['pageSize'], 'pageSize', 1, LIMITS.pageSizeTokensMax),
    provenContext: int(h['provenContext'], 'provenContext', 2, LIMITS.contextTokensMax),
    ...(h['transferAddress'] !== undefined ? { transferAddress: id(h['transferAddress'], 'transferAddress') } : {}),
    ...(h['prefixCachePages'] !== undefined
      ? { prefixCachePages: int(h['prefixCachePages'], 'prefixCachePages', 1, LIMITS.kvPagesMax) }
      : {}),
    ...(h['endChoice'] === true ? { endChoice: true } : {}),
  };
}

function request(value: unknown): GenerationRequest {
  const r = obj(value, 'request');
  const constraint = r['constraint'];
  return {
    id: id(r['id'], 'request id'),
    tenant: id(r['tenant'], 'tenant'),
    promptTokens: arr(r['promptTokens'], 'promptTokens', LIMITS.contextTokensMax).map((t) =>
      int(t, 'prompt token', 0, LIMITS.vocabSizeMax),
    ),
    maxTokens: int(r['maxTokens'], 'maxTokens', 1, LIMITS.contextTokensMax),
    sampling: sampling(r['sampling']),
    topLogprobs: int(r['topLogprobs'], 'topLogprobs', 0, LIMITS.topLogprobsMax),
    ...(r['logprobs'] !== undefined ? { logprobs: bool(r['logprobs'], 'logprobs') } : {}),
    tenantKvPagesMax: int(r['tenantKvPagesMax'], 'tenantKvPagesMax', 1, LIMITS.kvPagesMax),
    ...(constraint !== undefined ? { constraint: outputConstraint(constraint) } : {}),
    ...(r['choices'] !== undefined ? { choices: int(r['choices'], 'choices', 1, LIMITS.choicesMax) } : {}),
  };
}

/**
 * Shapes and hard bounds only: the worker's SequenceSampler checks every value against the vocabulary and the API's
 * ranges when the request is accepted (a 400 then), exactly as in a colocated server.
 */
function sampling(value: unknown): SamplingParams {
  const s = obj(value, 'sampling');
  const tokenId = (v: unknown, field: string) => int(v, field, 0, LIMITS.vocabSizeMax);
  const optional = <T>(field: string, read: (v: unknown) => T): { [k: string]: T } =>
    s[field] === undefined ? {} : { [field]: read(s[field]) };
  return {
    temperature: num(s['temperature'], 'temperature'),
    topK: int(s['topK'], 'topK', 0, LIMITS.vocabSizeMax),
    topP: num(s['topP'], 'topP'),
    seed: int(s['seed'], 'seed', 0, 2 ** 32),
    ...optional('frequencyPenalty', (v) => num(v, 'frequencyPenalty')),
    ...optional('presencePenalty', (v) => num(v, 'presencePenalty')),
    ...optional('repetitionPenalty', (v) => num(v, 'repetitionPenalty')),
    ...optional('logitBias', (v) =>
      arr(v, 'logitBias', LIMITS.logitBiasEntriesMax).map((pair): [number, number] => {
        const [t, bias] = arr(pair, 'logitBias entry', 2);
        return [tokenId(t, 'logitBias token'), num(bias, 'logitBias value')];
      }),
    ),
    ...optional('minTokens', (v) => int(v, 'minTokens', 0, LIMITS.contextTokensMax)),
    ...optional('ignoreEos', (v) => bool(v, 'ignoreEos')),
    ...optional('stopTokenIds', (v) =>
      arr(v, 'stopTokenIds', LIMITS.stopTokenIdsMax).map((t) => tokenId(t, 'stop token id')),
    ),
  };
}

function outputConstraint(value: unknown): OutputConstraint {
  const c = obj(value, 'constraint');
  const kind = str(c['kind'], 'constraint kind');
  if (kind === 'json_object') return { kind };
  if (kind !== 'json_schema') bad('constraint kind', `is ${kind}`);
  const schema = obj(c['schema'], 'constraint schema');
  try {
    checkJsonDepth(schema, 'constraint schema');
  } catch {
    bad('constraint schema', 'is nested too deeply');
  }
  return { kind, schema };
}

function ticket(value: unknown): TransferTicket {
  const t = obj(value, 'ticket');
  const u32 = (v: unknown, field: string) => int(v, field, 0, 0xffff_ffff);
  return {
    request: id(t['request'], 'ticket request'),
    tenant: id(t['tenant'], 'ticket tenant'),
    nonce: bytes(t['nonce'], 'nonce'),
    epoch: u32(t['epoch'], 'epoch'),
    pageCount: u32(t['pageCount'], 'pageCount'),
    tokenCount: u32(t['tokenCount'], 'tokenCount'),
    pageSizeTokens: u32(t['pageSizeTokens'], 'pageSizeTokens'),
    pageBytes: u32(t['pageBytes'], 'pageBytes'),
  };
}

function logprob(value: unknown, field: string): TokenLogprob {
  const l = obj(value, field);
  return {
    id: int(l['id'], `${field} id`, 0, LIMITS.vocabSizeMax),
    logprob: logprobValue(l['logprob'], `${field} logprob`),
  };
}

/** A number, or a non-finite one as encodeControl writes it: only a logprob may be one */
function logprobValue(value: unknown, field: string): number {
  if (typeof value === 'object' && value !== null && !Array.isArray(value)) {
    const written = (value as Record<string, unknown>)['number'];
    if (typeof written === 'string' && NON_FINITE.has(written)) return Number(written);
  }
  return num(value, field);
}

function token(value: unknown): GeneratedToken {
  const t = obj(value, 'token');
  return {
    ...logprob(t, 'token'),
    top: arr(t['top'], 'top', LIMITS.topLogprobsMax).map((x) => logprob(x, 'top')),
  };
}

function end(value: unknown): EndWire {
  const e = obj(value, 'end');
  const kind = str(e['kind'], 'end kind');
  if (kind === 'finished') {
    const reason = finishReason(e['reason']);
    const choices = e['choices'];
    return {
      kind,
      reason,
      promptTokens: int(e['promptTokens'], 'promptTokens', 0, LIMITS.contextTokensMax),
      completionTokens: int(e['completionTokens'], 'completionTokens', 0, LIMITS.contextTokensMax),
      ...(choices !== undefined ? { choices: arr(choices, 'choices', LIMITS.choicesMax).map(choiceEnd) } : {}),
    };
  }
  if (kind !== 'failed') bad('end kind', `is ${kind}`);
  const code = str(e['code'], 'code');
  if (!isErrorCode(code)) bad('code', `is ${code}`);
  const message = str(e['message'], 'message').slice(0, 4096);
  return { kind, code, message, ...(e['param'] !== undefined ? { param: str(e['param'], 'param') } : {}) };
}

function finishReason(value: unknown): FinishReason {
  const reason = str(value, 'reason');
  if (reason !== 'stop' && reason !== 'length') bad('reason', `is ${reason}`);
  return reason;
}

function choiceEnd(value: unknown): ChoiceEnd {
  const c = obj(value, 'choice end');
  return {
    reason: finishReason(c['reason']),
    completionTokens: int(c['completionTokens'], 'completionTokens', 0, LIMITS.contextTokensMax),
  };
}

function stats(value: unknown): PoolStats {
  const s = obj(value, 'stats');
  const count = (field: string) => int(s[field], field, 0, Number.MAX_SAFE_INTEGER);
  return {
    pagesTotal: count('pagesTotal'),
    pagesFree: count('pagesFree'),
    reservations: count('reservations'),
    running: count('running'),
    waiting: count('waiting'),
    ...(s['pagesCached'] !== undefined ? { pagesCached: count('pagesCached') } : {}),
    ...(s['pagesReused'] !== undefined ? { pagesReused: count('pagesReused') } : {}),
    tenants: arr(s['tenants'], 'tenants', LIMITS.tenantCountMax).map((entry) => {
      const [tenant, t] = arr(entry, 'tenant entry', 2);
      const o = obj(t, 'tenant counts');
      return [
        id(tenant, 'tenant'),
        {
          requests: int(o['requests'], 'requests', 0, Number.MAX_SAFE_INTEGER),
          pages: int(o['pages'], 'pages', 0, Number.MAX_SAFE_INTEGER),
        },
      ];
    }),
  };
}

/** Every size against its bound, every tenant index within the table, every state a known one. */
function pageMapReport(value: unknown): PageMapReport {
  const r = obj(value, 'report');
  const m = obj(r['map'], 'map');
  const pageCount = int(m['pageCount'], 'pageCount', 1, LIMITS.kvPagesMax);
  const pagesPerCell = int(m['pagesPerCell'], 'pagesPerCell', 1, LIMITS.kvPagesMax);
  const cells = bytes(m['cells'], 'cells');
  const owners = bytes(m['owners'], 'owners');
  if (cells.length > PAGE_MAP_CELLS_MAX || cells.length !== Math.ceil(pageCount / pagesPerCell))
    bad('cells', 'do not cover the pages');
  if (owners.length !== cells.length * 2) bad('owners', 'are not two bytes per cell');
  if (cells.some((c) => c >= PAGE_CELL_STATES)) bad('cells', 'hold an unknown state');
  const tenants = arr(m['tenants'], 'tenants', cells.length).map((t) => id(t, 'tenant'));
  for (let i = 0; i < cells.length; i++)
    if (owners[i * 2]! + owners[i * 2 + 1]! * 256 > tenants.length) bad('owners', 'name a tenant not in the table');
  const transfers = arr(r['transfers'], 'transfers', PAGE_MAP_TRANSFERS_MAX).map((value): TransferProgress => {
    const t = obj(value, 'transfer');
    const pages = int(t['pages'], 'transfer pages', 0, LIMITS.kvPagesMax);
    return {
      request: id(t['request'], 'transfer request'),
      tenant: id(t['tenant'], 'transfer tenant'),
      pages,
      pagesDone: int(t['pagesDone'], 'transfer pagesDone', 0, pages),
    };
  });
  return { map: { pageCount, pagesPerCell, cells, owners, tenants }, transfers };
}

function owner(value: unknown, field: string): PageOwner {
  const o = obj(value, field);
  return { tenant: id(o['tenant'], `${field} tenant`), request: id(o['request'], `${field} request`) };
}

function incident(value: unknown): IsolationIncident {
  const i = obj(value, 'incident');
  const v = obj(i['violation'], 'violation');
  return {
    request: id(i['request'], 'request'),
    tenant: id(i['tenant'], 'tenant'),
    timeMs: num(i['timeMs'], 'timeMs'),
    violation: {
      reader: owner(v['reader'], 'reader'),
      page: int(v['page'], 'page', -1, LIMITS.kvPagesMax),
      pageOwner: v['pageOwner'] === undefined ? undefined : owner(v['pageOwner'], 'pageOwner'),
      expectedEpoch: num(v['expectedEpoch'], 'expectedEpoch'),
      pageEpoch: num(v['pageEpoch'], 'pageEpoch'),
      reason: str(v['reason'], 'reason').slice(0, 1024),
    },
  };
}
