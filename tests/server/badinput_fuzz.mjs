// Seeded bad-input fuzzer for every POST route: malformed, huge, deeply nested, mistyped and
// out-of-range bodies. Every answer must be 4xx with an error JSON body (a mutation that
// happens to stay valid may answer 200), never 5xx, a reset connection or a hang; the server
// must still be healthy at the end. Usage: node badinput_fuzz.mjs FT_BINARY MODEL_DIR [SEED] [N]
import { args, assert, startServer, finish } from './contract_harness.mjs';

const SEED = Number(process.argv[4] ?? 20240611);
const N = Number(process.argv[5] ?? 300);
const server = await startServer({ ...args(), extra: ['--ctx-size', '128', '--threads', '2'] });

// mulberry32: small, seeded, reproducible.
let state = SEED >>> 0;
const rand = () => {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];

const MSGS = [{ role: 'user', content: 'hi' }];
const ROUTES = {
  '/v1/chat/completions': { model: 'm', messages: MSGS, max_tokens: 2 },
  '/v1/completions': { model: 'm', prompt: 'hi', max_tokens: 2 },
  '/v1/responses': { model: 'm', input: 'hi', max_output_tokens: 2 },
  '/v1/messages': { model: 'm', max_tokens: 2, messages: MSGS },
  '/v1/messages/count_tokens': { model: 'm', messages: MSGS },
  '/generate': { text: 'hi', sampling_params: { max_new_tokens: 2 } },
};

// Raw number spellings JSON.stringify cannot produce, spliced in through marker strings.
const RAW = ['1e400', '-1e400', '1e-400', '123456789012345678901234567890', '-0', '18446744073709551616',
             '9223372036854775808', '-9223372036854775809', '0.1e1', '1E2'];
const rawMarker = (i) => `__RAW_${i}__`;
const splice = (text) => text.replace(/"__RAW_(\d+)__"/g, (_, i) => RAW[Number(i)]);

function randomString() {
  switch (int(6)) {
    case 0: return '';
    case 1: return 'x'.repeat(int(5000));
    case 2: return String.fromCodePoint(...Array.from({ length: 1 + int(20) }, () => int(0x10ffff + 1))
                                         .map((c) => (c >= 0xd800 && c <= 0xdfff ? 0x41 : c)));
    case 3: return pick(['user', 'assistant', 'system', 'tool', 'developer', 'robot', 'text', 'image',
                         'tool_use', 'tool_result', 'function', 'auto', 'any', 'none', 'required']);
    case 4: return '<|im_start|>system\n<|im_end|><think></think><tool_call>{"name":';
    default: return `0.${int(1e9)}`;
  }
}
function randomValue(depth = 0) {
  const k = int(depth > 3 ? 6 : 9);
  switch (k) {
    case 0: return null;
    case 1: return rand() < 0.5;
    case 2: return pick([-1, 0, 1, -2147483649, 2 ** 31, 2 ** 53, 1.5, -0.5, 1e300, 65536, 4097]);
    case 3: return rawMarker(int(RAW.length));
    case 4: return randomString();
    case 5: return pick([[], {}, [null], { '': '' }]);
    case 6: return Array.from({ length: int(4) }, () => randomValue(depth + 1));
    case 7: return Object.fromEntries(Array.from({ length: int(4) },
                                                 () => [randomString().slice(0, 20), randomValue(depth + 1)]));
    default: return { type: randomString(), text: randomValue(depth + 1), content: randomValue(depth + 1) };
  }
}

// Every path (array of keys) inside a value.
function paths(v, prefix = [], out = []) {
  if (v && typeof v === 'object') {
    for (const k of Object.keys(v)) {
      out.push([...prefix, k]);
      paths(v[k], [...prefix, k], out);
    }
  }
  return out;
}
function setPath(obj, path, value) {
  let o = obj;
  for (const k of path.slice(0, -1)) o = o[k];
  if (value === undefined) delete o[path.at(-1)];
  else o[path.at(-1)] = value;
}

function mutate(template) {
  const body = structuredClone(template);
  const n = 1 + int(3);
  for (let i = 0; i < n; ++i) {
    const ps = paths(body);
    switch (int(5)) {
      case 0: case 1: setPath(body, pick(ps), randomValue()); break;
      case 2: setPath(body, pick(ps), undefined); break;
      case 3: body[pick(['frobnicate', 'n', 'logit_bias', 'best_of', 'stream', 'tools', 'tool_choice',
                         'response_format', 'stop', 'stop_sequences', 'thinking', 'system', 'seed'])] = randomValue(); break;
      default: setPath(body, pick(ps.filter((p) => /max|temperature|top|tokens/.test(p.at(-1))).concat([ps[0]])),
                       pick([-1, 0, -100, 1e9, rawMarker(0), rawMarker(1), rawMarker(6), 'ten', [], {}, null, 1.5]));
    }
  }
  return splice(JSON.stringify(body));
}

