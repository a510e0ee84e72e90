// Concurrency: parallel streams (OpenAI and Anthropic SDKs) each equal to the same request run
// alone; a client that disconnects frees its slot; a full queue answers 429 with error JSON.
// Usage: node concurrency_e2e.mjs FT_BINARY MODEL_DIR
import { args, assert, startServer, post, sleep, runCases, finish } from './contract_harness.mjs';

const { default: Anthropic } = await import(
  new URL('../js/node_modules/@anthropic-ai/sdk/index.mjs', import.meta.url));
const { default: OpenAI } = await import(new URL('../js/node_modules/openai/index.mjs', import.meta.url));

const MODEL = 'qwen3-tiny';
const N = 8;
const a = args();
const server = await startServer({ ...a, extra: ['--max-running-requests', String(N), '--threads', '2'] });
const anthropic = new Anthropic({ apiKey: 'x', baseURL: server.url, maxRetries: 0, timeout: 120_000 });
const openai = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120_000 });
const hasOpenAI = (await post(`${server.url}/v1/chat/completions`, {})).status !== 404;

const PROMPTS = ['Tell me about volcanoes.', 'Count to ten.', 'What is 2+2?', 'Name three colours.',
                 'Translate "hello" to French.', 'Write a limerick.', 'Why is the sky blue?', 'List prime numbers.'];

// One client's request, run whole or streamed; returns everything the model said, in order.
function job(i, maxTokens) {
  const useOpenAI = hasOpenAI && i % 2 === 1;
  const messages = [{ role: 'user', content: PROMPTS[i % PROMPTS.length] }];
  if (useOpenAI) {
    const body = { model: MODEL, messages, max_tokens: maxTokens, temperature: 0 };
    return {
      dialect: 'openai',
      async whole() {
        const r = await openai.chat.completions.create(body);
        const m = r.choices[0].message;
        return (m.reasoning_content ?? '') + (m.content ?? '') + JSON.stringify(m.tool_calls ?? []);
      },
      async stream() {
        const s = await openai.chat.completions.create({ ...body, stream: true });
        let reasoning = '', content = '';
        const calls = [];
        for await (const c of s) {
          const d = c.choices[0]?.delta ?? {};
          reasoning += d.reasoning_content ?? '';
          content += d.content ?? '';
          for (const tc of d.tool_calls ?? []) {
            calls[tc.index] ??= { id: tc.id, type: 'function', function: { name: '', arguments: '' } };
            calls[tc.index].function.name += tc.function?.name ?? '';
            calls[tc.index].function.arguments += tc.function?.arguments ?? '';
          }
        }
        return reasoning + content + JSON.stringify(calls.length ? calls : []);
      },
    };
  }
  const body = { model: MODEL, messages, max_tokens: maxTokens, temperature: 0 };
  const flat = (msg) => msg.content.map((b) => b.text ?? b.thinking ?? JSON.stringify(b.input)).join('');
  return {
    dialect: 'anthropic',
    whole: async () => flat(await anthropic.messages.create(body)),
    stream: async () => flat(await anthropic.messages.stream(body).finalMessage()),
  };
}

async function stats(url = server.url) {
  return (await fetch(`${url}/v1/stats`)).json();
}

const cases = [
  [`${N} parallel streams equal their solo runs (${hasOpenAI ? 'OpenAI + Anthropic' : 'Anthropic only'})`, async () => {
    const jobs = Array.from({ length: N }, (_, i) => job(i, 40 + 8 * i));
    const solo = [];
    for (const j of jobs) solo.push(await j.whole());
    const t0 = Date.now();
    const together = await Promise.all(jobs.map((j) => j.stream()));
    for (let i = 0; i < N; ++i)
      assert.equal(together[i], solo[i], `client ${i} (${jobs[i].dialect}) differs from its solo run`);
    assert.equal(new Set(solo).size, N, 'different prompts should give different outputs');
    console.log(`     ${N} streams in ${Date.now() - t0} ms`);
  }],
  ['a disconnected stream frees its slot', async () => {
    const ac = new AbortController();
    const r = await fetch(`${server.url}/v1/messages`, {
      method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 3500, stream: true, temperature: 0,
                             messages: [{ role: 'user', content: 'Go on forever.' }] }) });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    let chunks = 0;
    while (chunks < 5) {
      const { done } = await reader.read();
      assert.ok(!done, 'the stream ended before the client gave up');
      chunks++;
    }
    assert.equal((await stats()).running, 1);
    const before = (await stats()).requests_cancelled;
    ac.abort();
    const t0 = Date.now();
    let s;
    do {
      await sleep(20);
      s = await stats();
    } while ((s.running !== 0 || s.requests_cancelled === before) && Date.now() - t0 < 1000);
    assert.equal(s.running, 0, `still running ${Date.now() - t0} ms after the disconnect`);
    assert.equal(s.requests_cancelled, before + 1);
    const msg = await anthropic.messages.create({ model: MODEL, max_tokens: 4,
                                                  messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(msg.type, 'message');
  }],
  ['a full queue answers 429 with error JSON', async () => {
    const small = await startServer({ ...a, extra: ['--max-running-requests', '1', '--max-queue', '1', '--threads', '2'] });
    const acs = [];
    try {
      const long = (dialect) => {
        const ac = new AbortController();
        acs.push(ac);
        const path = dialect === 'openai' ? '/v1/chat/completions' : '/v1/messages';
        return fetch(small.url + path, {
          method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, max_tokens: 3500, stream: true, temperature: 0,
                                 messages: [{ role: 'user', content: 'Go on forever.' }] }) })
          .then(async (r) => ({ status: r.status, type: r.headers.get('content-type'), dialect,
                                stream: r.status === 200 ? r.body : null,
                                body: r.status === 200 ? null : await r.json() }));
      };
      const first = long('anthropic');
      for (let t0 = Date.now(); (await stats(small.url)).running !== 1 && Date.now() - t0 < 5000;) await sleep(20);
      const results = await Promise.all([first, long('anthropic'), long(hasOpenAI ? 'openai' : 'anthropic')]);
      const refused = results.filter((r) => r.status === 429);
      assert.equal(refused.length, 1, JSON.stringify(results));
      const ok = results.filter((r) => r.status === 200);
      assert.equal(ok.length, 2, JSON.stringify(results));
      const e = refused[0].body;
      if (e.type === 'error') assert.equal(e.error.type, 'rate_limit_error');  // Anthropic shape
      else assert.equal(typeof e.error.message, 'string');                     // OpenAI shape
      assert.equal(results.indexOf(refused[0]) > 0, true, 'the running request is never refused');
      // The queued Anthropic stream gets message_start, then pings while it waits for a slot.
      const queued = results.slice(1).find((r) => r.status === 200 && r.dialect === 'anthropic');
      if (queued) {
        const reader = queued.stream.getReader();
        const dec = new TextDecoder();
        let text = '';
        const t0 = Date.now();
        while (!text.includes('event: ping') && Date.now() - t0 < 8000) {
          const { value, done } = await reader.read();
          if (done) break;
          text += dec.decode(value, { stream: true });
        }
        assert.match(text, /^event: message_start\n/);
        assert.match(text, /event: ping\ndata: {"type":"ping"}/, text);
        assert.ok(!text.includes('content_block'), 'a queued request has no content yet');
      }
    } finally {
      for (const ac of acs) ac.abort();
      await small.stop();
    }
  }],
];

const failed = await runCases(cases, server);
await finish(failed, [server]);
