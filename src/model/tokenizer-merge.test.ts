import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { finish } from '../util/steps.js';
import { type GgufMetadata, metaNumberArray, metaStringArray } from './gguf-types.js';
import { type MergeRules, MergeScratch, MergeSymbols } from './merge-queue.js';
import { BpeRules, SpmRules } from './merge-rules.js';
import { readMerges, readVocabulary, TOKEN_TYPE, type Vocabulary } from './tokenizer-vocab.js';
import { buildTestVocabulary } from './vocab-build.js';

/**
 * The merge as its definition reads: merge the best adjacent pair, leftmost on ties, until none can merge. O(n²) per
 * word; `priority` is undefined for a pair that cannot merge, and `better(p, q)` true when p strictly beats q.
 */
function referenceMerge(
  word: string,
  priority: (left: string, right: string) => number | undefined,
  better: (p: number, q: number) => boolean,
): string[] {
  const symbols = Array.from(word);
  for (let merges = 0; merges < word.length; merges++) {
    let best = -1;
    let bestPriority = 0;
    for (let i = 0; i + 1 < symbols.length; i++) {
      const p = priority(symbols[i], symbols[i + 1]);
      if (p !== undefined && (best < 0 || better(p, bestPriority))) {
        best = i;
        bestPriority = p;
      }
    }
    if (best < 0) break;
    symbols.splice(best, 2, symbols[best] + symbols[best + 1]);
  }
  return symbols;
}

/** The symbols merge-queue.ts leaves, as texts; a symbol with an id must be the token of its text. */
function fastMerge(word: string, rules: MergeRules, scratch: MergeScratch, vocab: Vocabulary): string[] {
  const symbols = finish(scratch.merged(word, rules));
  const texts: string[] = [];
  for (let at = 0; at >= 0 && at < word.length; at = symbols.next[at]!) {
    const text = symbols.text(at);
    const id = symbols.id[at]!;
    if (id >= 0) assert.equal(vocab.texts[id], text);
    texts.push(text);
  }
  return texts;
}

/** Every string over `letters` of 2 to 6 characters: tokens for the runs and alternations that stress the queue. */
function runTexts(letters: readonly string[]): string[] {
  let level = [...letters];
  const all: string[] = [];
  for (let length = 2; length <= 6; length++) {
    level = level.flatMap((prefix) => letters.map((letter) => prefix + letter));
    all.push(...level);
  }
  return all;
}

/** A fixed shuffle (a small LCG), so merge ranks of the added tokens are not in length order. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed;
  for (let i = out.length - 1; i > 0; i--) {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

/**
 * A generated gpt2 vocabulary plus every a/b string up to 6 letters, merged from each of its splits in shuffled rank
 * order (some merges duplicate learned ones: the first rank must win).
 */
