// Anthropic Messages API end to end: the official SDK and raw fetch against `ft serve` on the
// tiny random-weight Qwen3 test model. Text is gibberish; the protocol must be exact.
// Usage: node anthropic_e2e.mjs FT_BINARY MODEL_DIR
import { args, assert, startServer, post, parseSse, runCases, finish } from './contract_harness.mjs';

const { default: Anthropic } = await import(
  new URL('../js/node_modules/@anthropic-ai/sdk/index.mjs', import.meta.url));

const KEY = 'sk-test-anthropic';
const MODEL = 'qwen3-tiny';
const server = await startServer({ ...args(), extra: ['--api-key', KEY, '--threads', '2'] });
const client = new Anthropic({ apiKey: KEY, baseURL: server.url, maxRetries: 0, timeout: 60_000 });
const H = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01' };

const textOf = (msg) => msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const promptTokens = (u) =>
  u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
const base = (over = {}) => ({
  model: MODEL, max_tokens: 12, temperature: 0,
  messages: [{ role: 'user', content: 'Write a haiku about the sea.' }], ...over,
});
const countTokens = async (body) => {
  const r = await post(`${server.url}/v1/messages/count_tokens`, body, { headers: H });
  assert.equal(r.status, 200, r.text);
  assert.ok(Number.isInteger(r.json.input_tokens) && r.json.input_tokens > 0, r.text);
  return r.json.input_tokens;
};

// The SSE contract: message_start first; blocks open, take deltas and close in index order,
// never nested; message_delta then message_stop last; pings only between events.
function checkEventOrder(events) {
  assert.ok(events.length >= 3, 'too few events');
  for (const e of events) assert.equal(e.event, e.data.type, `event name vs data.type: ${JSON.stringify(e)}`);
  assert.equal(events[0].event, 'message_start');
  const m = events[0].data.message;
  assert.match(m.id, /^msg_/);
  assert.equal(m.role, 'assistant');
  assert.deepEqual(m.content, []);
  assert.equal(m.stop_reason, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.equal(events.at(-1).event, 'message_stop');
  assert.equal(events.at(-2).event, 'message_delta');
  let open = null;
  let next = 0;
  const deltaFor = { text: ['text_delta'], thinking: ['thinking_delta', 'signature_delta'],
                     tool_use: ['input_json_delta'] };
  for (const e of events.slice(1, -2)) {
    const d = e.data;
    if (e.event === 'ping') continue;
    if (e.event === 'content_block_start') {
      assert.equal(open, null, 'a block started while another is open');
      assert.equal(d.index, next, 'block indices must count up from 0');
      open = d.content_block;
      assert.ok(['text', 'thinking', 'tool_use'].includes(open.type), open.type);
    } else if (e.event === 'content_block_delta') {
      assert.ok(open, 'delta outside a block');
      assert.equal(d.index, next);
      assert.ok(deltaFor[open.type].includes(d.delta.type), `${d.delta.type} in a ${open.type} block`);
    } else if (e.event === 'content_block_stop') {
      assert.ok(open, 'stop without a block');
      assert.equal(d.index, next);
      open = null;
      next++;
    } else {
      assert.fail(`unexpected event ${e.event} inside the message`);
    }
  }
  assert.equal(open, null, 'a block was left open');
  const md = events.at(-2).data;
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(md.delta.stop_reason));
  assert.ok(Number.isInteger(md.usage.output_tokens));
  return md;
}

function checkError(r, status, type = 'invalid_request_error') {
  assert.equal(r.status, status, r.text);
  assert.equal(r.json?.type, 'error', r.text);
  assert.equal(r.json.error.type, type, r.text);
  assert.equal(typeof r.json.error.message, 'string');
}

