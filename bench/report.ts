/** The benchmark table: medians of every sample, kvfence against llama.cpp, with the targets the project set. */

import { median } from '../src/util/median.js';
import type { EngineSamples, KvfenceSamples } from './bench-types.js';

/** llama.cpp's llama-bench on the same file: pp at an empty context, tg after a context of the prompt length. */
export interface LlamaBenchSamples {
  prefillTokensPerSecond: number[];
  decodeTokensPerSecond: number[];
  /** the llama.cpp build it reported: commit and build number */
  build: string;
}

export interface ModelResult {
  model: string;
  kvfence: KvfenceSamples;
  llama: EngineSamples | undefined;
  /** present when run.ts was given --llama-bench */
  llamaBench?: LlamaBenchSamples | undefined;
}

const fixed = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : '-');

function row(cells: string[], widths: number[]): string {
  return cells.map((cell, i) => (i <= 1 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
}

export function renderTable(results: readonly ModelResult[], threadCount: number): string {
  const widths = [10, 34, 10, 10, 7, 8];
  const lines = [
    `kvfence (native) vs llama.cpp, ${threadCount} threads each; medians; ratio = kvfence / llama.cpp`,
    row(['model', 'measure', 'kvfence', 'llama.cpp', 'ratio', 'target'], widths),
  ];
  const builds = [...new Set(results.flatMap((r) => (r.llamaBench !== undefined ? [r.llamaBench.build] : [])))];
  if (builds.length > 0) lines.splice(1, 0, `llama-bench: llama.cpp build ${builds.join(', ')}`);
  for (const r of results) {
    const k = r.kvfence;
    const l = r.llama;
    const line = (measure: string, mine: number, theirs: number | undefined, target: string) => {
      const ratio = theirs === undefined ? Number.NaN : mine / theirs;
      lines.push(row([r.model, measure, fixed(mine), fixed(theirs ?? Number.NaN), fixed(ratio, 2), target], widths));
    };
    line('prefill tokens/s', median(k.prefillTokensPerSecond), l && median(l.prefillTokensPerSecond), '>= 0.8');
    line('decode tokens/s (1 stream)', median(k.decodeTokensPerSecond), l && median(l.decodeTokensPerSecond), '>= 1.0');
    const b = r.llamaBench;
    if (b !== undefined) {
      // the same two measures against llama.cpp's own binary (its figures in the llama.cpp column)
      line(
        'prefill tokens/s vs llama-bench',
        median(k.prefillTokensPerSecond),
        median(b.prefillTokensPerSecond),
        '>= 1.0',
      );
      line(
        'decode tokens/s vs llama-bench',
        median(k.decodeTokensPerSecond),
        median(b.decodeTokensPerSecond),
        '>= 1.0',
      );
    }
    const llamaSingle = l && median(l.decodeTokensPerSecond);
    for (const [streams, samples] of Object.entries(k.aggregateTokensPerSecond)) {
      const mine = median(samples);
      line(`aggregate decode, ${streams} streams`, mine, l && median(l.aggregateTokensPerSecond[streams] ?? []), '');
      if (streams === '16' && llamaSingle !== undefined) {
        lines.push(
          row([r.model, '  16 streams / llama 1 stream', '', '', fixed(mine / llamaSingle, 2), '>= 2.0'], widths),
        );
      }
    }
    const x = k.extras;
    if (x !== undefined) {
      // paired: each checked lifecycle against the unchecked one run right beside it, so drift in load cancels
      const overhead = median(x.checkedSeconds.map((t, i) => t / x.uncheckedSeconds[i]!)) - 1;
      lines.push(
        row([r.model, 'isolation overhead, A/B runs', `${fixed(100 * overhead, 2)}%`, '', '', '<= 3%'], widths),
      );
      // the pool's own work per lifecycle against an unchecked lifecycle's time: free of run-to-run noise
      const poolWork = median(x.poolOpsCheckedSeconds) - median(x.poolOpsUncheckedSeconds);
      const direct = poolWork / median(x.uncheckedSeconds);
      lines.push(
        row([r.model, 'isolation overhead, pool work', `${fixed(100 * direct, 3)}%`, '', '', '<= 3%'], widths),
      );
    }
    // each decode against the triad measured beside it (paired: the machine's bandwidth moves within a run)
    const decodeGbs = k.decodeTokensPerSecond.map((tps) => (k.weightBytesPerToken * tps) / 1e9);
    const share = median(decodeGbs.map((gbs, i) => gbs / k.triadBesideDecode[i]!));
    lines.push(
      row(
        [
          r.model,
          'triad GB/s; decode weight GB/s',
          fixed(median(k.triadBesideDecode)),
          fixed(median(decodeGbs)),
          fixed(share, 2),
          '>= 0.8',
        ],
        widths,
      ),
    );
  }
  return lines.join('\n');
}
