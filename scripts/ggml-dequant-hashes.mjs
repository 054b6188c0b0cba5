#!/usr/bin/env node
// Development check, never run by CI: compiles ggml's reference dequantizers (ggml/src/ggml-quants.c of a llama.cpp
// source tree) into a small harness, dequantizes test/fixtures/ggml-dequant.ts's random blocks with them and prints
// the SHA-256 of each type's f32 output, in the form GGML_DEQUANT_SHA256 records. Needs a C compiler and a build of
// kvfence (npx tsc -p tsconfig.json). Usage: node scripts/ggml-dequant-hashes.mjs /path/to/llama.cpp
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGML_TYPE_CODES, QUANT_BLOCKS } from '../dist/src/model/gguf-types.js';
import { randomBlocks } from '../dist/test/fixtures/ggml-dequant.js';

const source = process.argv[2];
if (source === undefined) throw new Error('usage: node scripts/ggml-dequant-hashes.mjs /path/to/llama.cpp');
const ggml = join(source, 'ggml');
const dir = mkdtempSync(join(tmpdir(), 'kvfence-ggml-'));
const FUNCTIONS = {
  q4_0: 'q4_0',
  q4_1: 'q4_1',
  q5_0: 'q5_0',
  q5_1: 'q5_1',
  q8_0: 'q8_0',
  q2_k: 'q2_K',
  q3_k: 'q3_K',
  q4_k: 'q4_K',
  q5_k: 'q5_K',
  q6_k: 'q6_K',
};
const harness = `#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "ggml.h"
#include "ggml-quants.h"
void ggml_abort(const char * file, int line, const char * fmt, ...) { (void)fmt; fprintf(stderr, "abort %s:%d\\n", file, line); exit(1); }
size_t ggml_row_size(enum ggml_type t, int64_t ne) { (void)t; (void)ne; abort(); }
const char * ggml_type_name(enum ggml_type t) { (void)t; return "?"; }
size_t ggml_type_size(enum ggml_type t) { (void)t; abort(); }
int main(int argc, char ** argv) {
  (void)argc;
  int type = atoi(argv[1]); long k = atol(argv[2]);
  FILE * f = fopen(argv[3], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
  void * in = malloc(n); if (fread(in, 1, n, f) != (size_t)n) return 3; fclose(f);
  float * out = malloc(k * sizeof(float));
  switch (type) {
${Object.entries(FUNCTIONS)
  .map(([t, fn]) => `    case ${GGML_TYPE_CODES[t]}: dequantize_row_${fn}(in, out, k); break;`)
  .join('\n')}
    default: return 2;
  }
  f = fopen(argv[4], "wb"); fwrite(out, sizeof(float), k, f); fclose(f);
  return 0;
}
`;
try {
  writeFileSync(join(dir, 'harness.c'), harness);
  const include = [`-I${join(ggml, 'include')}`, `-I${join(ggml, 'src')}`];
  // ggml's own flags for this file: ISO C11, no contraction of a*b+c into fma
  execFileSync('cc', [
    '-O2',
    '-std=c11',
    '-ffp-contract=off',
    ...include,
    join(dir, 'harness.c'),
    join(ggml, 'src', 'ggml-quants.c'),
    '-lm',
    '-o',
    join(dir, 'dq'),
  ]);
  const lines = [];
  for (const dtype of Object.keys(FUNCTIONS)) {
    const blocks = randomBlocks(dtype);
    writeFileSync(join(dir, 'in.bin'), blocks);
    const count = (blocks.length / QUANT_BLOCKS[dtype].bytes) * QUANT_BLOCKS[dtype].size;
    execFileSync(join(dir, 'dq'), [
      String(GGML_TYPE_CODES[dtype]),
      String(count),
      join(dir, 'in.bin'),
      join(dir, 'out.bin'),
    ]);
    lines.push(
      `  ${dtype}: '${createHash('sha256')
        .update(readFileSync(join(dir, 'out.bin')))
        .digest('hex')}',`,
    );
  }
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
