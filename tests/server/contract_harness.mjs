// Shared by the server tests: start `ft serve` on a free port, wait for /health, stop it; small
// assertion and SSE helpers. Usage from a test: node test.mjs FT_BINARY MODEL_DIR.
import { spawn } from 'node:child_process';
import net from 'node:net';
import assert from 'node:assert/strict';

export { assert };

export function args() {
  const [ft, model] = process.argv.slice(2);
  if (!ft || !model) {
    console.error(`usage: node ${process.argv[1]} FT_BINARY MODEL_DIR`);
    process.exit(2);
  }
  return { ft, model };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export { sleep };

// Starts `ft serve --model MODEL --port <free>` plus `extra` flags; resolves once /health is 200.
export async function startServer({ ft, model, extra = [], quiet = true }) {
  const port = await freePort();
  const proc = spawn(ft, ['serve', '--model', model, '--host', '127.0.0.1', '--port', String(port),
                          '--served-model-name', 'qwen3-tiny', ...extra],
                     { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const keep = (d) => { log += d; if (log.length > 1 << 20) log = log.slice(-(1 << 19)); };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  let exited = null;
  proc.on('exit', (code, sig) => { exited = { code, sig }; });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (exited) throw new Error(`ft serve exited early (${JSON.stringify(exited)}):\n${log}`);
    try {
      const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2000) });
      if (r.status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error(`ft serve never became healthy:\n${log}`); }
    await sleep(100);
  }
  return {
    url, port, proc,
    log: () => log,
    alive: () => exited === null,
    async stop() {
      if (exited) return exited;
      proc.kill('SIGTERM');
      for (let i = 0; i < 100 && !exited; ++i) await sleep(50);
      if (!exited) proc.kill('SIGKILL');
      return exited;
    },
  };
}

// POST JSON (or a raw string body); resolves {status, json, text}. Times out after `ms`.
export async function post(url, body, { headers = {}, ms = 30_000 } = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(ms),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text, headers: r.headers };
}

// Parses a whole SSE body into [{event, data}] (data JSON-parsed when possible).
export function parseSse(text) {
  const out = [];
  for (const frame of text.split(/\n\n/)) {
    if (!frame.trim()) continue;
    let event = null;
    const data = [];
    for (const line of frame.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    const raw = data.join('\n');
    let parsed = raw;
    try { parsed = JSON.parse(raw); } catch { /* e.g. [DONE] */ }
    out.push({ event, data: parsed });
  }
  return out;
}

// Runs the named async test cases in order, printing one line each; exits 1 on any failure.
export async function runCases(cases, server) {
  let failed = 0;
  for (const [name, fn] of cases) {
    const t0 = Date.now();
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e.stack || e}`);
    }
  }
  return failed;
}

export async function finish(failed, servers) {
  for (const s of servers) {
    if (!s.alive()) { console.log(`server died:\n${s.log().slice(-4000)}`); failed++; }
    await s.stop();
  }
  if (failed) {
    console.log(`${failed} failure(s)`);
    for (const s of servers) console.log(`--- server log tail ---\n${s.log().slice(-3000)}`);
  }
  process.exit(failed ? 1 : 0);
}
