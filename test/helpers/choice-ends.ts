/**
 * For the tests of a stop sequence that ends one answer of an n > 1 request: a stop only the second answer holds, and
 * a spy on a worker that records the answers the gateway ends (`endChoice`) and the choices' endings the engine
 * reports (what it generated, whatever the client saw).
 */
import assert from 'node:assert/strict';
import type { GenerationSink, InferenceWorker } from '../../src/engine/inference-worker.js';
import type { ChoiceEnd, GenerationRequest } from '../../src/engine/request.js';

/** The shortest piece of `second`'s text after its first character that `first` never holds, nor `second` earlier. */
export function stopOnlyIn(first: string, second: string): string {
  for (let at = 1; at < second.length; at++)
    for (let len = 1; len <= 3 && at + len <= second.length; len++) {
      const piece = second.slice(at, at + len);
      if (piece.trim() !== '' && !first.includes(piece) && !second.slice(0, at).includes(piece)) return piece;
    }
  throw new Error(`no stop sequence only the second answer holds: ${JSON.stringify([first, second])}`);
}

/**
 * The gateway ended answer 1 alone, and the worker stopped generating it there: fewer than `maxTokens` tokens, while
 * answer 0 ran to `maxTokens`.
 */
export function assertSecondStopped(spy: ChoiceEndSpy, maxTokens: number): void {
  assert.deepEqual(spy.ended, [1], 'the gateway ended answer 1 at the worker');
  const [first, second] = spy.engineEnds[0] ?? [];
  assert.equal(second?.reason, 'stop', 'the worker stopped answer 1');
  assert.ok(second.completionTokens < maxTokens, `${second.completionTokens} tokens generated`);
  assert.equal(first?.completionTokens, maxTokens);
}

export interface ChoiceEndSpy {
  /** the answers the gateway ended, in order */
  readonly ended: number[];
  /** each finished request's choices as the engine ended them */
  readonly engineEnds: (readonly ChoiceEnd[] | undefined)[];
  restore(): void;
}

export function spyChoiceEnds(worker: InferenceWorker): ChoiceEndSpy {
  const { endChoice, submit } = worker;
  const spy = {
    ended: [] as number[],
    engineEnds: [] as (readonly ChoiceEnd[] | undefined)[],
    restore() {
      worker.endChoice = endChoice;
      worker.submit = submit;
    },
  };
  worker.endChoice = (id: string, choice: number) => {
    spy.ended.push(choice);
    endChoice.call(worker, id, choice);
  };
  worker.submit = (request: GenerationRequest, sink: GenerationSink) =>
    submit.call(worker, request, {
      onToken: (token, choice) => sink.onToken(token, choice),
      onEnd: (end) => {
        spy.engineEnds.push(end.kind === 'finished' ? end.choices : undefined);
        sink.onEnd(end);
      },
    });
  return spy;
}
