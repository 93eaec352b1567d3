#!/usr/bin/env python3
"""Instructions per 32-weight block of statelm's aarch64 kernels, read from the generated code.

    objdump -d --no-show-raw-insn -C <objects of libstatelm_quant.rlib> > quant.asm
    python3 bench/arm_insns.py quant.asm

For each kernel it finds the loop that walks the weight blocks (the largest backward branch
whose body advances a pointer by a multiple of the block size), and prints the loop's
instruction count divided by the blocks one pass handles (and by the rows/vectors a tile
kernel serves). A static count: what one block costs the core's front end, not a timing.
"""
import re
import sys

# (symbol suffix, weight block bytes, weights per block, dots per pass of one block)
KERNELS = [
    ("legacy::dot_q4_0_q8_0", 18, 32, 1),
    ("legacy::dot_q5_0_q8_0", 22, 32, 1),
    ("legacy::dot_q8_0_q8_0", 34, 32, 1),
    ("legacy::rows8_q4_0_q8_0", 18, 32, 8),
    ("legacy::rows8_q5_0_q8_0", 22, 32, 8),
    ("legacy::rows8_q8_0_q8_0", 34, 32, 8),
    ("legacy::tile_q4_0_q8_0", 18, 32, 8),
    ("legacy::tile_q5_0_q8_0", 22, 32, 8),
    ("legacy::tile_q8_0_q8_0", 34, 32, 8),
    ("kquants::dot_q4_k_q8_k", 144, 256, 1),
    ("kquants::dot_q5_k_q8_k", 176, 256, 1),
    ("kquants::dot_q6_k_q8_k", 210, 256, 1),
]
ISAS = [("scalar", "scalar::", ""), ("neon", "neon::", ""), ("neon+dotprod", "neon::", "_dotprod")]


def functions(text):
    """name -> list of (offset, mnemonic, operands)"""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return out


def block_loop(insns, block_bytes):
    """(instructions in the loop, blocks per pass) of the largest loop stepping by blocks (the
    block loop; loops inside it, over rows or groups, are part of a block's cost)."""
    best = None
    for i, (off, mn, ops) in enumerate(insns):
        if not (mn.startswith("b.") or mn in ("b", "cbnz", "cbz", "tbnz", "tbz")):
            continue
        m = re.search(r"\b([0-9a-f]+) <", ops)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= off:
            continue
        body = [x for x in insns if target <= x[0] <= off]
        steps = []
        for _, bmn, bops in body:
            for imm in re.findall(r"#(0x[0-9a-f]+|\d+)", bops):
                v = int(imm, 16) if imm.startswith("0x") else int(imm)
                if bmn in ("add", "sub", "ldr", "ldp", "ldrb", "ldrh") and v and v % block_bytes == 0:
                    steps.append(v // block_bytes)
        if not steps:
            continue
        cand = (len(body), min(steps))
        if best is None or cand[0] > best[0]:
            best = cand
    return best


def main():
    fns = functions(open(sys.argv[1]).read())
    print(f"| kernel | {' | '.join(i[0] for i in ISAS)} |")
    print("|---|" + "---|" * len(ISAS))
    for suffix, bb, weights, per_pass in KERNELS:
        row = []
        for _, module, tail in ISAS:
            if module == "scalar::" and "rows8" in suffix:
                row.append("—")
                continue
            name = next((n for n in fns if n.endswith(module + suffix + tail)), None)
            found = name and block_loop(fns[name], bb)
            if not found:
                row.append("?")
                continue
            n, blocks = found
            row.append(f"{n / blocks / per_pass * 32 / weights:.1f}")
        print(f"| {suffix.split('::')[1]} | {' | '.join(row)} |")


if __name__ == "__main__":
    main()
