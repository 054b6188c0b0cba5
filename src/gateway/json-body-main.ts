/** The request body thread of json-body.ts: parses the large bodies handed to it. */
import { serveThreadCalls } from '../util/thread-calls.js';
import { parseJsonBody } from './json-body.js';

serveThreadCalls('json-body-main', parseJsonBody);
