/** The request body thread of json-body.ts: parses the large bodies handed to it, and reads them for their routes. */
import { workerData } from 'node:worker_threads';
import { serveThreadCalls } from '../util/thread-calls.js';
import type { BodyModel } from './body-readers.js';
import { type BodyCall, readJsonBody } from './json-body.js';

const model = workerData as BodyModel;
serveThreadCalls('json-body-main', (call: BodyCall) => readJsonBody(call, model));
