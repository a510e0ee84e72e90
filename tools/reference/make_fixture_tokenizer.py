#!/usr/bin/env python3
"""Writes a small byte-level BPE tokenizer for a tiny fixture (so `ft serve --model FIXTURE`
runs on it): the demo model's tokenizer cut to the fixture's vocabulary (tokens with id < V,
merges whose parts and result all stay below V), its three special ids renamed and two more
specials put on the last ids, plus a chat template. Pure Python (json only).

usage: make_fixture_tokenizer.py DEMO_DIR FIXTURE_DIR harmony
  harmony: gpt-oss's Harmony framing, <|start|>{role}<|message|>{content}<|end|> per message
  and <|start|>assistant to generate (specials <|return|> 0, <|start|> 1, <|end|> 2,
  <|channel|> V-2, <|message|> V-1).
"""
import json
import os
import sys

HARMONY_TEMPLATE = (
    "{%- for message in messages %}{{- '<|start|>' + message['role'] + '<|message|>' + "
    "message['content'] + '<|end|>' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|start|>assistant' }}{%- endif %}")


def main():
    demo, out, style = sys.argv[1], sys.argv[2], sys.argv[3]
    assert style == "harmony", "only the harmony style is written"
    V = json.load(open(os.path.join(out, "config.json")))["vocab_size"]
    tok = json.load(open(os.path.join(demo, "tokenizer.json")))
    specials = {0: "<|return|>", 1: "<|start|>", 2: "<|end|>", V - 2: "<|channel|>",
                V - 1: "<|message|>"}
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < V and i not in specials}
    vocab.update({t: i for i, t in specials.items()})
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in vocab and b in vocab and (a + b) in vocab and vocab[a + b] not in specials:
            merges.append([a, b])
    tok["model"]["vocab"] = dict(sorted(vocab.items(), key=lambda kv: kv[1]))
    tok["model"]["merges"] = merges
    tok["added_tokens"] = [dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False,
                                normalized=False, special=True) for i, t in sorted(specials.items())]
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = json.load(open(os.path.join(demo, "tokenizer_config.json")))
    cfg["added_tokens_decoder"] = {str(i): dict(content=t, lstrip=False, normalized=False,
                                                rstrip=False, single_word=False, special=True)
                                   for i, t in sorted(specials.items())}
    cfg.update(bos_token="<|start|>", eos_token="<|end|>", pad_token="<|return|>",
               chat_template=HARMONY_TEMPLATE)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
    print(f"{out}: {len(vocab)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