function bpeVocabulary(
  vocabSize: number,
  seed: number,
): { vocab: Vocabulary; rules: MergeRules; rank: Map<string, number> } {
  const meta: GgufMetadata = new Map(buildTestVocabulary({ kind: 'gpt2', pre: 'gpt-2', vocabSize, seed }));
  const tokens = [...metaStringArray(meta, 'tokenizer.ggml.tokens')!];
  const types = [...metaNumberArray(meta, 'tokenizer.ggml.token_type')!];
  const merges = [...metaStringArray(meta, 'tokenizer.ggml.merges')!];
  const known = new Set(tokens);
  const added = runTexts(['a', 'b']);
  for (const text of added.filter((t) => !known.has(t))) {
    tokens.push(text);
    types.push(TOKEN_TYPE.normal);
  }
  const splits = added.flatMap((text) =>
    Array.from({ length: text.length - 1 }, (_, i) => `${text.slice(0, i + 1)} ${text.slice(i + 1)}`),
  );
  merges.push(...shuffled(splits, seed));
  meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
  meta.set('tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: merges });
  const vocab = readVocabulary(meta);
  const rank = new Map<string, number>();
  merges.forEach((merge, r) => {
    if (!rank.has(merge)) rank.set(merge, r);
  });
  return { vocab, rules: new BpeRules(vocab.idOf, readMerges(meta, vocab)), rank };
}

/** A generated llama vocabulary plus the a/b strings, with scores coarsened so that many pieces tie. */
function spmVocabulary(vocabSize: number, seed: number): { vocab: Vocabulary; rules: MergeRules } {
  const meta: GgufMetadata = new Map(buildTestVocabulary({ kind: 'llama', pre: 'gpt-2', vocabSize, seed }));
  const tokens = [...metaStringArray(meta, 'tokenizer.ggml.tokens')!];
  const types = [...metaNumberArray(meta, 'tokenizer.ggml.token_type')!];
  const scores = metaNumberArray(meta, 'tokenizer.ggml.scores')!.map((score) => Math.round(score / 8));
  const known = new Set(tokens);
  shuffled(runTexts(['a', 'b']), seed).forEach((text, i) => {
    if (known.has(text)) return;
    tokens.push(text);
    types.push(TOKEN_TYPE.normal);
    scores.push(-(i % 5));
  });
  meta.set('tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens });
  meta.set('tokenizer.ggml.token_type', { type: 'array', itemType: 'i32', value: types });
  meta.set('tokenizer.ggml.scores', { type: 'array', itemType: 'f32', value: scores });
  const vocab = readVocabulary(meta);
  return { vocab, rules: new SpmRules(vocab.idOf, vocab.scores) };
}

/**
 * Words over a few letters (those with doubled tokens, the a/b runs, a word start, a character outside the vocabulary,
 * a surrogate pair), as random strings, runs of one letter and alternations of two, up to ~700 units.
 */
function words(letters: readonly string[]): fc.Arbitrary<string> {
  const letter = fc.constantFrom(...letters);
  const short = fc.string({ unit: letter, maxLength: 40 });
  return fc.oneof(
    { weight: 4, arbitrary: fc.string({ unit: letter, maxLength: 300 }) },
    { weight: 2, arbitrary: fc.tuple(short, letter, fc.nat(600), short).map(([a, l, n, b]) => a + l.repeat(n) + b) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(short, letter, letter, fc.nat(300), short)
        .map(([a, x, y, n, b]) => a + (x + y).repeat(n) + b),
    },
  );
}

describe('merge queue', () => {
  it('merges a BPE word as the reference does: the lowest-ranked pair first, leftmost on ties', () => {
    for (const [size, seed] of [
      [1024, 1],
      [4096, 7],
    ] as const) {
      const { vocab, rules, rank } = bpeVocabulary(size, seed);
      const scratch = new MergeScratch();
      const priority = (left: string, right: string) => rank.get(`${left} ${right}`);
      fc.assert(
        fc.property(words(['a', 'b', 'e', 'l', 'o', 't', 'Ġ', 'Ċ', 'ʬ']), (word) => {
          const expected = referenceMerge(word, priority, (p, q) => p < q);
          assert.deepEqual(fastMerge(word, rules, scratch, vocab), expected);
        }),
        { numRuns: 150, seed },
      );
    }
  });

  it('merges a SentencePiece word as the reference does: the highest-scoring piece first, leftmost on ties', () => {
    for (const [size, seed] of [
      [1024, 1],
      [4096, 7],
    ] as const) {
      const { vocab, rules } = spmVocabulary(size, seed);
      const scratch = new MergeScratch();
      const priority = (left: string, right: string) => {
        const id = vocab.idOf.get(left + right);
        return id === undefined ? undefined : vocab.scores[id];
      };
      fc.assert(
        fc.property(words(['a', 'b', 'e', 'l', 'o', 't', '▁', 'ʬ', '😀']), (word) => {
          const expected = referenceMerge(word, priority, (p, q) => p > q);
          assert.deepEqual(fastMerge(word, rules, scratch, vocab), expected);
        }),
        { numRuns: 150, seed },
      );
    }
  });

  it('merges a word in steps of any size as it merges it at once; a long word pauses between steps', () => {
    const { rules } = bpeVocabulary(1024, 3);
    const texts = (symbols: MergeSymbols, word: string) => {
      const out: string[] = [];
      for (let at = 0; at >= 0 && at < word.length; at = symbols.next[at]!) out.push(symbols.text(at));
      return out;
    };
    const atOnce = (word: string) => {
      const symbols = new MergeSymbols(word.length);
      symbols.start(word);
      symbols.merge(rules);
      return texts(symbols, word);
    };
    fc.assert(
      fc.property(
        words(['a', 'b', 'e', 'l', 'o', 't', 'Ġ', 'Ċ', 'ʬ']),
        fc.integer({ min: 1, max: 40 }),
        (word, units) => {
          const symbols = new MergeSymbols(word.length);
          symbols.start(word);
          let steps = 1;
          while (!symbols.step(rules, units)) steps++;
          assert.deepEqual(texts(symbols, word), atOnce(word));
          assert.ok(steps >= Math.floor(word.length / units), 'each step does at most its units of work');
        },
      ),
      { numRuns: 100, seed: 3 },
    );
    const long = `${'ab'.repeat(20_000)}${'a'.repeat(30_000)}Ġlot`;
    const steps = new MergeScratch().merged(long, rules);
    let pauses = 0;
    let next = steps.next();
    for (; !next.done; next = steps.next()) pauses++;
    assert.deepEqual(texts(next.value, long), atOnce(long));
    assert.ok(pauses >= 5, `${pauses} pauses`);
  });
});
