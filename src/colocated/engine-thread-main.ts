/**
 * The engine thread of engine-thread.ts: loads the model, builds the colocated worker (KV pool, capacity proof,
 * engine, step loop) and runs it here, away from the gateway's event loop, so HTTP parsing, SSE writes and
 * tokenization never wait for a model step, nor a step for them (DESIGN I11). Incidents are recorded in this thread's
 * own connection to the incident store before the request's failure leaves it (I3).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import { endToWire, errorToWire } from '../cluster/control-protocol.js';
import { selectBackend } from '../compute/select-backend.js';
import type { GenerationSink } from '../engine/inference-worker.js';
import { IncidentStore } from '../incidents/incident-store.js';
import { loadModel } from '../model/load-model.js';
import { asKvfenceError } from '../util/errors.js';
import { ColocatedWorker } from './colocated-worker.js';
import type {
  EngineThreadData,
  EngineThreadEvent,
  EngineThreadStart,
  FromEngineThread,
  ToEngineThread,
} from './engine-thread-protocol.js';

const port = parentPort;
if (port === null) throw new Error('engine-thread-main runs as a worker thread');
const data = workerData as EngineThreadData;
const post = (message: EngineThreadStart | FromEngineThread) => port.postMessage(message);

/** A step's events, sent in one message once the step's delivery is done (a microtask later). */
const pending: EngineThreadEvent[] = [];
function emit(event: EngineThreadEvent): void {
  if (pending.length === 0) queueMicrotask(() => post({ type: 'events', events: pending.splice(0) }));
  pending.push(event);
}

function start(): { worker: ColocatedWorker; incidents: IncidentStore } {
  const lines: string[] = [];
  const incidents = new IncidentStore(data.incidentsDb);
  let worker: ColocatedWorker;
  try {
    worker = new ColocatedWorker({
      model: loadModel(data.modelPath, { widenQ5_0: data.widenQ5_0 }),
      backend: selectBackend(data.backend, (line) => lines.push(line), { q8Activations: data.q8Activations }),
      settings: data.settings,
      incidents,
      log: pino({ level: data.logLevel }),
    });
  } catch (error) {
    incidents.close();
    throw error;
  }
  worker.onIncident((incident) => emit({ kind: 'incident', incident }));
  post({
    type: 'ready',
    provenContext: worker.provenContext,
    pageSize: worker.pageSize,
    lines: [...lines, ...worker.summary()],
  });
  return { worker, incidents };
}

function sinkOf(id: string): GenerationSink {
  return {
    onToken: (token, choice) => emit({ kind: 'token', id, token, choice }),
    onEnd: (end) => emit({ kind: 'end', id, end: endToWire(end) }),
  };
}

function serve(worker: ColocatedWorker, incidents: IncidentStore): void {
  port?.on('message', (message: ToEngineThread) => {
    switch (message.type) {
      case 'submit':
        try {
          worker.submit(message.request, sinkOf(message.request.id));
        } catch (error) {
          // refused with nothing reserved: the request's one ending is its error
          emit({
            kind: 'end',
            id: message.request.id,
            end: endToWire({ kind: 'failed', error: asKvfenceError(error) }),
          });
        }
        break;
      case 'cancel':
        worker.cancel(message.id);
        break;
      case 'end_choice':
        worker.endChoice(message.id, message.choice);
        break;
      case 'stats':
        post({ type: 'stats', ask: message.ask, stats: worker.stats() });
        break;
      case 'page_maps':
        void worker.pageMaps().then((maps) => post({ type: 'page_maps', ask: message.ask, maps }));
        break;
      case 'pause':
        worker.pause();
        break;
      case 'resume':
        worker.resume();
        break;
      case 'close':
        void worker.close().then(() => {
          incidents.close();
          queueMicrotask(() => post({ type: 'closed' })); // after the endings' flush, queued first
        });
        break;
    }
  });
}

let started: ReturnType<typeof start> | undefined;
try {
  started = start();
} catch (error) {
  // the gateway's side ends this thread when it reads this; a KvfenceError (a bad model file) reads as in-process
  post({ type: 'start_failed', error: errorToWire(asKvfenceError(error)) });
}
if (started !== undefined) serve(started.worker, started.incidents);
