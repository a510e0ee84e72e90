#!/usr/bin/env python3
"""Reads Nsight Compute's per-kernel text output (tools/gpu/decode_profile.sh) and prints the
kernels of the last complete decode layer: from the last attention decode_kernel back to the
GEMV before it (QKV), forward to the down projection after it, with time, DRAM bytes and the
bandwidth they imply."""
import re
import sys


def records(path):
    out, cur = [], None
    for line in open(path, errors="replace"):
        if line.startswith("  void") or line.startswith("  ft::"):
            m = re.search(r"::(\w+)(<[^(]*>)?\(.*\((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", line)
            if m:
                cur = {"name": m.group(1) + (m.group(2) or ""),
                       "grid": "x".join(m.group(i) for i in (3, 4, 5)),
                       "block": "x".join(m.group(i) for i in (6, 7, 8))}
                out.append(cur)
            continue
        m = re.match(r"\s+(\S+)\s+(\S+)?\s+([\d.,]+)$", line)
        if m and cur is not None:
            cur[m.group(1)] = float(m.group(3).replace(",", ""))
            cur[m.group(1) + ".unit"] = m.group(2) or ""
    return out


def mbytes(r):
    v, u = r.get("dram__bytes_read.sum", 0.0), r.get("dram__bytes_read.sum.unit", "")
    return v * {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}.get(u, 1.0)


def main():
    recs = records(sys.argv[1])
    att = [i for i, r in enumerate(recs) if r["name"].startswith("decode_kernel")]
    if len(att) < 2:
        sys.exit("ncu_layer_table: fewer than two decode layers in the profile")
    i = att[-2]  # the last but one: its layer is complete on both sides
    first = i - 1
    last = i
    ends = ("down_stream", "down_ahead")  # the experts layer's last kernel
    while last + 1 < len(recs) and not recs[last + 1]["name"].startswith(ends):
        last += 1
    last += 1
    total_us = total_mb = 0.0
    print("| kernel | grid x block | regs | us | DRAM MB | GB/s |")
    print("|---|---|---|---|---|---|")
    for r in recs[first:last + 1]:
        us, mb = r.get("gpu__time_duration.sum", 0.0), mbytes(r)
        total_us += us
        total_mb += mb
        print(f"| {r['name']} | {r['grid']} x {r['block']} | "
              f"{int(r.get('launch__registers_per_thread', 0))} | {us:.2f} | {mb:.2f} | "
              f"{mb / us * 1e3 if us else 0:.0f} |")
    print(f"| layer | | | {total_us:.2f} | {total_mb:.2f} | {total_mb / total_us * 1e3:.0f} |")


if __name__ == "__main__":
    main()
