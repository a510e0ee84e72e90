#!/usr/bin/env python3
"""Writes a multi-turn coding-agent session trace for `ft bench agent` (deterministic).

The session has the shape of the requests coding agents (Claude Code, OpenCode) send to an
OpenAI-compatible server: a system prompt with tool definitions (JSON schemas), a user task,
then turns of assistant thinking + one tool call, each answered by a tool result; the user
interjects now and then (the template then drops earlier thinking, as Qwen3 templates do), and
sometimes the agent re-sends the previous tool result cleared (edits to the last tool result, as
Claude Code's tool-result clearing does).

Output JSON: {"tools": [...], "messages": [...final conversation...],
              "requests": [{"messages": k, "overrides": {"i": "content"}}]}
Request r is messages[:k] with message i's content replaced by overrides[i] (the tool result
as it was, before the agent cleared it). `ft bench agent` renders each request through the
chat template (bench/traces/qwen3_agent.jinja) with add_generation_prompt.

Usage: make_agent_trace.py OUT.json [--turns 20] [--result-chars 4200] [--seed 7]
  bench/traces/agent_session.json: the defaults
  tests/cache/agent_session_small.json: --turns 8 --result-chars 400 --system-chars 200
                                        --tools-scale 0.1 --truncate 2,5 --interject 4
"""
import argparse
import json
import random

WORDS = ("the a of to in is for on that with as it be by this are from at or an not "
         "cache page token prefix state request engine model layer expert memory device "
         "buffer stream kernel batch sequence position anchor snapshot restore save radix "
         "tree node split evict pool budget plan slot fetch copy host pinned graph replay "
         "decode prefill chunk attention delta conv norm router weight matrix tensor view").split()
IDENTS = ("cache pages tokens prefix state req engine model layer experts mem dev buf "
          "stream kernel batch seq pos anchor snap restore save tree node pool budget plan "
          "slot fetch host graph decode prefill chunk attn delta conv norm router w out "
          "tmp result count size offset index len n k v q x y i j").split()


def sentence(rng, n):
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def paragraph(rng, chars):
    out = []
    while sum(len(s) + 1 for s in out) < chars:
        out.append(sentence(rng, rng.randint(6, 18)))
    return " ".join(out)


def code(rng, chars, lang):
    lines, depth, total = [], 0, 0
    while total < chars:
        a, b, c = (rng.choice(IDENTS) for _ in range(3))
        kind = rng.random()
        if lang == "cpp":
            if kind < 0.15 and depth < 3:
                line = f"for (int64_t {a} = 0; {a} < {b}.size(); ++{a}) {{"
                depth += 1
            elif kind < 0.25 and depth > 0:
                depth -= 1
                line = "}"
            elif kind < 0.35:
                line = f"// {sentence(rng, rng.randint(5, 12))}"
            else:
                line = f"{a}_{b} = {c}({a}, {rng.randint(0, 4096)}) + {b}[{c}];"
        else:
            if kind < 0.15 and depth < 3:
                line = f"for {a} in range(len({b})):"
                depth += 1
            elif kind < 0.25 and depth > 0:
                depth -= 1
                line = f"return {a}"
            elif kind < 0.35:
                line = f"# {sentence(rng, rng.randint(5, 12))}"
            else:
                line = f"{a}_{b} = {c}({a}, {rng.randint(0, 4096)}) + {b}[{c}]"
        line = "    " * depth + line
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)


def numbered(text):  # Read-tool style: "   12\tline"
    return "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(text.split("\n")))


