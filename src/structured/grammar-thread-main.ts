/** The grammar thread of grammar-thread.ts: builds a constraint's grammar and answers with its tables. */
import { serveThreadCalls } from '../util/thread-calls.js';
import type { GrammarTables } from './grammar.js';
import { constraintGrammar, type OutputConstraint } from './grammar-cache.js';

serveThreadCalls('grammar-thread-main', (constraint: OutputConstraint): GrammarTables => constraintGrammar(constraint));
