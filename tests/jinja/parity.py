# Parity of ft's chat-template rendering with Python jinja2 configured exactly as transformers'
# apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
# {% generation %}, HF's tojson/raise_exception/strftime_now). Usage: parity.py <ft_jinja_render>
import json, os, subprocess, sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))


class Generation(Extension):  # transformers' AssistantTracker, minus the index tracking
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def model_dirs():
    cases = json.load(open(os.path.join(HERE, "cases.json")))
    nm = os.environ.get("FT_NODE_MODULES", os.path.join(HERE, "..", "js", "node_modules"))
    for name, rel in cases["models"].items():
        path = os.path.join(nm, rel[len("node_modules:"):]) if rel.startswith("node_modules:") \
            else os.path.join(HERE, rel)
        yield name, path


def load_source(path):
    if os.path.exists(os.path.join(path, "chat_template.jinja")):
        return open(os.path.join(path, "chat_template.jinja"), encoding="utf-8").read()
    t = json.load(open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8"))["chat_template"]
    return t if isinstance(t, str) else next(e["template"] for e in t if e["name"] == "default")


def run(driver, model, conv, *extra):
    p = subprocess.run([driver, model, conv, *extra], capture_output=True)
    return p.returncode, p.stdout.decode("utf-8")


def main():
    driver = sys.argv[1]
    convs = sorted(f for f in os.listdir(os.path.join(HERE, "conversations")) if f.endswith(".json"))
    failures = total = 0
    for name, path in model_dirs():
        tpl = compile_template(load_source(path))
        for conv in convs:
            total += 1
            conv_path = os.path.join(HERE, "conversations", conv)
            rc, ctx = run(driver, path, conv_path, "--context")
            if rc != 0:
                print(f"FAIL {name} x {conv}: context: {ctx}")
                failures += 1
                continue
            try:
                want = tpl.render(**json.loads(ctx))
            except Exception as e:  # the template rejects this conversation: ft must too
                want = "error: " + str(e)
            rc, got = run(driver, path, conv_path)
            ok = got == want if not want.startswith("error: ") else \
                (rc != 0 and want[len("error: "):] in got)
            if not ok:
                failures += 1
                print(f"FAIL {name} x {conv}\n--- jinja2 ---\n{want!r}\n--- ft ---\n{got!r}")
    print(f"{total - failures}/{total} renderings match Python jinja2")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
