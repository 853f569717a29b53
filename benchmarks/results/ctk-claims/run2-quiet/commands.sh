#!/usr/bin/env bash
# The README's ctk flow after its search, on a quiet machine: the search's 7 trials copied from run 1
# (their promotion, verifications and claims removed), then a new promotion, the calibration,
# verification, submission and its check, each console to $L.
set -uo pipefail
cd /tmp/demo3
export PYTHONPATH=/tmp/demo3 HF_HUB_OFFLINE=1
PY=/work/main/.venv/bin/python
D=/tmp/demo3db; rm -rf $D; mkdir -p $D
cp /work/main/benchmarks/results/ctk-claims/run1-beside-load/sweeps.db $D/sweeps.db
python3 - $D/sweeps.db <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("delete from promotions"); c.execute("delete from verifications")
c.execute("delete from study_user_attributes where key in ('promotion', 'claims')")
c.commit()
PY
S=sqlite:///$D/sweeps.db
L=/tmp/demo3_logs; rm -rf $L; mkdir -p $L
step() { local name=$1; shift; echo "== $name: $* ($(date +%T))"; local t=$SECONDS; "$@" > $L/$name.log 2>&1; echo "== $name: exit $? after $((SECONDS - t)) s"; }
step sweep $PY -m sweep.run --study ctk --storage $S
step claims $PY -m sweep.claims --study ctk --storage $S
step calibration $PY -m benchmarks.claim_calibration --study ctk --storage $S --reruns 20
step verify $PY -m sweep.verify --study ctk --storage $S --top 1 --repeats 3
step submit $PY -m sweep.submit --study ctk --storage $S --out $D/submission
[[ -d $D/submission ]] || step submit_unverified $PY -m sweep.submit --study ctk --storage $S --allow-unverified --out $D/submission
step check $PY -m sweep.submit --check $D/submission
echo done