const LOREM = 'lorem ipsum dolor sit amet ';
function rawBody(route, template) {
  switch (int(12)) {
    case 0: return '';
    case 1: return JSON.stringify(template).slice(0, int(JSON.stringify(template).length));
    case 2: return pick(['null', '[]', '123', '"str"', 'true', '{', '}', '{"a":}', '{"a" 1}', "{'a': 1}", 'NaN']);
    case 3: return Buffer.concat([Buffer.from('{"model": "m", "messages": [{"role": "user", "content": "'),
                                  Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82, 0xed, 0xa0, 0x80]),
                                  Buffer.from('"}], "max_tokens": 2, "text": "\xff", "prompt": "a", "input": "b"}')]);
    case 4: { const d = 10_000 + int(200_000); return '['.repeat(d) + ']'.repeat(d); }
    case 5: { const d = 1000 + int(50_000);
              return JSON.stringify(template).replace(/"hi"/, '['.repeat(d) + ']'.repeat(d)); }
    case 6: { const d = 200 + int(2000);
              return `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"metadata":${'{"a":'.repeat(d)}1${'}'.repeat(d)}}`; }
    case 7: return JSON.stringify({ ...template, messages: [{ role: 'user', content: LOREM.repeat(120_000) }],
                                    prompt: LOREM.repeat(120_000), input: LOREM.repeat(120_000), text: LOREM.repeat(120_000) });
    case 8: return JSON.stringify({ ...template, tools: Array.from({ length: 20_000 }, (_, i) => ({ name: `t${i}` })) });
    case 9: return Buffer.concat([Buffer.from('{"model":"m","messages":[{"role":"user","content":"a\u0000b'),
                                  Buffer.from([0x00]), Buffer.from('"}],"max_tokens":2}')]);
    case 10: return JSON.stringify(template) + 'garbage';
    default: return '\ufeff' + JSON.stringify(template);
  }
}

async function send(route, body) {
  const ms = body.length > 1e6 ? 120_000 : 30_000;
  const t0 = Date.now();
  try {
    const r = await fetch(server.url + route, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body,
      signal: AbortSignal.timeout(ms) });
    const text = await r.text();
    return { status: r.status, text, ms: Date.now() - t0, type: r.headers.get('content-type') || '' };
  } catch (e) {
    return { status: -1, text: String(e.cause ?? e), ms: Date.now() - t0, type: '' };
  }
}

const problems = [];
const tally = {};
const absent = new Set();
for (const route of Object.keys(ROUTES)) {  // routes another adapter has not registered yet
  const r = await send(route, '{}');
  if (r.status === 404 && !r.text) absent.add(route);
}
for (let i = 0; i < N; ++i) {
  const route = pick(Object.keys(ROUTES).filter((r) => !absent.has(r)));
  const body = rand() < 0.35 ? rawBody(route, ROUTES[route]) : mutate(ROUTES[route]);
  const r = await send(route, body);
  const key = `${route} ${r.status}`;
  tally[key] = (tally[key] ?? 0) + 1;
  const show = () => `#${i} ${route} -> ${r.status} in ${r.ms} ms: body ${JSON.stringify(String(body).slice(0, 300))} ` +
                     `answer ${JSON.stringify(r.text.slice(0, 300))}`;
  if (r.status >= 400 && r.status < 500) {
    let j = null;
    try { j = JSON.parse(r.text); } catch { /* checked below */ }
    const msg = j?.error?.message;
    if (typeof msg !== 'string' || !msg) problems.push(`no error JSON: ${show()}`);
  } else if (r.status >= 200 && r.status < 300) {
    if (!/json|event-stream/.test(r.type)) problems.push(`2xx without JSON/SSE: ${show()}`);
  } else {
    problems.push(`bad status: ${show()}`);
  }
  if (!server.alive()) { problems.push(`server died: ${show()}`); break; }
}

console.log(`seed ${SEED}, ${N} bodies; routes not registered (skipped): ${[...absent].join(', ') || 'none'}`);
for (const [k, v] of Object.entries(tally).sort()) console.log(`  ${k}: ${v}`);
let failed = 0;
try {
  const h = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) });
  assert.equal(h.status, 200);
  const ok = await send('/v1/messages', JSON.stringify(ROUTES['/v1/messages']));
  assert.equal(ok.status, 200, ok.text);
} catch (e) {
  problems.push(`not healthy after the fuzz: ${e}`);
}
for (const p of problems.slice(0, 30)) console.log(`FAIL ${p}`);
failed += problems.length;
if (!failed) console.log('ok   every answer was 4xx with an error body or a valid 2xx; still healthy');
await finish(failed, [server]);
