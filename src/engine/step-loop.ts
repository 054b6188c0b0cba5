/**
 * Where an engine meets the event loop: while it has work, one `step(now)` per event-loop turn, its events handed to
 * `deliver`. Between steps the loop yields (setImmediate), so HTTP, control messages and cancellations land between
 * steps and never in the middle of one. The colocated, decode and prefill workers each run their engine through one.
 * An engine whose only work waits for pages held outside it (a prefill worker's queue while its finished requests'
 * pages are on the wire) is `stalled`: the loop then looks again every STALL_POLL_MS, or at once when kicked (the
 * worker kicks when it frees pages), instead of stepping on every turn for nothing.
 */
export interface Steppable<E> {
  readonly hasWork: boolean;
  /** optional: it has work, but a step could do none of it until something it does not hold is freed */
  readonly stalled?: boolean;
  step(nowMs: number): E[];
}

/** How often a stalled engine is looked at again without a kick: its queue deadlines are checked that often */
export const STALL_POLL_MS = 10;

export class StepLoop<E> {
  private scheduled: NodeJS.Immediate | undefined;
  /** the next look at a stalled engine */
  private poll: NodeJS.Timeout | undefined;
  private paused = false;
  private stopped = false;

  constructor(
    private readonly engine: Steppable<E>,
    private readonly deliver: (events: readonly E[]) => void,
    private readonly now: () => number = Date.now,
  ) {}

  /** Work arrived, or pages were freed: step soon. */
  kick(): void {
    if (this.scheduled !== undefined || this.stopped || this.paused || !this.engine.hasWork) return;
    this.clearPoll();
    this.scheduled = setImmediate(() => {
      this.scheduled = undefined;
      if (this.stopped || this.paused) return;
      this.deliver(this.engine.step(this.now()));
      if (this.engine.stalled === true) this.pollLater();
      else this.kick();
    });
  }

  /**
   * Stops stepping; requests still queue (maintenance and tests). Queue deadlines are checked when a step runs: a
   * paused engine expires none, and the gateway's request deadline ends what waits too long meanwhile.
   */
  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
    this.kick();
  }

  /** For good: no step runs after this returns. */
  stop(): void {
    this.stopped = true;
    if (this.scheduled !== undefined) clearImmediate(this.scheduled);
    this.scheduled = undefined;
    this.clearPoll();
  }

  private pollLater(): void {
    if (this.poll !== undefined) return;
    this.poll = setTimeout(() => {
      this.poll = undefined;
      this.kick();
    }, STALL_POLL_MS);
  }

  private clearPoll(): void {
    if (this.poll !== undefined) clearTimeout(this.poll);
    this.poll = undefined;
  }
}