def tools(rng, scale):
    def tool(name, desc, props, required):
        return {"type": "function", "function": {
            "name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required,
                           "additionalProperties": False}}}

    def s(d):
        return {"type": "string", "description": d}

    def paragraph(rng, chars):  # tool descriptions scale with --tools-scale
        return globals()["paragraph"](rng, int(chars * scale))

    return [
        tool("Read", "Reads a file from the local filesystem. " + paragraph(rng, 900),
             {"file_path": s("The absolute path to the file to read"),
              "offset": {"type": "number", "description": "The line number to start reading from"},
              "limit": {"type": "number", "description": "The number of lines to read"}},
             ["file_path"]),
        tool("Edit", "Performs exact string replacements in files. " + paragraph(rng, 1100),
             {"file_path": s("The absolute path to the file to modify"),
              "old_string": s("The text to replace"),
              "new_string": s("The text to replace it with (must be different from old_string)"),
              "replace_all": {"type": "boolean", "default": False,
                              "description": "Replace all occurences of old_string"}},
             ["file_path", "old_string", "new_string"]),
        tool("Write", "Writes a file to the local filesystem. " + paragraph(rng, 600),
             {"file_path": s("The absolute path to the file to write"),
              "content": s("The content to write to the file")}, ["file_path", "content"]),
        tool("Bash", "Executes a given bash command in a persistent shell session. " +
             paragraph(rng, 2400),
             {"command": s("The command to execute"),
              "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
              "description": s("Clear, concise description of what this command does")},
             ["command"]),
        tool("Grep", "A powerful search tool built on ripgrep. " + paragraph(rng, 1000),
             {"pattern": s("The regular expression pattern to search for in file contents"),
              "path": s("File or directory to search in"),
              "glob": s("Glob pattern to filter files"),
              "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]}},
             ["pattern"]),
        tool("Glob", "Fast file pattern matching tool. " + paragraph(rng, 500),
             {"pattern": s("The glob pattern to match files against"),
              "path": s("The directory to search in")}, ["pattern"]),
        tool("TodoWrite", "Create and manage a structured task list. " + paragraph(rng, 1500),
             {"todos": {"type": "array", "items": {"type": "object", "properties": {
                 "content": {"type": "string"},
                 "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
                 "required": ["content", "status"]}}}, ["todos"]),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--result-chars", type=int, default=4200, help="mean tool result size")
    ap.add_argument("--system-chars", type=int, default=2500)
    ap.add_argument("--tools-scale", type=float, default=1.0, help="tool description length")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--truncate", default="4,9,15", help="turns whose tool result is cleared next")
    ap.add_argument("--interject", default="7,13", help="turns after which the user adds a message")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    files = [f"/repo/src/{d}/{n}.{e}" for d in ("cache", "engine", "model", "server")
             for n in ("pool", "tree", "runner", "plan", "loop") for e in ("cpp", "py")]
    msgs = [{"role": "system", "content": "You are an interactive CLI tool that helps users "
             "with software engineering tasks. " + paragraph(rng, a.system_chars)},
            {"role": "user", "content": "Please fix the prefix cache so that it survives "
             "restarts. " + paragraph(rng, 400)}]
    requests = [{"messages": len(msgs), "overrides": {}}]
    truncate_turns = {int(t) for t in a.truncate.split(",") if t}  # cleared in later requests
    interject_turns = {int(t) for t in a.interject.split(",") if t}
    for t in range(a.turns - 1):
        f = rng.choice(files)
        name = rng.choice(["Read", "Read", "Grep", "Bash", "Edit"])
        args = {"Read": {"file_path": f},
                "Grep": {"pattern": rng.choice(IDENTS) + "_" + rng.choice(IDENTS), "path": "/repo"},
                "Bash": {"command": f"cd /repo && ctest -R {rng.choice(IDENTS)} --output-on-failure",
                         "description": "Run the tests"},
                "Edit": {"file_path": f, "old_string": code(rng, 120, "cpp"),
                         "new_string": code(rng, 160, "cpp")}}[name]
        msgs.append({"role": "assistant", "content": "",
                     "reasoning_content": paragraph(rng, rng.randint(250, 650)),
                     "tool_calls": [{"id": f"call_{t}", "type": "function", "function": {
                         "name": name, "arguments": json.dumps(args)}}]})
        size = max(200, int(rng.gauss(a.result_chars, a.result_chars / 3)))
        body = code(rng, size, "cpp" if f.endswith("cpp") else "py")
        result = numbered(body) if name == "Read" else body
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": result})
        overrides = {}
        if t in truncate_turns:  # this request has it whole; later ones a shortened copy
            overrides[str(len(msgs) - 1)] = result
            msgs[-1]["content"] = "[Old tool result content cleared]"
        if t in interject_turns:
            msgs.append({"role": "user", "content": paragraph(rng, 300)})
        requests.append({"messages": len(msgs), "overrides": overrides})
    json.dump({"description": "coding-agent session: see tools/agent_trace/make_agent_trace.py",
               "tools": tools(random.Random(a.seed + 1), a.tools_scale), "messages": msgs,
               "requests": requests}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
