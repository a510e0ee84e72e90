#!/usr/bin/env python3
"""Builds the demo model's training corpus from free text shipped by Debian packages.

Plain python3, no third-party modules. Needs (apt-get install):
  wordnet-base  WordNet 3.0 (Princeton; WordNet 3.0 licence: BSD-style, use/copy/modify/
                distribute with the copyright notice) -> chat dialogues about word meanings,
                synonyms, kinds of things and example sentences.
  jargon-text   The Jargon File 4.4.7 (public domain, per its own text) -> plain prose.
  dict-devil    Ambrose Bierce, The Devil's Dictionary (1911; public domain) -> plain prose.
Not used: dict-gcide (GPL-2+ as a compilation, and its 1913 markup is noisy), bible-kjv-text
(a binary format, and archaic English).

Output (default .carry/demo/ under the repo root, ignored by git):
  train.txt    documents separated by "<|endoftext|>" (dialogues are ChatML, exactly as the
               model's chat template renders them, each ending with "<|im_end|>\n")
  heldout.txt  the held-out documents (~2%, chosen by a hash of each document's key)
  heldout_sample.txt  a small slice of heldout.txt (every 40th dialogue + the first held-out
               Jargon File and Devil's Dictionary documents): tests/demo/heldout.txt
  stats.json   sizes and counts
Deterministic: same packages -> same bytes.

usage: prepare_corpus.py [OUT_DIR]
"""
import gzip
import json
import os
import random
import re
import sys
import zlib

WN = "/usr/share/wordnet"
JARGON = "/usr/share/doc/jargon-text/jargon.txt.gz"
DEVIL = "/usr/share/dictd/devil.dict.dz"  # dictzip is gzip-compatible
EOT = "<|endoftext|>"
SYSTEM = ["You are a helpful assistant.",
          "You are a helpful assistant who explains the meanings of English words.",
          "You are a friendly dictionary. Answer briefly."]
POS_NAME = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
FILES = [("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")]


def held_out(key):
    return zlib.crc32(key.encode()) % 50 == 0


