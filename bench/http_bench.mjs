// HTTP serving benchmark: TTFT and decode tokens/s through streaming chat completions (SSE) at
// several concurrencies, beside the engine's own speed for the same model (`ft run` and the
// server's /v1/stats), with the HTTP/JSON/SSE overhead per token at concurrency 1.
// Usage: node bench/http_bench.mjs FT_BINARY MODEL_DIR [--tokens 128] [--reps 3]
//        [--concurrency 1,4,16] [--threads N] [--temperature T] [--api openai|anthropic]
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';

const argv = process.argv.slice(2);
const flag = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : def;
};
const [FT, MODEL] = argv;
if (!FT || !MODEL) {
  console.error('usage: node bench/http_bench.mjs FT_BINARY MODEL_DIR [--tokens N] [--reps N] [--concurrency 1,4,16]');
  process.exit(2);
}
const TOKENS = Number(flag('tokens', 128));
const REPS = Number(flag('reps', 3));
const LEVELS = flag('concurrency', '1,4,16').split(',').map(Number);
const THREADS = flag('threads', '0');
const TEMPERATURE = Number(flag('temperature', 1));
const PROMPT = 'Write a long story about a lighthouse keeper and the sea.';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// The engine alone, same sampling: `ft run --chat` prints "prefill N tokens X tok/s, decode M tokens Y tok/s".
function engineSpeed() {
  const r = spawnSync(FT, ['run', '--model', MODEL, '--chat', PROMPT, '-n', String(TOKENS), '--ignore-eos',
                           '--temperature', String(TEMPERATURE), '--seed', '1', '--threads', THREADS], { encoding: 'utf8' });
  const m = /prefill (\d+) tokens ([\d.]+) tok\/s, decode (\d+) tokens ([\d.]+) tok\/s/.exec(r.stderr ?? '');
  return m ? { prefillTokens: +m[1], prefillTps: +m[2], decodeTokens: +m[3], decodeTps: +m[4] } : null;
}

// One streamed request: resolves {ttft, tokens, total, tps} (ms, count, ms, tok/s).
// Sampled at --temperature (default 1) with a seed per request. Note a random-weight model's
// output is mostly blank lines, which the reasoning parser holds back (<= 16 bytes before a
// possible <think>): the client TTFT then includes those tokens; the engine's TTFT does not.
let seed = 0;
async function streamOnce(url, api) {
  const t0 = performance.now();
  const openai = api === 'openai';
  const body = openai
    ? { model: 'bench', messages: [{ role: 'user', content: PROMPT }], max_tokens: TOKENS, temperature: TEMPERATURE,
        seed: ++seed, stream: true, stream_options: { include_usage: true }, ignore_eos: true }
    : { model: 'bench', messages: [{ role: 'user', content: PROMPT }], max_tokens: TOKENS, temperature: TEMPERATURE, stream: true };
  const r = await fetch(url + (openai ? '/v1/chat/completions' : '/v1/messages'), {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', first = 0, chunks = 0, usageTokens = 0;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('');
      if (!data || data === '[DONE]') continue;
      const j = JSON.parse(data);
      const hasText = openai
        ? (j.choices?.[0]?.delta?.content || j.choices?.[0]?.delta?.reasoning_content || j.choices?.[0]?.delta?.tool_calls)
        : j.type === 'content_block_delta';
      if (hasText) { chunks++; if (!first) first = performance.now(); }
      if (openai && j.usage) usageTokens = j.usage.completion_tokens;
      if (!openai && j.type === 'message_delta') usageTokens = j.usage.output_tokens;
    }
  }
  const end = performance.now();
  const tokens = usageTokens || chunks;
  // Per-stream speed over the whole request: the first-delta time is shifted by held-back text.
  return { ttft: first - t0, tokens, total: end - t0, tps: tokens / ((end - t0) / 1000) };
}

const mean = (a) => a.reduce((s, x) => s + x, 0) / a.length;
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };

