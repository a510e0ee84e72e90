#!/usr/bin/env python3
"""Trains ft's embedded demo model: a byte-level BPE tokenizer and a small Qwen3-MoE from scratch.

Runs on the GPU machine (torch 2.11, transformers 5.x, tokenizers); reads the corpus written by
prepare_corpus.py (train.txt / heldout.txt, documents separated by "<|endoftext|>"). Writes an
HF checkpoint directory the engine loads: config.json (with num_experts), generation_config.json,
model.safetensors (bf16, per-expert names, tied embeddings), tokenizer.json, tokenizer_config.json
(ChatML chat_template). Prints train loss, held-out loss/perplexity, a unigram-baseline
perplexity on the same tokens, and sample answers.

Perplexity is measured like `ft perplexity`: the token stream is cut into windows of --ctx
tokens; each window predicts its tokens 1..n-1 from the ones before it in the window.

usage: train.py --corpus .carry/demo --out OUT/demo [--steps 1200] [--time-budget 360]
                [--sample tests/demo/heldout.txt] [--quick]
"""
import argparse
import json
import math
import os
import random
import re
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EOT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
PROMPTS = ['What does "apple" mean?', "What is another word for happy?",
           "What kind of thing is a violin?", 'Use "river" in a sentence.']


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=".carry/demo")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sample", default="tests/demo/heldout.txt")
    ap.add_argument("--vocab", type=int, default=6144)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--time-budget", type=float, default=360.0,
                    help="seconds of training; fewer steps if the measured step time needs it")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quick", action="store_true", help="smoke test: corpus slice, 30 steps")
    return ap.parse_args()


# ---------------------------------------------------------------- data + tokenizer
def read_docs(path, limit=None):
    with open(path, encoding="utf-8") as f:
        docs = [d for d in f.read().split(EOT) if d.strip()]
    return docs[:limit] if limit else docs


def train_tokenizer(docs, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                                  special_tokens=[EOT, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    marks = re.compile("|".join(re.escape(s) for s in (EOT, IM_START, IM_END)))
    # Special tokens are matched whole at encode time; keep them out of the merge statistics.
    tok.train_from_iterator((marks.sub("\n", d) for d in docs), trainer=trainer, length=len(docs))
    return tok


def encode_stream(tok, docs):
    """EOT.join(docs) as ids (what encoding the joined text gives, since EOT is a special token)."""
    eot = tok.token_to_id(EOT)
    out = []
    for i, enc in enumerate(tok.encode_batch(docs, add_special_tokens=False)):
        if i:
            out.append(eot)
        out.extend(enc.ids)
    return torch.tensor(out, dtype=torch.long)


# ---------------------------------------------------------------- model
def make_model(vocab, ids):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    cfg = Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=256, intermediate_size=768, num_hidden_layers=6,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=True,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=224, decoder_sparse_step=1,
        mlp_only_layers=[], norm_topk_prob=True, output_router_logits=True,
        router_aux_loss_coef=0.01, bos_token_id=ids[EOT], eos_token_id=ids[IM_END],
        pad_token_id=ids[EOT])
    if hasattr(cfg, "rope_parameters"):  # transformers 5
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    else:
        cfg.rope_theta = 10000.0
    cfg._attn_implementation = "sdpa"
    return Qwen3MoeForCausalLM(cfg)


def lr_at(step, total, peak, warmup=100, floor=0.05):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def windows(ids, ctx):
    return [ids[i:i + ctx] for i in range(0, len(ids), ctx) if len(ids[i:i + ctx]) > 1]


@torch.no_grad()
def eval_nll(model, ids, ctx, dev, limit=None):
    """Mean NLL (nats) over the predicted tokens of ctx-token windows, as ft perplexity counts."""
    model.eval()
    ws = windows(ids[:limit] if limit else ids, ctx)
    total, count = 0.0, 0
    for i in range(0, len(ws), 32):
        group = ws[i:i + 32]
        same = [w for w in group if len(w) == len(group[0])]
        rest = [w for w in group if len(w) != len(group[0])]
        for batch in ([torch.stack(same)] if same else []) + [w[None] for w in rest]:
            x = batch.to(dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=x[:, :-1]).logits
            nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                  x[:, 1:].reshape(-1), reduction="sum")
            total += nll.item()
            count += x[:, 1:].numel()
    model.train()
    return total / count, count


