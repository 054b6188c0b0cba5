/**
 * The gateway's grammar-check thread (model/encoder-thread.ts checkGrammars): builds a request's output grammars as
 * its check, for its 400 alone; nothing comes back.
 */
import { serveThreadCalls } from '../util/thread-calls.js';
import { checkGrammars, type GrammarCheck } from './grammar-cache.js';

serveThreadCalls('grammar-check-main', (checks: readonly GrammarCheck[]): true => {
  checkGrammars(checks);
  return true;
});