const TOOLS = [{
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];

const cases = [
  ['non-stream message (SDK)', async () => {
    const msg = await client.messages.create(base());
    assert.match(msg.id, /^msg_/);
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.equal(msg.model, MODEL);
    assert.ok(Array.isArray(msg.content));
    assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), msg.stop_reason);
    assert.equal(msg.stop_sequence, null);
    assert.ok(msg.usage.input_tokens > 0);
    assert.ok(msg.usage.output_tokens >= 1 && msg.usage.output_tokens <= 12);
    assert.equal(msg.usage.cache_read_input_tokens, 0);
    assert.equal(msg.usage.cache_creation_input_tokens, 0);
  }],
  ['stream (SDK finalMessage) equals non-stream at temperature 0', async () => {
    const whole = await client.messages.create(base({ max_tokens: 24 }));
    const stream = client.messages.stream(base({ max_tokens: 24 }));
    let deltas = '';
    stream.on('text', (t) => { deltas += t; });
    const fin = await stream.finalMessage();
    assert.equal(textOf(fin), textOf(whole));
    assert.equal(deltas, textOf(whole));
    assert.equal(fin.stop_reason, whole.stop_reason);
    assert.equal(fin.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(fin.usage.input_tokens, whole.usage.input_tokens);
  }],
  ['raw SSE event order', async () => {
    const r = await post(`${server.url}/v1/messages`, base({ stream: true, max_tokens: 16 }), { headers: H });
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers.get('content-type'), /text\/event-stream/);
    const events = parseSse(r.text);
    const md = checkEventOrder(events);
    const deltas = events.filter((e) => e.event === 'content_block_delta').length;
    assert.ok(md.usage.output_tokens >= 1 && md.usage.output_tokens <= 16);
    assert.ok(deltas >= 1 || md.delta.stop_reason === 'end_turn');
    assert.ok(!r.text.includes('[DONE]'), 'Anthropic streams have no [DONE]');
  }],
  ['system string and blocks; billing header dropped', async () => {
    const msgs = [{ role: 'user', content: 'hi' }];
    const plain = await countTokens({ model: MODEL, messages: msgs });
    const sys = 'You are a helpful assistant.';
    const withString = await countTokens({ model: MODEL, messages: msgs, system: sys });
    const withBlocks = await countTokens({ model: MODEL, messages: msgs, system: [{ type: 'text', text: sys }] });
    const billing = { type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.37; cch=${Math.random()};` };
    const withBilling = await countTokens({
      model: MODEL, messages: msgs, system: [billing, { type: 'text', text: sys, cache_control: { type: 'ephemeral' } }] });
    assert.ok(withString > plain);
    assert.equal(withBlocks, withString);
    assert.equal(withBilling, withString, 'the billing header block must not reach the prompt');
    const onlyBilling = await countTokens({ model: MODEL, messages: msgs, system: [billing] });
    assert.equal(onlyBilling, plain);
    const r = await client.messages.create(base({ system: [billing, { type: 'text', text: sys }], max_tokens: 4 }));
    assert.equal(promptTokens(r.usage), withString + (await countTokens(base())) - plain);
  }],
  ['count_tokens (SDK) matches usage.input_tokens', async () => {
    const body = base();
    const { input_tokens } = await client.messages.countTokens({ model: body.model, messages: body.messages });
    const msg = await client.messages.create(body);
    // Anthropic usage splits the prompt: input_tokens (computed) + cache_read_input_tokens
    // (served from the prefix cache) + cache_creation_input_tokens; count_tokens gives the sum.
    assert.equal(promptTokens(msg.usage), input_tokens);
  }],
  ['thinking config toggles the template', async () => {
    const msgs = [{ role: 'user', content: 'think about it' }];
    const on = await countTokens({ model: MODEL, messages: msgs, thinking: { type: 'enabled', budget_tokens: 1024 } });
    const off = await countTokens({ model: MODEL, messages: msgs, thinking: { type: 'disabled' } });
    assert.ok(off > on, `disabled adds the empty think block (${off} vs ${on})`);
  }],
  ['max_tokens -> stop_reason max_tokens', async () => {
    const msg = await client.messages.create(base({ max_tokens: 3 }));
    assert.equal(msg.stop_reason, 'max_tokens');
    assert.equal(msg.usage.output_tokens, 3);
  }],
  ['stop_sequences cut the text and are reported', async () => {
    const full = textOf(await client.messages.create(base({ max_tokens: 32 })));
    assert.ok(full.length >= 8, `need some text to cut: ${JSON.stringify(full)}`);
    const stop = full.slice(4, 7);
    for (const stream of [false, true]) {
      let msg;
      if (stream) msg = await client.messages.stream(base({ max_tokens: 32, stop_sequences: [stop] })).finalMessage();
      else msg = await client.messages.create(base({ max_tokens: 32, stop_sequences: [stop] }));
      assert.equal(msg.stop_reason, 'stop_sequence', JSON.stringify(msg));
      assert.equal(msg.stop_sequence, stop);
      assert.equal(textOf(msg), full.slice(0, full.indexOf(stop)));
    }
  }],
  ['tool_use / tool_result history is accepted', async () => {
    const history = [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [
        { type: 'thinking', thinking: 'I should call the tool.', signature: '' },
        { type: 'redacted_thinking', data: 'opaque' },
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [
        { type: 'tool_result', tool_use_id: 'toolu_01', content: '18C, sunny' },
        { type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'also windy' }], is_error: true },
        { type: 'text', text: 'Thanks, so?' }] },
    ];
    const n = await countTokens({ model: MODEL, messages: history, tools: TOOLS });
    const noTools = await countTokens({ model: MODEL, messages: history });
    assert.ok(n > noTools, 'tools are rendered into the prompt');
    const none = await countTokens({ model: MODEL, messages: history, tools: TOOLS, tool_choice: { type: 'none' } });
    assert.equal(none, noTools, 'tool_choice none hides the tools');
    const msg = await client.messages.create(base({ messages: history, tools: TOOLS, max_tokens: 8 }));
    assert.equal(msg.type, 'message');
  }],
  ['tool_choice {type: tool} -> tool_use block, then tool_result -> answer', async () => {
    const ask = base({ max_tokens: 64, tools: TOOLS, tool_choice: { type: 'tool', name: 'get_weather' },
                       messages: [{ role: 'user', content: 'Weather in Paris?' }] });
    for (const stream of [false, true]) {
      const msg = stream ? await client.messages.stream(ask).finalMessage() : await client.messages.create(ask);
      const use = msg.content.find((b) => b.type === 'tool_use');
      assert.ok(use, `no tool_use block: ${JSON.stringify(msg.content)}`);
      assert.equal(msg.stop_reason, 'tool_use');
      assert.match(use.id, /^toolu_/);
      assert.equal(use.name, 'get_weather');
      assert.equal(typeof use.input, 'object');
      assert.ok(use.input !== null && !Array.isArray(use.input));
      const answer = await client.messages.create(base({
        tools: TOOLS, max_tokens: 8,
        messages: [...ask.messages, { role: 'assistant', content: msg.content },
                   { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18C' }] }] }));
      assert.equal(answer.type, 'message');
      assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(answer.stop_reason));
    }
  }],
  ['errors have the Anthropic shape', async () => {
    const url = `${server.url}/v1/messages`;
    const { max_tokens, ...noMax } = base();
    checkError(await post(url, noMax, { headers: H }), 400);
    const r1 = await post(url, base({ messages: [{ role: 'robot', content: 'x' }] }), { headers: H });
    checkError(r1, 400);
    assert.match(r1.json.error.message, /role/);
    checkError(await post(url, '{"model": "x", "messages": [', { headers: H }), 400);
    checkError(await post(url, '[1, 2]', { headers: H }), 400);
    checkError(await post(url, base({ max_tokens: 'ten' }), { headers: H }), 400);
    checkError(await post(url, base({ max_tokens: -5 }), { headers: H }), 400);
    checkError(await post(url, base({ messages: { role: 'user' } }), { headers: H }), 400);
    checkError(await post(url, base({ messages: [] }), { headers: H }), 400);
    checkError(await post(url, base({ temperature: 'hot' }), { headers: H }), 400);
    checkError(await post(url, base({ system: 42 }), { headers: H }), 400);
    const r2 = await post(url, base({ frobnicate: true }), { headers: H });
    checkError(r2, 400);
    assert.match(r2.json.error.message, /frobnicate/);
    const img = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } };
    const r3 = await post(url, base({ messages: [{ role: 'user', content: [img] }] }), { headers: H });
    checkError(r3, 400);
    assert.match(r3.json.error.message, /image/);
    checkError(await post(url, base({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), { headers: H }), 400);
    checkError(await post(url, base({ tool_choice: { type: 'tool', name: 'nope' }, tools: TOOLS }), { headers: H }), 400);
    checkError(await post(url, base(), { headers: { 'x-api-key': 'wrong' } }), 401, 'authentication_error');
    checkError(await post(`${server.url}/v1/messages/count_tokens`, { model: MODEL }, { headers: H }), 400);
    await assert.rejects(client.messages.create(base({ messages: [{ role: 'robot', content: 'x' }] })),
                         (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
  }],
  ['harmless fields are accepted; huge max_tokens is fitted to the context', async () => {
    // A prompt that leaves ~12 tokens of the 4096-token context, then max_tokens 2^30.
    const ask = (k) => ({ model: MODEL, messages: [{ role: 'user', content: 'word '.repeat(k) }] });
    const n1 = await countTokens(ask(100)), n2 = await countTokens(ask(200));
    const k = 100 + Math.floor((4084 - n1) * 100 / (n2 - n1));
    const n = await countTokens(ask(k));
    assert.ok(n < 4096 && n > 4000, `prompt of ${n} tokens`);
    const r = await post(`${server.url}/v1/messages`,
                         { ...ask(k), metadata: { user_id: 'u1' }, service_tier: 'auto', max_tokens: 1 << 30 },
                         { headers: H });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.usage.input_tokens, n);
    assert.ok(r.json.usage.output_tokens <= 4096 - n, JSON.stringify(r.json.usage));
    assert.ok(['end_turn', 'max_tokens'].includes(r.json.stop_reason));
    const tooLong = await post(`${server.url}/v1/messages`, { ...ask(k + 200), max_tokens: 1 }, { headers: H });
    checkError(tooLong, 400);
    assert.match(tooLong.json.error.message, /context/);
  }],
  ['still serving after the errors', async () => {
    const msg = await client.messages.create(base({ max_tokens: 2 }));
    assert.equal(msg.type, 'message');
    const h = await fetch(`${server.url}/health`);
    assert.equal(h.status, 200);
  }],
];

const failed = await runCases(cases, server);
await finish(failed, [server]);
