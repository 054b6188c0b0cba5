/** The tokenizer thread of encoder-thread.ts: reads the tokenizer from the model file's header, then encodes. */
import { workerData } from 'node:worker_threads';
import { serveThreadCalls } from '../util/thread-calls.js';
import type { EncodeCall } from './encoder-thread.js';
import { readGgufHeader } from './gguf-read.js';
import { tokenizerFromGguf } from './tokenizer.js';

const tokenizer = tokenizerFromGguf(readGgufHeader((workerData as { modelPath: string }).modelPath).metadata);
serveThreadCalls('encoder-thread-main', ({ text, options }: EncodeCall) => tokenizer.encode(text, options));
