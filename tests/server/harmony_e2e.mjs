// Harmony (gpt-oss) output end to end: the official openai and Anthropic SDKs against the real
// server on a tiny gpt-oss model with the real o200k_harmony tokenizer, its output scripted per
// prompt by ft_scripted_serve ([[script:NAME]] in a message forces NAME's tokens; the engine,
// stop tokens, detokenizer and Harmony parser are the real ones). Checks analysis ->
// reasoning_content / thinking blocks, final -> content, commentary to=functions.X -> tool calls,
// that <|return|> / <|call|> end the turn and that no special token reaches the client.
// Usage: node harmony_e2e.mjs FT_SCRIPTED_SERVE MODEL_DIR
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { args, assert, startServer, post, parseSse, runCases, finish } from './contract_harness.mjs';

const { default: OpenAI } = await import(new URL('../js/node_modules/openai/index.mjs', import.meta.url));
const { default: Anthropic } = await import(
  new URL('../js/node_modules/@anthropic-ai/sdk/index.mjs', import.meta.url));
const { ft, model } = args();
const MODEL = 'gpt-oss-tiny';

const SCRIPTS = {
  final: '<|channel|>analysis<|message|>The user greets me. Keep it short.<|end|>' +
         '<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>',
  call: '<|channel|>analysis<|message|>Need the weather tool.<|end|>' +
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json' +
        '<|message|>{"city": "Paris", "days": 2}<|call|>',
  // Recipient before the channel, and a commentary preamble (content) first.
  preamble_call: '<|channel|>commentary<|message|>Let me check the time.<|end|>' +
                 '<|start|>assistant to=functions.get_time<|channel|>commentary json' +
                 '<|message|>{}<|call|>',
  after_tool: '<|channel|>analysis<|message|>Tool says 21C.<|end|>' +
              '<|start|>assistant<|channel|>final<|message|>It is 21C in Paris.<|return|>',
  // No terminator: runs into max_tokens.
  long: '<|channel|>final<|message|>' + 'one two three four five six seven eight nine ten '.repeat(8),
};
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ft_harmony_'));
const scriptsFile = path.join(dir, 'scripts.json');
fs.writeFileSync(scriptsFile, JSON.stringify(SCRIPTS));

const server = await startServer({ ft, model, extra: ['--scripts', scriptsFile, '--threads', '2'] });
const client = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 120_000 });
const claude = new Anthropic({ apiKey: 'unused', baseURL: server.url, maxRetries: 0, timeout: 120_000 });

const cases = [];
const test = (name, fn) => cases.push([name, fn]);
const user = (script, text = 'Hi') => [{ role: 'user', content: `${text} [[script:${script}]]` }];
const WEATHER = {
  type: 'function',
  function: { name: 'get_weather', description: 'Current weather for a city',
              parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
                            required: ['city'] } },
};
const TIME = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } };
const noMarkup = (s, what) => assert.ok(!/<\|[a-z_0-9]+\|>/.test(s ?? ''), `${what} leaks markup: ${s}`);

async function streamChat(body) {
  const chunks = [];
  for await (const c of await client.chat.completions.create({ ...body, stream: true })) chunks.push(c);
  const out = { reasoning: '', content: '', calls: [], finish: null };
  for (const c of chunks)
    for (const ch of c.choices) {
      out.reasoning += ch.delta.reasoning_content ?? '';
      out.content += ch.delta.content ?? '';
      for (const tc of ch.delta.tool_calls ?? []) {
        if (!out.calls[tc.index]) {
          assert.match(tc.id, /^call_/);
          out.calls[tc.index] = { name: tc.function.name, arguments: '' };
        }
        out.calls[tc.index].arguments += tc.function.arguments ?? '';
      }
      if (ch.finish_reason) out.finish = ch.finish_reason;
    }
  return out;
}

