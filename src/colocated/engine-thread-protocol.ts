/**
 * Messages between the gateway's thread and the engine thread (engine-thread.ts ↔ engine-thread-main.ts). Both ends
 * are this process's own code, so messages travel by structured clone without a parser; errors travel as codes
 * (control-protocol.ts's EndWire) and become KvfenceErrors again on arrival.
 */
import type { EndWire, FailedEnd } from '../cluster/control-protocol.js';
import type { LogLevel } from '../cluster/worker-config.js';
import type { BackendPreference } from '../compute/select-backend.js';
import type { WorkerPageMap, WorkerStats } from '../engine/inference-worker.js';
import type { GeneratedToken, GenerationRequest, IsolationIncident } from '../engine/request.js';
import type { WorkerSettings } from '../engine/worker-kv.js';

/** What the thread is built from (its workerData). */
export interface EngineThreadData {
  modelPath: string;
  backend: BackendPreference;
  /** keep Q5_0 weights as Q8_0 blocks of the same values (load-model.ts; default true, `--keep-q5-0` false) */
  widenQ5_0?: boolean | undefined;
  /**
   * round activations to 8-bit blocks for quantized products (native-backend.ts; default
   * false, `--q8-activations` true)
   */
  q8Activations?: boolean | undefined;
  settings: WorkerSettings;
  incidentsDb: string;
  logLevel: LogLevel;
}

export type ToEngineThread =
  | { type: 'submit'; request: GenerationRequest }
  | { type: 'cancel'; id: string }
  | { type: 'end_choice'; id: string; choice: number }
  | { type: 'stats'; ask: number }
  | { type: 'page_maps'; ask: number }
  | { type: 'pause' }
  | { type: 'resume' }
  | { type: 'close' };

/** One request's token or ending; a step's events travel together, in the order the engine made them. */
export type EngineThreadEvent =
  | { kind: 'token'; id: string; token: GeneratedToken; choice: number }
  | { kind: 'end'; id: string; end: EndWire }
  /** recorded in the incident store by the thread before the request's failure is sent (DESIGN I3) */
  | { kind: 'incident'; incident: IsolationIncident };

/** The thread's first message. */
export type EngineThreadStart =
  /** the pool is allocated and its capacity proven; `lines` are for the operator (backend, pool, prefix cache) */
  | { type: 'ready'; provenContext: number; pageSize: number; lines: string[] }
  | { type: 'start_failed'; error: FailedEnd };

/** Every message after a ready one. */
export type FromEngineThread =
  | { type: 'events'; events: EngineThreadEvent[] }
  | { type: 'stats'; ask: number; stats: WorkerStats }
  | { type: 'page_maps'; ask: number; maps: WorkerPageMap[] }
  /** every request in flight has ended (503) and the thread has stopped stepping */
  | { type: 'closed' };
