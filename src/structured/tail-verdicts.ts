/**
 * Which of a string scan's tails (the bytes of a closing token after its quote) the stack below the string reads: one
 * depth-first walk over the tails' trie (token-index.ts), stepping the stacks once per trie node and pruning a prefix
 * no stack reads, instead of stepping each tail from the start. Same answers as `stepBytes(g, [below], tail)` per tail.
 */
import type { Grammar } from './grammar.js';
import { type Stack, stepStacks } from './grammar-stack.js';
import type { TailTrie } from './token-index.js';

/** Per tail id: 1 when the stack below reads it (with something left to parse or the document done), else 0. */
export function tailVerdicts(g: Grammar, below: Stack, trie: TailTrie): Uint8Array {
  const verdicts = new Uint8Array(trie.count);
  const { nodeByte, firstChild, nextSibling, endOf } = trie;
  const todo: { node: number; stacks: Stack[] }[] = [{ node: 0, stacks: [below] }];
  // bounded: each trie node is visited at most once (a tree), and only while some stack reads its prefix
  while (todo.length > 0) {
    const { node, stacks } = todo.pop()!;
    for (let child = firstChild[node]!; child >= 0; child = nextSibling[child]!) {
      const next: Stack[] = [];
      stepStacks(g, stacks, nodeByte[child]!, next);
      if (next.length === 0) continue;
      if (endOf[child]! >= 0) verdicts[endOf[child]!] = 1;
      if (firstChild[child]! >= 0) todo.push({ node: child, stacks: next });
    }
  }
  return verdicts;
}
