/**
 * Fuzz targets for the parsers that read bytes from a peer or a file: control messages, transfer frames, GGUF headers.
 * Each input must either parse into something that encodes back to the same value, or be refused with the parser's
 * own error type; anything else (a TypeError, a RangeError, a hang) is a bug.
 */
import assert from 'node:assert/strict';
import { readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ControlMessage, decodeControl, encodeControl } from '../../src/cluster/control-protocol.js';
import { readGgufHeader } from '../../src/model/gguf-read.js';
import { modelConfigFromGguf } from '../../src/model/model-config.js';
import { tokenizerFromGguf } from '../../src/model/tokenizer.js';
import type { TransferTicket } from '../../src/transfer/ticket.js';
import { TransferError } from '../../src/transfer/transfer-error.js';
import {
  decodeFrame,
  encodeAbort,
  encodeCommit,
  encodeFrame,
  encodeHello,
  encodePage,
} from '../../src/transfer/wire-format.js';
import { KvfenceError } from '../../src/util/errors.js';
import { testModelFile } from '../helpers/models.js';
import { tempDirectory } from '../helpers/temp.js';
import { SERVING_MODEL } from '../serving/serve-helpers.js';
import { mutatedBytes } from './byte-mutations.js';
import type { FuzzTarget } from './fuzz-target.js';

const NONCE = Uint8Array.from({ length: 16 }, (_, i) => i * 7);
const TICKET: TransferTicket = {
  request: 'cmpl-1',
  tenant: 'acme',
  nonce: NONCE,
  epoch: 7,
  pageCount: 2,
  tokenCount: 20,
  pageSizeTokens: 16,
  pageBytes: 64,
};
const REQUEST = {
  id: 'cmpl-1',
  tenant: 'acme',
  promptTokens: [1, 2, 3],
  maxTokens: 4,
  sampling: { temperature: 0.7, topK: 0, topP: 0.9, seed: 42 },
  topLogprobs: 2,
  tenantKvPagesMax: 64,
};

const CONTROL_SEEDS: readonly ControlMessage[] = [
  {
    type: 'hello',
    hello: {
      role: 'decode',
      name: 'decode-0',
      modelName: 'm',
      vocabSize: 512,
      layerCount: 2,
      kvDim: 32,
      pageSize: 16,
      provenContext: 256,
      transferAddress: '127.0.0.1:7202',
    },
  },
  { type: 'reserve', request: REQUEST },
  { type: 'reserved', request: 'cmpl-1', ticket: TICKET },
  { type: 'prefill', request: REQUEST, decodeAddress: '10.0.0.3:7202', ticket: TICKET },
  { type: 'token', request: 'cmpl-1', token: { id: 5, logprob: -0.125, top: [{ id: 5, logprob: -0.125 }] } },
  { type: 'end', request: 'cmpl-1', end: { kind: 'finished', reason: 'length', promptTokens: 3, completionTokens: 4 } },
  { type: 'end', request: 'cmpl-1', end: { kind: 'failed', code: 'context_length_exceeded', message: 'too long' } },
  { type: 'cancel', request: 'cmpl-1' },
  { type: 'stats', id: 3 },
];

export const controlTarget: FuzzTarget<Uint8Array> = {
  name: 'control',
  ciRuns: 3000,
  async open() {
    return {
      input: mutatedBytes(CONTROL_SEEDS.map(encodeControl)),
      check(bytes) {
        let message: ControlMessage;
        try {
          message = decodeControl(bytes);
        } catch (error) {
          assert.ok(error instanceof KvfenceError && error.code === 'invalid_argument', String(error));
          return;
        }
        // what decodes survives a round trip (as JSON: -0 travels as 0, as JSON has it)
        const encoded = encodeControl(message);
        assert.deepEqual(encodeControl(decodeControl(encoded)), encoded);
      },
      async close() {},
    };
  },
};

const BINDING = { request: TICKET.request, tenant: TICKET.tenant, nonce: NONCE };
const FRAME_SEEDS: readonly Uint8Array[] = [
  encodeHello(TICKET),
  encodePage(BINDING, { index: 1, firstToken: 16, tokenCount: 4, checksum: 0x0123456789abcdefn }, new Uint8Array(64)),
  encodeCommit(BINDING, {
    pageCount: 2,
    tokenCount: 20,
    digest: new Uint8Array(32).fill(9),
    firstTokens: [{ id: 3, logprob: -0.5, top: [{ id: 3, logprob: -0.5 }] }],
  }),
  encodeAbort(BINDING, { code: 'kv_transfer_failed', message: 'gone' }),
].map((parts) => Buffer.concat(parts));

export const transferTarget: FuzzTarget<Uint8Array> = {
  name: 'transfer',
  ciRuns: 3000,
  async open() {
    return {
      input: mutatedBytes(FRAME_SEEDS),
      check(bytes) {
        let frame: ReturnType<typeof decodeFrame>;
        try {
          frame = decodeFrame(bytes);
        } catch (error) {
          assert.ok(error instanceof TransferError, String(error));
          return;
        }
        // frames are canonical: what decodes encodes back to the very same bytes
        assert.deepEqual(Buffer.concat(encodeFrame(frame)), Buffer.from(bytes));
      },
      async close() {},
    };
  },
};

export const ggufTarget: FuzzTarget<Uint8Array> = {
  name: 'gguf',
  ciRuns: 300,
  async open() {
    const dir = tempDirectory('kvfence-fuzz-gguf-');
    const path = join(dir, 'input.gguf');
    const seed = readFileSync(testModelFile(SERVING_MODEL));
    const headerBytes = readGgufHeader(testModelFile(SERVING_MODEL)).dataOffset;
    return {
      // edits in the header (magic, counts, lengths, the vocabulary, the tensor table), not the weights
      input: mutatedBytes([seed], 3, 4096, headerBytes),
      check(bytes) {
        // the header parse never reads the weights: write the header, extend the file to its length (sparse)
        writeFileSync(path, bytes.subarray(0, headerBytes + 64));
        truncateSync(path, bytes.length);
        try {
          const header = readGgufHeader(path);
          modelConfigFromGguf(header.metadata, path);
          tokenizerFromGguf(header.metadata);
        } catch (error) {
          assert.ok(error instanceof KvfenceError, String(error instanceof Error ? error.stack : error));
        }
      },
      async close() {
        rmSync(dir, { recursive: true, force: true });
      },
    };
  },
};
