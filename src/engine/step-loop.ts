/**
 * Where an engine meets the event loop: while it has work, one `step(now)` per event-loop turn, its events handed to
 * `deliver`. Between steps the loop yields (setImmediate), so HTTP, control messages and cancellations land between
 * steps and never in the middle of one. The colocated, decode and prefill workers each run their engine through one.
 */
export interface Steppable<E> {
  readonly hasWork: boolean;
  step(nowMs: number): E[];
}

export class StepLoop<E> {
  private scheduled: NodeJS.Immediate | undefined;
  private paused = false;
  private stopped = false;

  constructor(
    private readonly engine: Steppable<E>,
    private readonly deliver: (events: readonly E[]) => void,
    private readonly now: () => number = Date.now,
  ) {}

  /** Work arrived: step soon. With nothing running every queued request can be admitted (I1), so no spinning. */
  kick(): void {
    if (this.scheduled !== undefined || this.stopped || this.paused || !this.engine.hasWork) return;
    this.scheduled = setImmediate(() => {
      this.scheduled = undefined;
      if (this.stopped || this.paused) return;
      this.deliver(this.engine.step(this.now()));
      this.kick();
    });
  }

  /** Stops stepping; requests still queue, their deadlines running (maintenance and tests). */
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
  }
}
