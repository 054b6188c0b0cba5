/**
 * Tests only: KVFENCE_TEST_TRANSFER_FAULTS makes a prefill worker fault the KV transfers of chosen tenants' jobs, so
 * the end-to-end tests can exercise every failure path across real processes. Unset (the default) it does nothing: no
 * wrapper is installed. Its value is JSON, a plan per tenant:
 *
 *   { "victim-corrupt": { "frames": [{ "kind": "corrupt", "frame": 1, "byteIndex": 60 }] },
 *     "victim-cut": { "bytes": { "cutAfterBytes": 900 } } }
 *
 * `frames` are fault-injection.ts FrameFaults (a `replay` fault needs no `recorded`: it replays the previous transfer
 * this worker sent); `bytes` is a ByteFaultPlan applied below the MAC.
 */
import type { ByteFaultPlan, FrameFault } from '../transfer/fault-injection.js';
import { KvfenceError } from '../util/errors.js';
import type { TenantFaults, TestTransferFaults } from './prefill-worker.js';

export const TEST_FAULTS_ENV = 'KVFENCE_TEST_TRANSFER_FAULTS';

const FRAME_KINDS = new Set([
  'drop',
  'duplicate',
  'reorder',
  'stall',
  'close',
  'corrupt',
  'truncate',
  'delay',
  'wrong_nonce',
  'wrong_tenant',
  'wrong_request',
  'replay',
]);

export function parseTestFaults(env: NodeJS.ProcessEnv): TestTransferFaults | undefined {
  const text = env[TEST_FAULTS_ENV];
  if (text === undefined || text === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new KvfenceError('invalid_argument', `${TEST_FAULTS_ENV}: not JSON`);
  }
  if (typeof value !== 'object' || value === null)
    throw new KvfenceError('invalid_argument', `${TEST_FAULTS_ENV}: not an object`);
  return new Map(Object.entries(value).map(([tenant, plan]) => [tenant, parsePlan(plan)]));
}

function parsePlan(value: unknown): TenantFaults {
  const bad = (why: string): never => {
    throw new KvfenceError('invalid_argument', `${TEST_FAULTS_ENV}: ${why}`);
  };
  if (typeof value !== 'object' || value === null) return bad('a plan is not an object');
  const v = value as Record<string, unknown>;
  const frames = Array.isArray(v['frames']) ? v['frames'] : [];
  const parsed: FrameFault[] = frames.map((f: unknown) => {
    if (typeof f !== 'object' || f === null) return bad('a frame fault is not an object');
    const o = f as Record<string, unknown>;
    const kind = o['kind'];
    const frame = o['frame'];
    if (typeof kind !== 'string' || !FRAME_KINDS.has(kind) || typeof frame !== 'number') return bad('bad frame fault');
    const n = (key: string) => (typeof o[key] === 'number' ? (o[key] as number) : bad(`${kind} needs ${key}`));
    switch (kind) {
      case 'corrupt':
        return { kind, frame, byteIndex: n('byteIndex') };
      case 'truncate':
        return { kind, frame, keepBytes: n('keepBytes') };
      case 'delay':
        return { kind, frame, delayMs: n('delayMs') };
      case 'replay':
        return { kind, frame, recorded: [] };
      default:
        return { kind: kind as 'drop', frame };
    }
  });
  const b = v['bytes'];
  let bytes: ByteFaultPlan | undefined;
  if (typeof b === 'object' && b !== null) {
    const o = b as Record<string, unknown>;
    bytes = {
      ...(typeof o['corruptByteAt'] === 'number' ? { corruptByteAt: o['corruptByteAt'] } : {}),
      ...(typeof o['cutAfterBytes'] === 'number' ? { cutAfterBytes: o['cutAfterBytes'] } : {}),
    };
  }
  return { frames: parsed, bytes };
}