def unigram_nll(train_ids, ids, ctx, vocab):
    """Add-one unigram model from the training stream, scored on the same predicted tokens."""
    counts = torch.bincount(train_ids, minlength=vocab).double() + 1
    logp = (counts / counts.sum()).log()
    targets = torch.cat([w[1:] for w in windows(ids, ctx)])
    return -logp[targets].mean().item(), targets.numel()


# ---------------------------------------------------------------- checkpoint
def per_expert(name, t, hidden, inter):
    """transformers-5 stacked experts -> hub per-expert names (either layout accepted)."""
    if name.endswith("experts.gate_up_proj"):
        if t.shape[1] == hidden and t.shape[2] == 2 * inter:
            t = t.transpose(1, 2)
        assert t.shape[1:] == (2 * inter, hidden), (name, t.shape)
        p = name[: -len("gate_up_proj")]
        return {**{f"{p}{e}.gate_proj.weight": t[e, :inter] for e in range(t.shape[0])},
                **{f"{p}{e}.up_proj.weight": t[e, inter:] for e in range(t.shape[0])}}
    if name.endswith("experts.down_proj"):
        if t.shape[1] == inter and t.shape[2] == hidden:
            t = t.transpose(1, 2)
        assert t.shape[1:] == (hidden, inter), (name, t.shape)
        p = name[: -len("down_proj")]
        return {f"{p}{e}.down_proj.weight": t[e] for e in range(t.shape[0])}
    return {name: t}


