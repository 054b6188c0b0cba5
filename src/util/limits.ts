/**
 * Every hard bound of kvfence in one place. A bound stops a bad input or a runaway loop before it becomes memory
 * exhaustion or a hang; each is far above what a real model or request needs.
 */
import { assert } from './assert.js';

export const LIMITS = {
  // GGUF files
  ggufStringBytesMax: 64 * 1024 * 1024,
  /**
   * array items over all metadata entries together, checked as each array is declared, before it is read: an item is
   * one byte in the file (a u8 or bool) but a slot of a JS array, ~16 bytes of heap while the array grows, and a short
   * string ~40, so a file of many full arrays exhausted the heap. Real metadata is a vocabulary: a 256k-token one
   * (tokens, scores, types and merges) is ~1M items, the largest kvfence accepts (vocabSizeMax) ~5M; 16M leaves room
   * for that three times over and bounds the metadata at well under 1 GiB of heap.
   */
  ggufMetadataItemsMax: 16 * 1024 * 1024,
  ggufMetadataEntriesMax: 65_536,
  ggufTensorCountMax: 65_536,
  ggufTensorDimsMax: 4,
  ggufAlignmentMax: 1 << 20,
  // models
  vocabSizeMax: 1 << 20,
  /**
   * bytes of every token's rendered text together (the tokenizer builds them at load). A real vocabulary renders to a
   * few MB; llama.cpp spells each character outside the byte-level table with the whole token's text, so one token of
   * n such characters renders to ~3n² bytes: a 21 KB token in a 700 KB file asked for gigabytes
   */
  tokenizerPieceBytesMax: 64 * 1024 * 1024,
  /** the native kernels keep a head's accumulators on the stack: kHeadDimMax in native/src/kernels.h */
  headDimMax: 1024,
  layerCountMax: 512,
  contextTokensMax: 1 << 22,
  // generation
  generateTokensMax: 1 << 20,
  // serving (kvfence serve)
  kvPagesMax: 1 << 24,
  /** f16 values in one KV pool (8 GiB): node 20's longest typed array (2^32 elements; 22 and 24 allow more) */
  kvPoolValuesMax: 2 ** 32,
  pageSizeTokensMax: 4096,
  runningSequencesMax: 4096,
  waitingRequestsMax: 1 << 16,
  queueTimeoutMsMax: 3_600_000,
  /** the longest forward pass a worker announces to its gateways (cluster/long-pass.ts) */
  workerBusyMsMax: 3_600_000,
  stepTokensMax: 1 << 20,
  promptStepMsMax: 60_000,
  tenantConcurrentRequestsMax: 1 << 16,
  /** gateways sharing one cluster (`--gateways`), each enforcing its share of the tenant limits */
  gatewaysMax: 64,
  tenantCountMax: 100_000,
  apiKeyFileBytesMax: 16 * 1024 * 1024,
  requestBodyBytesMax: 16 * 1024 * 1024,
  // a streamed response whose client stops reading (gateway/stream-writer.ts): then it is cut and its request cancelled
  streamBufferedBytesMax: 256 * 1024,
  streamDrainTimeoutMs: 10_000,
  chatMessagesMax: 4096,
  stopSequencesMax: 4,
  stopSequenceCharsMax: 256,
  topLogprobsMax: 20,
  /** `n`: answers to one request (each a running sequence; all of them fit one full-context request's KV pages) */
  choicesMax: 64,
  /**
   * echo repeats the prompt in each of the n answers: the characters echoed in all of them, when n > 1 (32 echoes of a
   * prompt of a million characters made a 34 MB answer)
   */
  echoCharsMax: 16 * 1024 * 1024,
  completionLogprobsMax: 5,
  // sampling options and structured outputs (src/engine sampler, src/structured)
  logitBiasEntriesMax: 300,
  stopTokenIdsMax: 64,
  toolsMax: 128,
  /**
   * all of a request's tool definitions together, as JSON and in objects and arrays: they go from the body thread to
   * the event loop and on to the tokenizer thread as objects (~0.5 µs an object each way: 128 tools of 9,000 empty
   * objects held the event loop 0.76 s)
   */
  toolsBytesMax: 512 * 1024,
  toolsNodesMax: 20_000,
  schemaBytesMax: 256 * 1024,
  schemaNodesMax: 10_000,
  schemaDepthMax: 64,
  schemaOptionsMax: 1024,
  schemaPropertiesMax: 1024,
  schemaArrayItemsMax: 1024,
  schemaStringLengthMax: 1 << 20,
  grammarStatesMax: 200_000,
  /**
   * steps of one grammar's subset construction (grammar-builder.ts): ~0.1–0.25 s of one core here at most; an object
   * of ~100 optional properties takes 3M, the tests' and common schemas at most ~100k
   */
  grammarWorkMax: 4_000_000,
  grammarStacksMax: 64,
  grammarCacheEntriesMax: 64,
  /** one tenant's share of them: its own least recently used entry goes first */
  grammarCacheEntriesPerTenant: 16,
  // KV transfer (src/transfer): wire frames, tickets, waits
  transferIdBytesMax: 128,
  transferPageBytesMax: 64 * 1024 * 1024,
  transferFrameBytesMax: 64 * 1024 * 1024 + 4096,
  transferPagesMax: 1 << 20,
  transferAbortMessageBytesMax: 1024,
  /** authenticated connections per listener (a worker port); connections still in the handshake count apart */
  transferConnectionsMax: 4096,
  // worker ports (src/wire): connections that have not authenticated yet. A flood of them must not take the slots of
  // real peers: they have their own cap (the oldest is dropped for a newer one), a short handshake deadline, and a
  // small read budget (a handshake is three messages of at most 70 bytes; one read of what follows may come with it)
  preAuthConnectionsMax: 64,
  preAuthTimeoutMsMax: 1_500,
  preAuthBytesMax: 1 << 20,
  transferSecretBytesMin: 32,
  transferSecretBytesMax: 1024,
  transferTimeoutMsMax: 3_600_000,
  transferPipeBytesMax: 256 * 1024 * 1024,
  // control channel (src/node: gateway ↔ prefill/decode workers)
  controlMessageBytesMax: 40 * 1024 * 1024,
  controlRequestsInFlightMax: 1 << 16,
  workerCountMax: 256,
  workerRestartsMax: 5,
} as const;

assert(
  LIMITS.ggufMetadataItemsMax >= 5 * LIMITS.vocabSizeMax,
  'the largest vocabulary (tokens, scores, types, merges) must fit the metadata',
);
assert(
  LIMITS.stepTokensMax >= LIMITS.runningSequencesMax,
  'a step must be able to hold one decode token per running sequence',
);
assert(LIMITS.contextTokensMax >= 1 << 20, 'a 1M-token context must be expressible (and then proven against the pool)');
assert(
  LIMITS.transferFrameBytesMax >= LIMITS.transferPageBytesMax + 4 * LIMITS.transferIdBytesMax,
  'a PAGE frame (header + one whole page) must fit a transfer frame',
);
assert(
  LIMITS.transferPagesMax * LIMITS.pageSizeTokensMax >= LIMITS.contextTokensMax,
  'a transfer must be able to carry the largest context',
);
assert(
  LIMITS.controlMessageBytesMax >= LIMITS.contextTokensMax * 8 + (1 << 20),
  'a prefill job (every prompt token id as JSON) must fit one control message',
);
assert(LIMITS.controlMessageBytesMax <= LIMITS.transferFrameBytesMax, 'a control message fits one sealed frame');
