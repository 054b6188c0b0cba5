/**
 * `n` > 1: the n choices of one request share its prompt's KV read-only, inside the request (all of it the request's
 * own tenant and owner). One sequence, the leader, prefills the prompt; when its last prompt token's logits are out,
 * the other choices fork from it, each drawing its first token from those same logits with its own sampler.
 *
 *   pages:   [ head: the prompt's whole pages ][ tail₀ ]      leader (choice 0): head written by its prefill
 *            [ the same head pages, read-only ][ tail₁ ]      choice 1: tail₁ starts with a copy of the prompt's
 *            ...                                                        last, partial page (if it has one)
 *
 * Every page is reserved at admission (head + n tails), all or none, so a forked choice never waits for a page. The
 * head (and any prefix-cache pages it reads) is released when the last choice ends; each tail when its choice ends.
 * A choice's table lists the head as its leading `sharedPages`: the pool refuses any write there (I3), and a read must
 * find each page still the request's own at the epoch it was granted (I4).
 */
import type { PageOwner } from '../kv/page-owner.js';
import type { PagePool, PageReservation } from '../kv/page-pool.js';
import { newPageTable, type PageTable } from '../kv/page-table.js';
import type { CachedPage, PrefixCache } from '../kv/prefix-cache.js';
import { assert } from '../util/assert.js';
import type { ChoiceEnd, GenerationRequest } from './request.js';
import type { SequenceSampler } from './sequence-sampler.js';

/** A choice's own pages: prompt + maxTokens less the prompt's whole pages (the head the choices share). */
export function tailPages(pageSize: number, promptLength: number, maxTokens: number): number {
  return Math.ceil((promptLength + maxTokens) / pageSize) - Math.floor(promptLength / pageSize);
}

/** Pages a request needs: prompt + maxTokens for one choice; with n choices, the head once and a tail per choice. */
export function requestPages(pageSize: number, promptLength: number, maxTokens: number, choices: number): number {
  return Math.floor(promptLength / pageSize) + choices * tailPages(pageSize, promptLength, maxTokens);
}

/** Choice i draws with seed + i, so n seeded choices differ from each other yet repeat run to run. */
export function choiceRequest(request: GenerationRequest, choice: number): GenerationRequest {
  if (choice === 0) return request;
  return { ...request, sampling: { ...request.sampling, seed: (request.sampling.seed + choice) >>> 0 } };
}

export class ChoiceGroup {
  /** the request's own pages of the prompt's head (cached pages it reads are in `prefixHits`) */
  head: PageReservation | undefined;
  /** the other choices' tails, reserved at admission, acquired when they fork */
  siblingTails: PageReservation[] = [];
  prefixHits: readonly CachedPage[] = [];
  /** choices not yet ended (the leader alone until the fork) */
  live = 1;
  private forkedYet = false;
  readonly ends: (ChoiceEnd | undefined)[];
  /** choices 1..n-1's samplers, built when the request is accepted (a bad option is a 400 then) */
  readonly samplers: SequenceSampler[] = [];

  constructor(
    readonly choices: number,
    /** pages of the prompt's whole pages (the head, shared) and of one choice's own rest (its tail) */
    readonly headPages: number,
    readonly tailPages: number,
  ) {
    assert(Number.isInteger(choices) && choices >= 2, 'a choice group has at least two choices');
    this.ends = new Array<ChoiceEnd | undefined>(choices).fill(undefined);
  }

  static of(request: GenerationRequest, pageSize: number): ChoiceGroup {
    const prompt = request.promptTokens.length;
    const tail = tailPages(pageSize, prompt, request.maxTokens);
    return new ChoiceGroup(request.choices ?? 1, Math.floor(prompt / pageSize), tail);
  }

  /**
   * Admission's grant (checked against free and evictable pages: cannot fail): cached head pages first, then the
   * request's own head pages and the leader's tail into the leader's table; the siblings' tails reserved.
   */
  grant(
    pool: PagePool,
    cache: PrefixCache | undefined,
    owner: PageOwner,
    prompt: readonly number[],
  ): { table: PageTable; tail: PageReservation; prefixKeys: readonly string[] } {
    const table = newPageTable(owner);
    let prefixKeys: string[] = [];
    if (cache !== undefined) {
      prefixKeys = cache.keysOf(owner.tenant, prompt);
      this.prefixHits = cache.attach(table, prefixKeys, Math.floor((prompt.length - 1) / pool.layout.pageSize));
      const own = this.headPages - table.sharedPages + this.choices * this.tailPages;
      assert(cache.makeRoom(own), 'admission counted the evictable cached pages');
    }
    const reserve = (count: number) => {
      const r = pool.reserve(owner, count);
      assert(r !== undefined, 'admission checked the free pages');
      return r;
    };
    this.head = reserve(this.headPages - table.sharedPages);
    const tail = reserve(this.tailPages);
    for (let i = 1; i < this.choices; i++) this.siblingTails.push(reserve(this.tailPages));
    pool.acquire(this.head, table);
    pool.acquire(tail, table);
    return { table, tail, prefixKeys };
  }

  /**
   * Choice `choice`'s table, forked from the leader's once its prompt is written: the head read-only, then its own
   * tail, whose first page takes a copy of the prompt's last, partial page (checked readable in the leader's table).
   */
  fork(pool: PagePool, leader: PageTable, promptLength: number, choice: number): PageTable {
    assert(leader.writtenTokens === promptLength, 'choices fork once the prompt is written');
    const table = newPageTable(leader.owner);
    table.pages.push(...leader.pages.slice(0, this.headPages));
    table.epochs.push(...leader.epochs.slice(0, this.headPages));
    table.sharedPages = this.headPages;
    table.writtenTokens = this.headPages * pool.layout.pageSize;
    pool.acquire(this.siblingTails[choice - 1]!, table);
    const partial = promptLength - table.writtenTokens;
    if (partial > 0) pool.copyPage(leader, this.headPages, table, partial);
    this.live++;
    this.forkedYet = true;
    return table;
  }

  /** The choices have forked from the leader (its prompt is written): each runs on its own from here. */
  get forked(): boolean {
    return this.forkedYet;
  }

  /** A choice ended: true when it was the last, and the head and unforked tails went back to the pool. */
  leave(pool: PagePool, cache: PrefixCache | undefined): boolean {
    assert(this.live > 0, 'a choice leaves its group once');
    this.live--;
    if (this.live > 0) return false;
    if (this.head !== undefined) pool.release(this.head);
    for (const tail of this.siblingTails) pool.release(tail); // idempotent for the forked ones
    cache?.detach(this.prefixHits);
    this.prefixHits = [];
    return true;
  }
}

/** Pages a request reserves, for admission and the gateway's quota (the same count everywhere). */
export function pagesOfRequest(request: GenerationRequest, pageSize: number): number {
  return requestPages(pageSize, request.promptTokens.length, request.maxTokens, request.choices ?? 1);
}