def save_checkpoint(model, tok, ids, out):
    os.makedirs(out, exist_ok=True)
    c = model.config
    state = {}
    for name, t in model.state_dict().items():
        state.update(per_expert(name, t.detach().float().cpu(), c.hidden_size,
                                c.moe_intermediate_size))
    state.pop("lm_head.weight", None)  # tied to model.embed_tokens.weight
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sorted(state.items())},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    c.output_router_logits = False
    c.save_pretrained(out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        j = json.load(f)
    j["num_experts"] = c.num_experts if hasattr(c, "num_experts") else j["num_local_experts"]
    j["tie_word_embeddings"] = True
    j["dtype"] = "bfloat16"
    with open(path, "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
    for stale in ("generation_config.json",):
        if os.path.exists(os.path.join(out, stale)):
            os.remove(os.path.join(out, stale))
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": ids[EOT], "eos_token_id": ids[IM_END],
                   "pad_token_id": ids[EOT], "do_sample": False}, f, indent=2)
    tok.save(os.path.join(out, "tokenizer.json"))
    added = {str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": True} for s in (EOT, IM_START, IM_END)}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOT,
                   "eos_token": IM_END, "pad_token": EOT, "unk_token": None,
                   "add_bos_token": False, "add_eos_token": False, "model_max_length": 2048,
                   "clean_up_tokenization_spaces": False, "added_tokens_decoder": added,
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
    return sum(v.numel() for v in state.values())


def check_reload(model, out, dev):
    """The saved checkpoint, loaded back by transformers, gives the bf16-rounded model's logits."""
    try:
        from transformers import Qwen3MoeForCausalLM
        back = Qwen3MoeForCausalLM.from_pretrained(out, dtype=torch.float32).to(dev).eval()
        x = torch.arange(3, 67, device=dev)[None]
        with torch.no_grad():
            a = back(input_ids=x).logits.float()
            ref = {k: v.to(torch.bfloat16).float() for k, v in model.state_dict().items()}
            m2 = type(model)(model.config).to(dev).eval()
            m2.load_state_dict(ref)
            b = m2(input_ids=x).logits.float()
        print(f"reload check: max|logit diff| {(a - b).abs().max().item():.2e}")
    except Exception as e:  # a report, not a reason to lose the checkpoint
        print(f"reload check failed: {type(e).__name__}: {e}")


@torch.no_grad()
def samples(model, tok, dev):
    model.eval()
    im_end = tok.token_to_id(IM_END)
    for q in PROMPTS:
        text = f"{IM_START}user\n{q}{IM_END}\n{IM_START}assistant\n"
        x = torch.tensor([tok.encode(text).ids], device=dev)
        for _ in range(48):
            nxt = model(input_ids=x).logits[0, -1].argmax()
            if nxt.item() == im_end:
                break
            x = torch.cat([x, nxt.view(1, 1)], dim=1)
        print(f"Q: {q}\nA: {tok.decode(x[0].tolist()).split('assistant' + chr(10))[-1]}")


# ---------------------------------------------------------------- main
def main():
    a = parse_args()
    t_start = time.time()
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    dev = "cuda"
    train_docs = read_docs(os.path.join(a.corpus, "train.txt"), 4000 if a.quick else None)
    held_docs = read_docs(os.path.join(a.corpus, "heldout.txt"), 300 if a.quick else None)
    tok = train_tokenizer(train_docs, a.vocab)
    ids = {s: tok.token_to_id(s) for s in (EOT, IM_START, IM_END)}
    vocab = tok.get_vocab_size()
    train_ids, held_ids = encode_stream(tok, train_docs), encode_stream(tok, held_docs)
    print(f"tokenizer: vocab {vocab}, specials {ids}; train {len(train_ids)} tokens "
          f"({sum(map(len, train_docs)) / len(train_ids):.2f} chars/token), held-out "
          f"{len(held_ids)} tokens; {time.time() - t_start:.0f}s")

    model = make_model(vocab, ids).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), fused=True)
    data = train_ids.to(dev)
    gen = torch.Generator().manual_seed(a.seed)
    total = 30 if a.quick else a.steps
    ar = torch.arange(a.ctx + 1, device=dev)
    ema, best, t0 = None, (float("inf"), -1, None), time.time()
    eval_every = 10 if a.quick else 200
    step = 0
    while step < total:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, a.lr)
        starts = torch.randint(0, len(data) - a.ctx - 1, (a.batch,), generator=gen).to(dev)
        batch = data[starts[:, None] + ar]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=batch[:, :-1])
        ce = F.cross_entropy(out.logits.float().reshape(-1, vocab), batch[:, 1:].reshape(-1))
        aux = getattr(out, "aux_loss", None)
        loss = ce + (model.config.router_aux_loss_coef * aux if aux is not None else 0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = ce.item() if ema is None else 0.98 * ema + 0.02 * ce.item()
        if step == 20 and not a.quick:  # fit the schedule into the time budget, once
            per_step = (time.time() - t0) / step
            total = min(total, int(a.time_budget / per_step))
            print(f"step time {per_step * 1e3:.0f} ms -> {total} steps")
        if step % eval_every == 0 or step == total:
            h, _ = eval_nll(model, held_ids, a.ctx, dev, limit=60000)
            if h < best[0]:
                best = (h, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            print(f"step {step}/{total} lr {lr_at(step, total, a.lr):.2e} train {ema:.3f} "
                  f"aux {aux.item() if aux is not None else 0:.3f} held-out(60k) {h:.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)
    train_s = time.time() - t0
    model.load_state_dict(best[2])
    h, n = eval_nll(model, held_ids, a.ctx, dev)
    u, _ = unigram_nll(train_ids, held_ids, a.ctx, vocab)
    tr, _ = eval_nll(model, train_ids, a.ctx, dev, limit=len(held_ids))
    print(f"RESULT steps {step} (kept step {best[1]}), {train_s:.0f}s training, tokens seen "
          f"{step * a.batch * a.ctx / 1e6:.1f}M; train loss {tr:.4f} (ema {ema:.4f}); held-out "
          f"{n} tokens: loss {h:.4f} ppl {math.exp(h):.2f}; unigram ppl {math.exp(u):.2f}")
    if os.path.exists(a.sample):
        with open(a.sample, encoding="utf-8") as f:
            s_ids = torch.tensor(tok.encode(f.read(), add_special_tokens=False).ids)
        hs, ns = eval_nll(model, s_ids, a.ctx, dev)
        us, _ = unigram_nll(train_ids, s_ids, a.ctx, vocab)
        print(f"RESULT sample {a.sample}: {ns} tokens, model ppl {math.exp(hs):.2f} "
              f"(nll {hs:.4f}), unigram ppl {math.exp(us):.2f} (nll {us:.4f})")
    n_saved = save_checkpoint(model, tok, ids, a.out)
    print(f"saved {n_saved / 1e6:.2f}M parameters to {a.out}")
    check_reload(model, a.out, dev)
    samples(model, tok, dev)
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