# ---------------------------------------------------------------- WordNet
def read_synsets():
    """offset+pos -> {words, pos, defs, examples, hypernyms}."""
    syn = {}
    for fname, _ in FILES:
        with open(os.path.join(WN, "data." + fname), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue  # licence header
                head, _, gloss = line.partition(" | ")
                t = head.split()
                off, pos, n = t[0], t[2], int(t[3], 16)
                words = [re.sub(r"\(.*\)$", "", t[4 + 2 * i]).replace("_", " ") for i in range(n)]
                k = 4 + 2 * n
                n_ptr = int(t[k])
                hyper = [t[k + 1 + 4 * i + 1] + t[k + 1 + 4 * i + 2][0]
                         for i in range(n_ptr) if t[k + 1 + 4 * i] in ("@", "@i")]
                parts = [p.strip() for p in gloss.strip().split(";")]
                defs = [p for p in parts if p and not p.startswith('"')]
                ex = [p.strip('"').strip() for p in parts if p.startswith('"')]
                syn[off + ("a" if pos == "s" else pos)] = {
                    "words": words, "pos": POS_NAME[pos], "defs": defs,
                    "examples": [e for e in ex if e], "hypernyms": hyper}
    return syn


def read_index(syn):
    """lemma -> [(pos letter, [synset keys in sense order])], lemmas in file order."""
    lemmas = {}
    for fname, p in FILES:
        with open(os.path.join(WN, "index." + fname), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                t = line.split()
                n_syn = int(t[2])
                keys = [o + p for o in t[-n_syn:] if o + p in syn]
                if keys:
                    lemmas.setdefault(t[0].replace("_", " "), []).append((p, keys))
    return lemmas


def article(word):
    return "an" if word[0].lower() in "aeiou" else "a"


def define(lemma, senses, syn, rng):
    q = rng.choice(['What does "{w}" mean?', "What does the word {w} mean?",
                    'What is the meaning of "{w}"?', 'Define "{w}".',
                    "What is the definition of {w}?", "Can you explain what {w} means?"])
    out = []
    for p, keys in senses[:2]:
        s = [syn[k] for k in keys if syn[k]["defs"]]
        if not s:
            continue
        out.append(f'As {article(s[0]["pos"])} {s[0]["pos"]}, "{lemma}" means {s[0]["defs"][0]}.')
        if len(s) > 1:
            out.append(f"It can also mean {s[1]['defs'][0]}.")
    if not out:
        return None
    ex = [e for k in senses[0][1][:1] for e in syn[k]["examples"]]
    if ex:
        out.append(f'For example: "{ex[0]}".')
    return q.format(w=lemma), " ".join(out)


def synonyms(lemma, senses, syn, rng):
    s = syn[senses[0][1][0]]
    others = [w for w in dict.fromkeys(s["words"]) if w.lower() != lemma.lower()]
    if not others:
        return None
    q = rng.choice(['What is another word for "{w}"?', "What is a synonym of {w}?",
                    'Give me a word that means the same as "{w}".'])
    if len(others) == 1:
        a = f'Another word for "{lemma}" is "{others[0]}".'
    else:
        listed = ", ".join(f'"{w}"' for w in others[:3])
        a = f'Words with a similar meaning to "{lemma}" include {listed}.'
    return q.format(w=lemma), a


def kind_of(lemma, senses, syn, rng):
    p, keys = senses[0]
    s = syn[keys[0]]
    if p != "n" or not s["hypernyms"] or s["hypernyms"][0] not in syn:
        return None
    h = syn[s["hypernyms"][0]]
    q = rng.choice(["What kind of thing is {a} {w}?", "What is {a} {w}?", "Tell me about {w}."])
    a = f"{article(lemma).capitalize()} {lemma} is a kind of {h['words'][0]}"
    if s["defs"]:
        a += f": {s['defs'][0]}"
    return q.format(w=lemma, a=article(lemma)), a + "."


def example(lemma, senses, syn, rng):
    for _, keys in senses:
        for k in keys:
            for e in syn[k]["examples"]:
                if re.search(r"\b" + re.escape(lemma) + r"\b", e, re.I):
                    q = rng.choice(['Use "{w}" in a sentence.', "Give me an example sentence with {w}.",
                                    'How is the word "{w}" used?'])
                    return q.format(w=lemma), f'Here is an example: "{e[0].upper() + e[1:]}".'
    return None


def chat(turns, system):
    text = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    for q, a in turns:
        text += f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n"
    return text


def wordnet_dialogues():
    syn = read_synsets()
    lemmas = read_index(syn)
    rng = random.Random(8)
    docs = []
    for lemma, senses in lemmas.items():
        # Common single words only (no phrases, proper nouns or taxonomic names): keeps the
        # corpus ~20 MB and the answers about everyday words.
        if not re.fullmatch(r"[a-z][a-z'-]*", lemma) or syn[senses[0][1][0]]["words"][0][0].isupper():
            continue
        turns = [t for t in (define(lemma, senses, syn, rng),) if t]
        for extra in (synonyms, kind_of, example):
            if rng.random() < 0.4:
                t = extra(lemma, senses, syn, rng)
                if t:
                    turns.append(t)
        if not turns:
            continue
        rng.shuffle(turns)
        system = rng.choice(SYSTEM) if rng.random() < 0.3 else None
        docs.append(("wn:" + lemma, chat(turns[:3], system)))
    return docs


# ---------------------------------------------------------------- plain text
def paragraphs(text):
    for p in re.split(r"\n\s*\n", text):
        p = re.sub(r"\s+", " ", p).strip()
        if len(p) >= 60:
            yield p


def plain_docs(name, text, size=2000):
    docs, cur = [], []
    for p in paragraphs(text):
        cur.append(p)
        if sum(map(len, cur)) >= size:
            docs.append((f"{name}:{len(docs)}", "\n\n".join(cur)))
            cur = []
    if cur:
        docs.append((f"{name}:{len(docs)}", "\n\n".join(cur)))
    return docs


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, ".carry", "demo")
    for need in (WN, JARGON, DEVIL):
        if not os.path.exists(need):
            sys.exit(f"missing {need}: apt-get install wordnet-base jargon-text dict-devil")
    os.makedirs(out, exist_ok=True)
    jargon = gzip.open(JARGON, "rt", encoding="utf-8", errors="replace").read()
    jargon = jargon[jargon.find("Glossary"):]  # skip the title pages and table of contents
    devil = gzip.open(DEVIL, "rt", encoding="latin-1").read()
    docs = wordnet_dialogues() + plain_docs("jargon", jargon) + plain_docs("devil", devil)
    train = [d for k, d in docs if not held_out(k)]
    held = [d for k, d in docs if held_out(k)]
    held_kv = [(k, d) for k, d in docs if held_out(k)]
    sample = [d for k, d in held_kv if k.startswith("wn:")][::40]
    for src in ("jargon:", "devil:"):
        sample += [d for k, d in held_kv if k.startswith(src)][:1]
    for name, part in (("train.txt", train), ("heldout.txt", held),
                       ("heldout_sample.txt", sample)):
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(EOT.join(part))
    stats = {"documents": len(docs), "train_docs": len(train), "heldout_docs": len(held),
             "train_bytes": sum(map(len, train)), "heldout_bytes": sum(map(len, held)),
             "dialogues": sum(k.startswith("wn:") for k, _ in docs)}
    with open(os.path.join(out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=2)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
