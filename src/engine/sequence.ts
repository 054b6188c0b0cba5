/**
 * One request inside the engine: waiting for pages, then prefilling its prompt chunk by chunk, then decoding one token
 * per step. Its pages are reserved in full on admission (prompt + maxTokens), so a running sequence never needs a page
 * it does not already hold.
 *
 *   tokens:  0 ........ prompt.length ..................... prompt.length + maxTokens ... pages × pageSize
 *            [ prompt  ][ generated (fed back one a step)  ][ never used: rounding to whole pages ]
 *            ^ table.writtenTokens advances through both; it never passes the last generated token
 */
import type { PageReservation } from '../kv/page-pool.js';
import type { PageTable } from '../kv/page-table.js';
import type { CachedPage } from '../kv/prefix-cache.js';
import type { ChoiceGroup } from './choice-group.js';
import type { GenerationRequest } from './request.js';
import type { SequenceSampler } from './sequence-sampler.js';

export type SequenceState = 'waiting' | 'prefilling' | 'decoding';

export class Sequence {
  state: SequenceState = 'waiting';
  reservation: PageReservation | undefined;
  /** a decode worker's sequence: the pages for generated tokens, reserved apart from the transferred prompt pages */
  extraReservation: PageReservation | undefined;
  table: PageTable | undefined;
  /** with a prefix cache: the chain keys of the prompt's whole pages, and the cached pages it reads (pinned) */
  prefixKeys: readonly string[] = [];
  prefixHits: readonly CachedPage[] = [];
  /** the last sampled token, fed to the model in the next step */
  nextInput: number | undefined;
  generatedCount = 0;
  /** which of the request's n answers this is (0: the leader, which prefills) */
  choice = 0;
  /** with n > 1: the pages and endings the request's choices share (choice-group.ts) */
  group: ChoiceGroup | undefined;
  /** times it paused for another tenant's request (Engine.pauseFor spreads a tenant's pauses over its sequences) */
  pauses = 0;

  constructor(
    readonly request: GenerationRequest,
    /** pages for prompt + maxTokens */
    readonly pagesNeeded: number,
    /** when it gives up waiting for admission (503) */
    readonly admitDeadlineMs: number,
    /** picks its tokens (penalties, stop tokens, grammar): the request's own, never shared */
    readonly sampler: SequenceSampler,
  ) {}

  get id(): string {
    return this.request.id;
  }

  get tenant(): string {
    return this.request.tenant;
  }

  get tenantPagesMax(): number {
    return this.request.tenantKvPagesMax;
  }

  /** running-batch slots its admission takes: one per choice */
  get slots(): number {
    return this.request.choices ?? 1;
  }

  /** prompt tokens already in the KV */
  get promptDone(): number {
    return Math.min(this.table?.writtenTokens ?? 0, this.request.promptTokens.length);
  }
}
