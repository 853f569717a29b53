"""Prune a CUDA fat binary section in place to what an sm_90 (H100/H200) GPU can use.

For every fatbin in .nv_fatbin:
  * it has an ELF (SASS) entry for arch 90 (sm_90 or sm_90a): keep the arch-90 ELF and PTX entries only;
  * else it has PTX for an arch <= 90: keep those PTX entries only (the driver JIT-compiles them);
  * else (nothing runs on sm_90 anyway): leave it untouched.
Kept entries are moved, unchanged, to the front of the fatbin; its header's size is reduced; the freed
bytes are zeroed. File size, section layout and every fatbin's start address stay the same, so the
registration records (.nvFatBinSegment) still point to valid fatbins. The zeros then compress away.
"""

import collections
import struct
import subprocess
import sys

MAGIC = 0xBA55ED50


def fatbin_section(path):
    out = subprocess.check_output(["readelf", "-S", "-W", path], text=True)
    for line in out.splitlines():
        if "] .nv_fatbin " in line:
            parts = line.split("]")[1].split()
            return int(parts[3], 16), int(parts[4], 16)
    raise SystemExit(f"{path}: no .nv_fatbin")


def parse(data, off, size):
    pos, end = off, off + size
    fbs = []
    while pos < end:
        if struct.unpack_from("<I", data, pos)[0] != MAGIC:
            pos += 8
            continue
        magic, ver, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
        p, e = pos + hsz, pos + hsz + fsz
        ents = []
        while p < e:
            kind, ev, ehs, psz = struct.unpack_from("<HHIQ", data, p)
            arch = struct.unpack_from("<I", data, p + 28)[0]
            ents.append(dict(off=p, len=ehs + psz, kind=kind, arch=arch))
            p += ehs + psz
        assert p == e, (hex(pos), p, e)
        fbs.append(dict(off=pos, hsz=hsz, fsz=fsz, ents=ents))
        pos = e
    return fbs


def keep_for_sm90(ents):
    if any(x["kind"] == 2 and x["arch"] == 90 for x in ents):
        return [x for x in ents if x["arch"] == 90 and x["kind"] in (1, 2)]
    ptx = [x for x in ents if x["kind"] == 1 and x["arch"] <= 90]
    return ptx if ptx else ents


def main(src, dst):
    data = bytearray(open(src, "rb").read())
    off, size = fatbin_section(src)
    fbs = parse(data, off, size)
    before = collections.Counter()
    after = collections.Counter()
    for fb in fbs:
        keep = keep_for_sm90(fb["ents"])
        for x in fb["ents"]:
            before[(x["kind"], x["arch"])] += x["len"]
        for x in keep:
            after[(x["kind"], x["arch"])] += x["len"]
        if len(keep) == len(fb["ents"]):
            continue
        blob = b"".join(bytes(data[x["off"] : x["off"] + x["len"]]) for x in keep)
        start = fb["off"] + fb["hsz"]
        data[start : start + fb["fsz"]] = blob + bytes(fb["fsz"] - len(blob))
        struct.pack_into("<Q", data, fb["off"] + 8, len(blob))
    open(dst, "wb").write(data)
    # re-parse the result and check it
    fbs2 = parse(data, off, size)
    assert len(fbs2) >= len(fbs)  # zeroed tails are skipped 8 bytes at a time (no magic there)

    def names(fs):
        return {f["off"] for f in fs}

    assert names(fbs) <= names(fbs2)

    def fmt(c):
        return " ".join(f"{'ELF' if k == 2 else 'PTX'}{a}:{v / 1e6:.1f}" for (k, a), v in sorted(c.items()))

    print(
        f"{src}: {len(fbs)} fatbins\n  before {sum(before.values()) / 1e6:.1f} MB  {fmt(before)}\n  after  {sum(after.values()) / 1e6:.1f} MB  {fmt(after)}"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