async function main() {
  const engine = engineSpeed();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const maxRunning = String(Math.max(...LEVELS));
  const proc = spawn(FT, ['serve', '--model', MODEL, '--port', String(port), '--threads', THREADS,
                          '--max-running-requests', maxRunning], { stdio: 'ignore' });
  try {
    for (let t0 = Date.now(); ; await sleep(100)) {
      try { if ((await fetch(`${url}/health`)).status === 200) break; } catch { /* starting */ }
      if (Date.now() - t0 > 120_000) throw new Error('ft serve did not start');
    }
    let api = flag('api', 'openai');
    if (api === 'openai' && (await fetch(`${url}/v1/chat/completions`, { method: 'POST', body: '{}' })).status === 404)
      api = 'anthropic';
    await streamOnce(url, api);  // warm up
    const rows = [];
    let statsTps = 0;
    for (const c of LEVELS) {
      const runs = [];
      const t0 = performance.now();
      for (let rep = 0; rep < REPS; ++rep) runs.push(...await Promise.all(Array.from({ length: c }, () => streamOnce(url, api))));
      const wall = (performance.now() - t0) / 1000;
      const total = runs.reduce((s, r) => s + r.tokens, 0);
      if (c === 1) statsTps = (await (await fetch(`${url}/v1/stats`)).json()).decode_tokens_per_s;
      // The engine's own view of the same requests (newest first): TTFT and time in the engine.
      const recs = (await (await fetch(`${url}/v1/requests`)).json()).data.slice(0, runs.length);
      rows.push({ c, ttft: median(runs.map((r) => r.ttft)), engineTtft: 1000 * median(recs.map((r) => r.ttft_s)),
                  tps: median(runs.map((r) => r.tps)), agg: total / wall, tokens: median(runs.map((r) => r.tokens)),
                  client: mean(runs.map((r) => r.total)), engine: 1000 * mean(recs.map((r) => r.total_s)) });
    }
    console.log(`\nmodel ${MODEL}, ${TOKENS} new tokens per request, ${REPS} rounds per level, API ${api}` +
                `${api === 'openai' ? ' (/v1/chat/completions)' : ' (/v1/messages)'}, temperature ${TEMPERATURE}, threads ${THREADS}\n`);
    console.log('| concurrency | TTFT p50 HTTP (ms) | TTFT p50 engine (ms) | tok/s per stream (tokens / latency, p50) | aggregate tok/s | request mean HTTP / engine (ms) |');
    console.log('|---:|---:|---:|---:|---:|---:|');
    for (const r of rows)
      console.log(`| ${r.c} | ${r.ttft.toFixed(1)} | ${r.engineTtft.toFixed(1)} | ${r.tps.toFixed(1)} | ${r.agg.toFixed(1)} | ` +
                  `${r.client.toFixed(0)} / ${r.engine.toFixed(0)} |`);
    const one = rows.find((r) => r.c === 1);
    console.log('\n| speed at concurrency 1 | tok/s | ms/token |');
    console.log('|---|---:|---:|');
    if (engine) console.log(`| \`ft run\` (engine, no server), ${engine.decodeTokens} tokens | ${engine.decodeTps.toFixed(1)} | ${(1000 / engine.decodeTps).toFixed(3)} |`);
    console.log(`| server /v1/stats decode_tokens_per_s (forward only, no sampling) | ${statsTps.toFixed(1)} | ${(1000 / statsTps).toFixed(3)} |`);
    if (one) {
      console.log(`| HTTP stream (client side, incl. prefill), p50 | ${one.tps.toFixed(1)} | ${(1000 / one.tps).toFixed(3)} |`);
      const over = one.client - one.engine;
      console.log(`\nHTTP/JSON/SSE overhead at concurrency 1: ${over.toFixed(1)} ms per request ` +
                  `(client latency ${one.client.toFixed(0)} ms vs ${one.engine.toFixed(0)} ms in the engine) = ` +
                  `${(over / one.tokens).toFixed(3)} ms/token, ${(100 * over / one.engine).toFixed(1)}% of the request; ` +
                  `TTFT ${one.ttft.toFixed(1)} ms at the client vs ${one.engineTtft.toFixed(1)} ms in the engine`);
    }
  } finally {
    proc.kill('SIGTERM');
  }
}

await main();