test('chat: analysis -> reasoning_content, final -> content, <|return|> stops', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: user('final'), max_tokens: 100 });
  const c = r.choices[0];
  assert.equal(c.message.reasoning_content, 'The user greets me. Keep it short.');
  assert.equal(c.message.content, 'Hello! How can I help?');
  assert.equal(c.message.tool_calls, undefined);
  assert.equal(c.finish_reason, 'stop');
  // Every scripted token was generated, <|return|> included, and nothing after it.
  assert.ok(r.usage.completion_tokens >= 15 && r.usage.completion_tokens < 40, JSON.stringify(r.usage));
});

test('chat stream: same split, deltas carry no markup', async () => {
  const s = await streamChat({ model: MODEL, messages: user('final'), max_tokens: 100 });
  assert.equal(s.reasoning, 'The user greets me. Keep it short.');
  assert.equal(s.content, 'Hello! How can I help?');
  assert.equal(s.finish, 'stop');
});

test('chat: commentary to=functions.get_weather -> tool_calls, <|call|> stops', async () => {
  const tools = [WEATHER, TIME];
  const r = await client.chat.completions.create({ model: MODEL, messages: user('call', 'Weather in Paris?'),
                                                   tools, max_tokens: 100 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, null);
  assert.equal(c.message.reasoning_content, 'Need the weather tool.');
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 2 });
  // Round trip: the call (with its reasoning) and the tool result render through the template.
  const r2 = await client.chat.completions.create({
    model: MODEL, tools, max_tokens: 100,
    messages: [...user('call', 'Weather in Paris?'), c.message,
               { role: 'tool', tool_call_id: call.id, content: '{"temp_c": 21} [[script:after_tool]]' }] });
  assert.equal(r2.choices[0].message.content, 'It is 21C in Paris.');
  assert.equal(r2.choices[0].message.reasoning_content, 'Tool says 21C.');
  assert.equal(r2.choices[0].finish_reason, 'stop');
  assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens + 20, 'the call and result were rendered');
});

test('chat stream: preamble is content, recipient-first call streams its arguments', async () => {
  const s = await streamChat({ model: MODEL, messages: user('preamble_call'), tools: [WEATHER, TIME], max_tokens: 100 });
  assert.equal(s.content, 'Let me check the time.');
  assert.equal(s.reasoning, '');
  assert.equal(s.calls.length, 1);
  assert.equal(s.calls[0].name, 'get_time');
  assert.deepEqual(JSON.parse(s.calls[0].arguments), {});
  assert.equal(s.finish, 'tool_calls');
  const t = await streamChat({ model: MODEL, messages: user('call'), tools: [WEATHER], max_tokens: 100 });
  assert.equal(t.calls[0].name, 'get_weather');
  assert.deepEqual(JSON.parse(t.calls[0].arguments), { city: 'Paris', days: 2 });
  assert.equal(t.reasoning, 'Need the weather tool.');
});

test('chat: tool_choice none leaves calls as content; max_tokens cuts a final message', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: user('call'), tools: [WEATHER],
                                                   tool_choice: 'none', max_tokens: 100 });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.choices[0].message.content, '{"city": "Paris", "days": 2}');
  const cut = await client.chat.completions.create({ model: MODEL, messages: user('long'), max_tokens: 12 });
  assert.equal(cut.choices[0].finish_reason, 'length');
  assert.match(cut.choices[0].message.content, /^one two three/);
  noMarkup(cut.choices[0].message.content, 'content');
  assert.equal(cut.choices[0].message.reasoning_content, null);
});

