# The summary of round*.txt: each arm's TPS, the ABBA blocks' ratios and their t interval, the boot times.
import math, statistics as st, sys
rows = []
for path in sys.argv[1:]:
    for line in open(path):
        i, n, tps, boot, ppl = line.split()
        rows.append((path, int(i), int(n), float(tps), float(boot)))
on = [r[3] for r in rows if r[2] > 0]; off = [r[3] for r in rows if r[2] == 0]
def cv(x): return st.stdev(x) / st.mean(x)
print(f"on  n={len(on)} mean {st.mean(on):.2f} median {st.median(on):.2f} range {min(on):.2f}..{max(on):.2f} cv {cv(on):.1%}")
print(f"off n={len(off)} mean {st.mean(off):.2f} median {st.median(off):.2f} range {min(off):.2f}..{max(off):.2f} cv {cv(off):.1%}")
# ABBA blocks of 4 boots: log ratio of the block's on mean to its off mean
blocks = []
for path in dict.fromkeys(r[0] for r in rows):
    rs = [r for r in rows if r[0] == path]
    for k in range(0, len(rs), 4):
        b = rs[k:k+4]
        a = st.mean(r[3] for r in b if r[2] > 0); o = st.mean(r[3] for r in b if r[2] == 0)
        blocks.append(math.log(a / o))
m = st.mean(blocks); se = st.stdev(blocks) / math.sqrt(len(blocks))
print("blocks:", " ".join(f"{math.exp(b)-1:+.1%}" for b in blocks))
print(f"block mean {math.exp(m)-1:+.1%}, standard error {se:.1%} (log), t {m/se:.2f} on {len(blocks)-1} df, 90% interval {math.exp(m-2.015*se)-1 if len(blocks)==6 else float('nan'):+.1%}..{math.exp(m+2.015*se)-1 if len(blocks)==6 else float('nan'):+.1%}")
bon = [r[4] for r in rows if r[2] > 0]; boff = [r[4] for r in rows if r[2] == 0]
print(f"boot s: on median {st.median(bon):.1f} (range {min(bon):.1f}..{max(bon):.1f}), off median {st.median(boff):.1f} (range {min(boff):.1f}..{max(boff):.1f})")
