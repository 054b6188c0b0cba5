/** The tokenizer thread of encoder-thread.ts: reads the tokenizer from the model file's header, then encodes. */
import { parentPort, workerData } from 'node:worker_threads';
import { errorMessage, KvfenceError } from '../util/errors.js';
import type { EncodeReply } from './encoder-thread.js';
import { readGgufHeader } from './gguf-read.js';
import { type EncodeOptions, tokenizerFromGguf } from './tokenizer.js';

const port = parentPort;
if (port === null) throw new Error('encoder-thread-main runs as a worker thread');
const tokenizer = tokenizerFromGguf(readGgufHeader((workerData as { modelPath: string }).modelPath).metadata);
port.on('message', (request: { id: number; text: string; options: EncodeOptions }) => {
  let reply: EncodeReply;
  try {
    reply = { id: request.id, ids: tokenizer.encode(request.text, request.options) };
  } catch (error) {
    const code = error instanceof KvfenceError ? error.code : 'internal_error';
    reply = { id: request.id, code, message: errorMessage(error) };
  }
  port.postMessage(reply);
});
