// Parity of ft's chat-template rendering with @huggingface/jinja (what transformers.js uses):
// every model in cases.json x every conversation in conversations/, byte for byte.
// Usage: node parity.mjs <ft_jinja_render>   (FT_NODE_MODULES: where @huggingface/jinja lives)
// ft builds the template variables (`--context`) and both engines render them. Python jinja2 is
// the reference (parity.py); where @huggingface/jinja 0.5.x departs from jinja2, the JS output
// is normalised for that one difference only (see KNOWN_JS_DIFFERENCES).
import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = process.env.FT_NODE_MODULES ?? join(here, "..", "js", "node_modules");
const { Template } = await import(
  pathToFileURL(join(nodeModules, "@huggingface/jinja/dist/index.js")).href
);

// Each entry: [reason, applies(model, conversation), fix(jsOutput) -> jinja2 output].
const KNOWN_JS_DIFFERENCES = [
  [
    // JS has one number type: the float 1.0 from the request prints as `1` through tojson,
    // where Python's json.dumps (and ft) print `1.0`.
    "integral float in tojson",
    (model, conv) => conv === "parallel_tool_calls.json",
    (out) => out.replaceAll('"threshold": 1}', '"threshold": 1.0}'),
  ],
];

function modelDirs() {
  const cases = JSON.parse(readFileSync(join(here, "cases.json"), "utf8"));
  return Object.entries(cases.models).map(([name, rel]) => [
    name,
    rel.startsWith("node_modules:") ? join(nodeModules, rel.slice("node_modules:".length)) : join(here, rel),
  ]);
}

function loadSource(dir) {
  const jinjaFile = join(dir, "chat_template.jinja");
  if (existsSync(jinjaFile)) return readFileSync(jinjaFile, "utf8");
  const t = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8")).chat_template;
  return typeof t === "string" ? t : t.find((e) => e.name === "default").template;
}

function ft(driver, dir, conv, ...extra) {
  try {
    return { ok: true, out: execFileSync(driver, [dir, conv, ...extra], { encoding: "utf8" }) };
  } catch (e) {
    return { ok: false, out: e.stdout?.toString() ?? String(e) };
  }
}

const driver = process.argv[2];
const convs = readdirSync(join(here, "conversations")).filter((f) => f.endsWith(".json")).sort();
let total = 0, failures = 0;
for (const [name, dir] of modelDirs()) {
  const tpl = new Template(loadSource(dir));
  for (const conv of convs) {
    total++;
    const convPath = join(here, "conversations", conv);
    const ctx = ft(driver, dir, convPath, "--context");
    if (!ctx.ok) {
      console.log(`FAIL ${name} x ${conv}: context: ${ctx.out}`);
      failures++;
      continue;
    }
    let want;
    try {
      want = tpl.render(JSON.parse(ctx.out));
      for (const [, applies, fix] of KNOWN_JS_DIFFERENCES)
        if (applies(name, conv)) want = fix(want);
    } catch (e) {
      want = "error: " + e.message;
    }
    const got = ft(driver, dir, convPath);
    const ok = want.startsWith("error: ") ? !got.ok && got.out.includes(want.slice(7)) : got.out === want;
    if (!ok) {
      failures++;
      console.log(`FAIL ${name} x ${conv}\n--- @huggingface/jinja ---\n${JSON.stringify(want)}\n--- ft ---\n${JSON.stringify(got.out)}`);
    }
  }
}
console.log(`${total - failures}/${total} renderings match @huggingface/jinja`);
process.exit(failures ? 1 : 0);
