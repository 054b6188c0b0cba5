/**
 * An Engine's continuous batch at work: its step loop, and each request's sink. What the colocated worker and a
 * decode worker share: requests come in (`submit`, or `adopt` once a transfer committed), events go out — tokens and
 * the one ending to the request's sink, isolation incidents to `onIncident` before the failure reaches the sink, bugs
 * to the log. A sink that throws (a broken socket) cancels its own request only: a token it could not take ends the
 * request as failed (its owner hears it and lets go of its own record), an ending it could not take is logged.
 */
import { assert } from '../util/assert.js';
import { errorMessage, KvfenceError } from '../util/errors.js';
import type { LogSink } from '../util/log.js';
import type { AdmissionCandidate } from './admission.js';
import type { Engine, TransferredChoices, TransferredSequence } from './engine.js';
import { GrammarWaits } from './grammar-waits.js';
import type { GenerationSink } from './inference-worker.js';
import type { EngineEvent, GenerationRequest, IsolationIncident } from './request.js';
import { StepLoop } from './step-loop.js';

export interface BatchRunnerOptions {
  engine: Engine;
  /** durable first: the incident is recorded when this returns */
  onIncident: (incident: IsolationIncident) => void;
  log: LogSink;
  now: () => number;
}

export class BatchRunner {
  readonly engine: Engine;
  private readonly sinks = new Map<string, GenerationSink>();
  private readonly loop: StepLoop<EngineEvent>;
  private readonly waits: GrammarWaits;
  private closed = false;
  /** an owner's admission, run when batch slots came back (slotsFreed) */
  private admitter: (() => void) | undefined;

  constructor(private readonly options: BatchRunnerOptions) {
    const engine = options.engine;
    this.engine = engine;
    this.waits = new GrammarWaits(engine.config.grammars, engine.config.queueTimeoutMs);
    const steps = {
      get hasWork() {
        return engine.hasWork;
      },
      step: (nowMs: number) => this.slotsFreed(() => engine.step(nowMs)),
    };
    this.loop = new StepLoop(steps, (events) => this.deliver(events), options.now);
  }

  /**
   * An owner that admits (a decode worker: Engine.admitFrom over its own queue) hears here when a step or an ended
   * choice gave batch slots back: a choice of n that ends is not its request's ending, which the owner hears anyway,
   * and the slot it frees would otherwise wait for some request to end (a paused choice behind it, queued requests).
   */
  admitWhenSlotsFree(admit: () => void): void {
    this.admitter = admit;
  }

  /**
   * Queues a request (see Engine.submit: throws with nothing reserved), once its output grammar is built off this
   * thread (GrammarWaits): a refusal then reaches its sink.
   */
  submit(request: GenerationRequest, sink: GenerationSink): void {
    assert(!this.waits.has(request.id), `request id ${request.id} is already in use`);
    this.waits.whenReady(
      request,
      () => {
        this.engine.submit(request, this.options.now());
        this.sinks.set(request.id, sink);
        this.loop.kick();
      },
      (error) => this.call(request.id, () => sink.onEnd({ kind: 'failed', error })),
    );
  }

  /** A request whose prompt KV arrived by a verified transfer joins the batch (see Engine.adoptTransferred). */
  adopt(adoption: TransferredSequence, sink: GenerationSink): void {
    this.engine.adoptTransferred(adoption, this.options.now());
    this.sinks.set(adoption.request.id, sink);
    this.loop.kick();
  }

  /** An n > 1 request whose prompt KV arrived joins the batch as its choices (see Engine.adoptChoices). */
  adoptChoices(adoption: TransferredChoices, sink: GenerationSink): void {
    const events = this.engine.adoptChoices(adoption, this.options.now());
    this.sinks.set(adoption.request.id, sink);
    this.deliver(events);
    this.loop.kick();
  }

  /** An owner's admission (Engine.admitFrom); a paused sequence it resumed runs again from the next step. */
  admitFrom<T extends AdmissionCandidate>(queue: readonly T[], start: (candidate: T) => void): void {
    if (this.engine.admitFrom(queue, start)) this.loop.kick();
  }

  /** Its pages are scrubbed and free before this returns; its sink hears nothing more. */
  cancel(requestId: string): void {
    if (this.waits.withdraw(requestId)) return;
    this.sinks.delete(requestId);
    this.engine.cancel(requestId);
  }

  /** Answer `choice` of an n > 1 request stops (see Engine.endChoice); the request's ending comes with its last. */
  endChoice(requestId: string, choice: number): void {
    if (this.sinks.has(requestId)) this.deliver(this.slotsFreed(() => this.engine.endChoice(requestId, choice)));
  }

  pause(): void {
    this.loop.pause();
  }

  resume(): void {
    this.loop.resume();
  }

  /** Fails everything in flight with `error` (each sink hears its ending) and stops stepping. */
  close(error: KvfenceError): void {
    if (this.closed) return;
    this.closed = true;
    this.loop.stop();
    this.waits.failAll(error);
    this.deliver(this.engine.abortAll(error));
    void this.engine.config.grammars?.close();
  }

  private deliver(events: readonly EngineEvent[]): void {
    for (const event of events) {
      switch (event.kind) {
        case 'incident':
          this.options.onIncident(event.incident);
          break;
        case 'bug':
          this.options.log.error({ err: event.error }, 'internal error in a model step; its requests failed');
          break;
        case 'token': {
          const sink = this.sinks.get(event.request);
          if (sink !== undefined && !this.call(event.request, () => sink.onToken(event.token, event.choice))) {
            const error = new KvfenceError('internal_error', 'the answer could not be delivered');
            this.call(event.request, () => sink.onEnd({ kind: 'failed', error }));
          }
          break;
        }
        case 'end': {
          const sink = this.sinks.get(event.request);
          this.sinks.delete(event.request);
          if (sink !== undefined) this.call(event.request, () => sink.onEnd(event.end));
          break;
        }
      }
    }
  }

  /**
   * Runs `change`; when it gave batch slots back, an owner that admits does so next (a microtask: once its events are
   * out). Without one (the colocated engine admits in its own steps) nothing is counted.
   */
  private slotsFreed(change: () => EngineEvent[]): EngineEvent[] {
    const admit = this.admitter;
    if (admit === undefined) return change();
    const before = this.engine.runningSlots();
    const events = change();
    if (this.engine.runningSlots() < before) queueMicrotask(admit);
    return events;
  }

  /** Delivers to a request's sink; false (the request cancelled, its pages scrubbed and free) when the sink threw. */
  private call(requestId: string, deliver: () => void): boolean {
    try {
      deliver();
      return true;
    } catch (error) {
      this.options.log.warn(
        { request: requestId, err: errorMessage(error) },
        'delivering to a request failed; cancelling it',
      );
      this.cancel(requestId);
      return false;
    }
  }
}
