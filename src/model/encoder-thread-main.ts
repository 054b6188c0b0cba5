/**
 * The tokenizer threads of encoder-thread.ts: read the tokenizer and chat template from the model file's header, and
 * tokenize in steps, so that the long prompts' thread can take turns between them.
 */
import { workerData } from 'node:worker_threads';
import { chatPromptSteps } from '../gateway/prompt-length.js';
import { pieceTextSteps } from '../gateway/text-stream.js';
import type { Steps } from '../util/steps.js';
import { serveThreadSteps } from '../util/thread-calls.js';
import { parseChatTemplate } from './chat-template.js';
import type { EncodeAnswer, EncodeCall } from './encoder-thread.js';
import { readGgufHeader } from './gguf-read.js';
import { metaString } from './gguf-types.js';
import { tokenizerFromGguf } from './tokenizer.js';

const { metadata } = readGgufHeader((workerData as { modelPath: string }).modelPath);
const tokenizer = tokenizerFromGguf(metadata);
const source = metaString(metadata, 'tokenizer.chat_template');
// checked by the gateway at load (loadChatTemplate) before this thread starts
const template = source === undefined ? undefined : parseChatTemplate(source);

serveThreadSteps('encoder-thread-main', (call: EncodeCall): Steps<EncodeAnswer> => {
  if (call.kind === 'text') return tokenizer.encodeSteps(call.text, call.max, call.options);
  if (call.kind === 'decode') return tokenizer.decodeSteps(call.ids);
  if (call.kind === 'pieces') return pieceTextSteps(tokenizer, call.ids);
  if (template === undefined) throw new Error('a chat prompt for a model without a chat template');
  return chatPromptSteps(template, tokenizer, call, call.renderedMax ?? Number.POSITIVE_INFINITY);
});
