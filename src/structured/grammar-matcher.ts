/**
 * One request's position in its grammar: which tokens may come next, and advancing by the token chosen. Per request,
 * never shared (the CompiledGrammar it reads is shared and immutable apart from its mask cache).
 */
import { assert } from '../util/assert.js';
import { LIMITS } from '../util/limits.js';
import { ambiguous, type CompiledGrammar } from './compiled-grammar.js';
import { canEnd, Frame, type Stack, stepBytes } from './grammar-stack.js';

export class GrammarMatcher {
  private stacks: Stack[];

  constructor(readonly compiled: CompiledGrammar) {
    this.stacks = [new Frame(compiled.grammar.rootStart, 0, null)];
  }

  /** Fills `bits` with the tokens that keep the output a valid prefix; true when the document may end here. */
  fillMask(bits: Uint32Array): boolean {
    return this.compiled.fillMask(this.stacks, bits);
  }

  /** Advances by a token; false (nothing changed) when the token does not continue the document. */
  accept(tokenId: number): boolean {
    const { index, grammar } = this.compiled;
    assert(Number.isInteger(tokenId) && tokenId >= 0 && tokenId < index.vocabSize, 'a token id in the vocabulary');
    const from = index.offsets[tokenId]!;
    const to = index.offsets[tokenId + 1]!;
    if (from === to) return false; // control tokens are no text: never part of a document
    const next = stepBytes(grammar, this.stacks, index.bytes, from, to);
    if (next.length === 0) return false;
    if (next.length > LIMITS.grammarStacksMax) throw ambiguous();
    this.stacks = next;
    return true;
  }

  /** The document may end here. */
  get complete(): boolean {
    return this.stacks.some((s) => canEnd(this.compiled.grammar, s));
  }

  /** The document has ended: nothing more can follow. */
  get finished(): boolean {
    return this.stacks.every((s) => s === null);
  }
}
