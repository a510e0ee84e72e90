#!/usr/bin/env python3
# The client side of tests/cuda/elastic_gpu.sh (stdlib HTTP; torch only for the pressure mode).
#   streams PORT OUT REF|none: 8 concurrent streaming greedy completions; with REF, a resize
#     loop POSTs /v1/cache/rebuild every 0.5 s while they run and the texts must equal REF's.
#   pressure PORT OUT none: long generations run while this process takes 40 GB of VRAM and
#     frees it; the engine must shrink, keep generating and grow back.
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request

mode, port, out, ref = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
base = f"http://127.0.0.1:{port}"


def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return json.load(r)


def post(path, body, timeout=120):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def stream(prompt, max_tokens, result):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    text, finish, err = "", None, None
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    err = ev["error"]
                    continue
                for ch in ev.get("choices", []):
                    text += ch.get("text", "")
                    finish = ch.get("finish_reason") or finish
    except Exception as e:  # noqa: BLE001 - reported as a failed request
        err = str(e)
    result.update(text=text, finish=finish, error=err)


def pool(status, name):
    return next(p for p in status["pools"] if p["name"] == name)


fails = 0


def check(ok, what):
    global fails
    print(("PASS " if ok else "FAIL ") + what)
    fails += 0 if ok else 1


if mode == "streams":
    prompts = [f"Story {i}: once upon a time in a land of {w}" for i, w in
               enumerate(["rivers", "cats", "words", "music", "stones", "trees", "boats", "ink"])]
    results = [dict() for _ in prompts]
    threads = [threading.Thread(target=stream, args=(p, 1200, r)) for p, r in zip(prompts, results)]
    st = get("/v1/cache/status")
    moe, kv = pool(st, "moe"), pool(st, "kv")
    print(f"pools at start: moe {moe['size']} [{moe['min']}, {moe['max']}], kv {kv['size']} "
          f"[{kv['min']}, {kv['max']}]")
    t0 = time.time()
    for t in threads:
        t.start()
    applied = []
    codes = []
    if ref != "none":
        m_sizes = [moe["min"], moe["max"], (moe["min"] + moe["max"]) // 2, moe["min"] + 1,
                   moe["size"]]
        k_sizes = [kv["size"], min(kv["max"], 2 * kv["size"]) // 8 * 8,
                   min(kv["max"], 3 * kv["size"] // 2) // 8 * 8]
        i = 0
        while any(t.is_alive() for t in threads):
            body = {"moe_slots": m_sizes[i % len(m_sizes)], "wait_s": 10}
            if i % 2 == 1:
                body["kv_tokens"] = k_sizes[(i // 2) % len(k_sizes)]
            code, r = post("/v1/cache/rebuild", body)
            codes.append(code)
            if code == 200:
                applied.append(r["seconds"])
            else:
                print(f"resize {body} -> {code} {r}")
            i += 1
            time.sleep(0.5)
    for t in threads:
        t.join()
    wall = time.time() - t0
    texts = [r.get("text", "") for r in results]
    for k, r in enumerate(results):
        check(r.get("error") is None and r.get("finish") == "length",
              f"stream {k} finished ({r.get('finish')}, {len(r.get('text', ''))} chars, "
              f"error {r.get('error')})")
    stats = get("/v1/stats")
    summary = {"texts": texts, "wall_s": wall, "resize_codes": codes, "apply_s": applied,
               "stats": stats}
    if ref != "none":
        want = json.load(open(ref))["texts"]
        for k in range(len(texts)):
            check(texts[k] == want[k], f"stream {k} equals the unresized run")
        check(len(applied) >= 5 and all(c == 200 for c in codes),
              f"{len(applied)} resizes applied during the streams, codes {sorted(set(codes))}")
        el = stats["elastic"]
        check(el["resize_failures"] == 0, f"no failed resize ({el['last_error']})")
        if applied:
            q = statistics.quantiles(applied, n=100) if len(applied) > 1 else applied * 99
            print(f"resize apply: n {len(applied)}, p50 {1e3 * statistics.median(applied):.2f} ms, "
                  f"p99 {1e3 * q[98]:.2f} ms, max {1e3 * max(applied):.2f} ms; engine p50 "
                  f"{1e3 * el['resize_p50_s']:.2f} ms p99 {1e3 * el['resize_p99_s']:.2f} ms; "
                  f"decode {stats['generated_tokens_total'] / wall:.0f} tok/s over {wall:.1f} s")
    else:
        print(f"unresized: {stats['generated_tokens_total']} tokens in {wall:.1f} s")
    json.dump(summary, open(out, "w"))

elif mode == "pressure":
    import torch
    stop = threading.Event()
    gens = []

    def generate_loop():
        while not stop.is_set():
            r = {}
            stream("A long tale about the sea and the ships that sailed it", 1800, r)
            gens.append(r)

    g = threading.Thread(target=generate_loop)
    g.start()
    time.sleep(1.0)

    def moe_size():
        return pool(get("/v1/cache/status"), "moe")["size"]

    def wait_for(pred, s):
        end = time.time() + s
        while time.time() < end:
            if pred():
                return True
            time.sleep(0.1)
        return False

    size0 = moe_size()
    st0 = get("/v1/stats")["elastic"]
    print(f"before: moe {size0} slots, free {st0['free_bytes'] / 2**30:.1f} GiB, floor "
          f"{st0['floor_bytes'] / 2**30:.1f} GiB")
    t0 = time.time()
    hog = torch.empty(40 * 2**30, dtype=torch.uint8, device="cuda")
    hog.fill_(1)
    torch.cuda.synchronize()
    shrunk = wait_for(lambda: get("/v1/stats")["elastic"]["shrinks"] >= 1, 15)
    t_shrink = time.time() - t0
    size1 = moe_size()
    check(shrunk and size1 < size0, f"40 GB taken: shrank {size0} -> {size1} slots in {t_shrink:.2f} s")
    done_before = len(gens)
    time.sleep(1.0)
    del hog
    torch.cuda.empty_cache()
    t1 = time.time()
    grew = wait_for(lambda: get("/v1/stats")["elastic"]["grows"] >= 1, 15)
    wait_for(lambda: moe_size() == size0, 10)
    size2 = moe_size()
    check(grew and size2 == size0, f"40 GB freed: grew back to {size2} slots in {time.time() - t1:.2f} s")
    stop.set()
    g.join()
    st = get("/v1/stats")
    check(all(r.get("error") is None and r.get("finish") == "length" for r in gens) and gens,
          f"{len(gens)} long generations all completed ({done_before} before the free); "
          f"{st['generated_tokens_total']} tokens")
    el = st["elastic"]
    print(f"elastic stats: shrinks {el['shrinks']} grows {el['grows']} resizes {el['resizes']} "
          f"p50 {1e3 * el['resize_p50_s']:.2f} ms p99 {1e3 * el['resize_p99_s']:.2f} ms")
    json.dump({"sizes": [size0, size1, size2], "stats": st,
               "gens": [{k: v for k, v in r.items() if k != "text"} for r in gens]}, open(out, "w"))

sys.exit(1 if fails else 0)