test('forced tool_choice (no script: the random model under the Harmony constraint)', async () => {
  for (const [tool_choice, name] of [['required', null], [{ type: 'function', function: { name: 'get_time' } }, 'get_time']]) {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Weather?' }],
                                                     tools: [WEATHER, TIME], tool_choice, max_tokens: 48,
                                                     temperature: 1, seed: 3, logprobs: true });
    const c = r.choices[0];
    // The header is written with Harmony's special-token ids, as the model was trained on.
    const toks = c.logprobs.content.map((t) => t.token);
    assert.equal(toks[0], '<|channel|>', JSON.stringify(toks));
    assert.ok(toks.includes('<|constrain|>') && toks.includes('<|message|>'), JSON.stringify(toks));
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.tool_calls.length, 1);
    if (name) assert.equal(c.message.tool_calls[0].function.name, name);
    assert.ok(['get_weather', 'get_time'].includes(c.message.tool_calls[0].function.name));
    assert.equal(typeof JSON.parse(c.message.tool_calls[0].function.arguments), 'object');
    assert.equal(c.message.content, null);
    assert.equal(c.message.reasoning_content, null);
  }
  const s = await streamChat({ model: MODEL, messages: [{ role: 'user', content: 'Weather?' }], tools: [WEATHER],
                               tool_choice: 'required', max_tokens: 24, temperature: 1, seed: 4 });
  assert.equal(s.calls.length, 1);
  assert.equal(s.calls[0].name, 'get_weather');
  assert.equal(typeof JSON.parse(s.calls[0].arguments), 'object');
  assert.equal(s.content, '');
  const tools = [{ name: 'get_weather', input_schema: WEATHER.function.parameters }];
  // Greedy: the Messages API has no seed, and at temperature 1 the random model's string
  // arguments now and then ran past max_tokens (CI saw stop_reason max_tokens once).
  const m = await claude.messages.create({ model: MODEL, max_tokens: 32, tools, temperature: 0,
                                           tool_choice: { type: 'tool', name: 'get_weather' },
                                           messages: [{ role: 'user', content: 'Weather?' }] });
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.content.find((b) => b.type === 'tool_use').name, 'get_weather');
});

test('anthropic: thinking block + text; tool_use with input; stream events', async () => {
  const m = await claude.messages.create({ model: MODEL, max_tokens: 100, messages: user('final') });
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'The user greets me. Keep it short.');
  assert.equal(m.content[1].text, 'Hello! How can I help?');
  assert.equal(m.stop_reason, 'end_turn');
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: WEATHER.function.parameters }];
  const t = await claude.messages.create({ model: MODEL, max_tokens: 100, tools, messages: user('call') });
  assert.equal(t.stop_reason, 'tool_use');
  const use = t.content.find((b) => b.type === 'tool_use');
  assert.equal(use.name, 'get_weather');
  assert.deepEqual(use.input, { city: 'Paris', days: 2 });
  assert.equal(t.content.find((b) => b.type === 'thinking').thinking, 'Need the weather tool.');
  const stream = claude.messages.stream({ model: MODEL, max_tokens: 100, tools, messages: user('call') });
  const final = await stream.finalMessage();
  assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.deepEqual(final.content[1].input, { city: 'Paris', days: 2 });
  // The thinking and tool_use history goes back through the template.
  const back = await claude.messages.create({
    model: MODEL, max_tokens: 100, tools,
    messages: [...user('call'), { role: 'assistant', content: final.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: final.content[1].id,
                                           content: '21C [[script:after_tool]]' }] }] });
  assert.equal(back.content.find((b) => b.type === 'text').text, 'It is 21C in Paris.');
});

test('responses: reasoning and function_call output items', async () => {
  const tools = [{ type: 'function', name: 'get_weather', parameters: WEATHER.function.parameters }];
  const r = await client.responses.create({ model: MODEL, input: 'Weather? [[script:call]]', tools,
                                            max_output_tokens: 100 });
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, 'get_weather');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris', days: 2 });
  const text = await client.responses.create({ model: MODEL, input: 'Hi [[script:final]]', max_output_tokens: 100 });
  assert.equal(text.output_text, 'Hello! How can I help?');
  noMarkup(JSON.stringify(text.output), 'output');
});

test('raw SSE: no special token in any chunk', async () => {
  const r = await post(`${server.url}/v1/chat/completions`,
                       { model: MODEL, messages: user('call'), tools: [WEATHER], stream: true, max_tokens: 100 });
  assert.equal(r.status, 200);
  for (const e of parseSse(r.text)) noMarkup(JSON.stringify(e.data), 'chunk');
});

const failed = await runCases(cases, server);
fs.rmSync(dir, { recursive: true, force: true });
await finish(failed, [server]);
