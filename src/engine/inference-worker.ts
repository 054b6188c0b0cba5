/**
 * What the gateway needs from whatever runs the model: submit a tokenized request, hear its tokens and its one ending,
 * cancel it. The colocated worker implements it in-process; a disaggregated deployment implements the same contract
 * over the network, so the gateway does not change.
 */
import type { PageMapReport } from '../kv/page-map.js';
import type { EngineStats } from './engine.js';
import type { GeneratedToken, GenerationEnd, GenerationRequest, IsolationIncident } from './request.js';

export interface GenerationSink {
  /** `choice`: which of the request's n answers (0 when n = 1) */
  onToken(token: GeneratedToken, choice: number): void;
  /** called exactly once per submitted request unless it was cancelled first (I6) */
  onEnd(end: GenerationEnd): void;
}

export interface WorkerStats extends EngineStats {
  /** successful page reservations since startup */
  reservations: number;
}

export interface InferenceWorker {
  /** the largest prompt + max tokens accepted (I1) */
  readonly provenContext: number;
  /** tokens per KV page: how the gateway counts a request's pages against its tenant's quota */
  readonly pageSize: number;
  /** queues a request; throws a KvfenceError (with nothing reserved) when it cannot be accepted */
  submit(request: GenerationRequest, sink: GenerationSink): void;
  /**
   * its sink hears nothing more; its pages are freed before this returns (in-process) or as soon as the engine
   * thread or remote worker reads the cancel
   */
  cancel(requestId: string): void;
  /**
   * the client has all it wants of answer `choice` of an n > 1 request (a stop sequence ended it): the worker stops
   * generating it and frees its own pages; the request's one ending still comes, with its last answer
   */
  endChoice(requestId: string, choice: number): void;
  stats(): WorkerStats;
  onIncident(listener: (incident: IsolationIncident) => void): void;
  /** fails what is in flight (503) and stops stepping */
  close(): Promise<void>;
  /** a remote backend (disaggregated): fetches fresh stats before /metrics or /health read them */
  refresh?(): Promise<void>;
  /** a remote backend: each worker's state, for /health and per-worker metrics */
  workers?(): WorkerStatus[];
  /** every worker's pool as the dashboard draws it; built only when asked (a dashboard is open) */
  pageMaps?(): Promise<WorkerPageMap[]>;
}

/** One worker's pool for the dashboard: states and tenants only (kv/page-map.ts); no report while down or late. */
export interface WorkerPageMap {
  name: string;
  role: 'colocated' | 'prefill' | 'decode';
  up: boolean;
  report: PageMapReport | undefined;
}

/** One prefill or decode worker as the gateway sees it. */
export interface WorkerStatus {
  name: string;
  role: 'prefill' | 'decode';
  address: string;
  up: boolean;
  /** undefined while down or before its first stats */
  pagesFree: number | undefined;
  pagesTotal: number | undefined;
}
