"""manifest.py WORKDIR N TREE MARGIN: write .carry/MANIFEST.txt (and a copy into every .carry/cN)."""

import os
import subprocess
import sys
import tarfile

W, n, tree, margin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
MiB = 1 << 20
members = []
with tarfile.open(os.path.join(W, "stream.tar")) as t:
    for m in t.getmembers():
        members.append((m.name, m.offset_data, m.size))
parts, pos = [], 0
for i in range(1, n + 1):
    d = f".carry/c{i}"
    files = sorted(os.listdir(d))
    piece = [f for f in files if f.startswith("stream.part")][0]
    size = os.path.getsize(os.path.join(d, piece))
    covers = [
        f"{name} [{max(off, pos) - off}:{min(off + sz, pos + size) - off}] of {sz}"
        for name, off, sz in members
        if off < pos + size and off + sz > pos
    ]
    du = int(subprocess.check_output(["du", "-sb", d]).split()[0])
    parts.append((i, d, files, piece, size, covers, du))
    pos += size
wheels = sorted(os.listdir(os.path.join(W, "b", "wheels")))
vsz = int(subprocess.check_output(["du", "-sb", os.path.join(W, "b", "site")]).split()[0])
bundle = os.path.getsize(os.path.join(W, "s", "bundle.tar.xz"))


def render(extra):
    L = []
    L.append(f"# .carry packing: {n} device calls (nvidia-h200), made back to back while the machine stays warm\n")
    L.append(
        f"Budget per call: 64 MiB = 67,108,864 bytes; project tree at build time {tree:,} bytes; margin {margin:,} bytes.\n"
    )
    L.append("Carry exactly one folder per call. Calls 1..N-1 only copy their piece to /tmp/stage; the last call")
    L.append("re-joins, installs into /tmp/site and checks (bash .carry/cN/install.sh all .carry/cN). Stream sha256:")
    L.append(open(".carry/stream.sha256").read().strip() + "\n")
    for i, d, files, _piece, _size, covers, du0 in parts:
        du = du0 + extra
        cmd = (
            f"bash {d}/install.sh stage {d}"
            if i < n
            else f"bash {d}/install.sh all {d} && export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 "
            f"GEMMA_SWEEP_TOKENIZER=/tmp/tok && <work>"
        )
        L.append(
            f'## call {i}: carry ["{d}"]   ({du:,} bytes du -b; with the tree {du + tree:,} = {(du + tree) / MiB:.2f} MiB)'
        )
        L.append(f"   command: {cmd}")
        L.append(
            "   files: "
            + ", ".join(f"{f} ({os.path.getsize(os.path.join(d, f)):,})" for f in files)
            + f", MANIFEST.txt ({extra:,})"
        )
        L.append("   piece holds: " + "; ".join(covers) + "\n")
    L.append("## what the re-joined stream holds")
    for name, _off, sz in members:
        L.append(f"- {name}: {sz:,} bytes")
    L.append(
        f"\nbundle.tar.xz ({bundle:,} bytes, xz -9e) unpacks to: site/ (vLLM 0.24.0 tree, {vsz:,} bytes: device-stage-vllm's slim"
    )
    L.append(
        "  tree with vllm/_C_stable_libtorch.abi3.so pruned to sm_90 images), tok/ (tokenizer.json, tokenizer_config.json,"
    )
    L.append(f"  chat_template.jinja), wheels/ ({len(wheels)} wheels, STORED):")
    for w in wheels:
        L.append(f"  - {w}")
    return "\n".join(L) + "\n"


text = render(0)
text = render(len(text))
text = render(len(text))
open(".carry/MANIFEST.txt", "w").write(text)
for _i, d, *_ in parts:
    open(os.path.join(d, "MANIFEST.txt"), "w").write(text)
print(text[:3000])
