#!/bin/bash
# Run 4 (2026-12-03, 13:15-14:46): the README's study searched, promoted and calibrated in one sitting on
# one machine (2-core AVX2 VM), from the repository root, a fresh database.
export GEMMA_SWEEP_CHALLENGE_DATA=/path/to/the/organisers/files
URL=sqlite:////tmp/cal4/sweeps.db
.venv/bin/python -m sweep.run --study ctk --storage $URL > sweep.txt 2>&1
.venv/bin/python -m sweep.claims --study ctk --storage $URL > claims-before.txt 2>&1
# bounded so that the session could commit it: the re-runs that would end after 14:46 were not started
left=$(( $(date -d "14:46" +%s) - $(date +%s) ))
.venv/bin/python -m benchmarks.claim_calibration --study ctk --storage $URL --time-limit $left \
  --out claim_calibration.txt > calibration.log 2>&1
.venv/bin/python -m sweep.claims --study ctk --storage $URL > claims-after.txt 2>&1
# Session of 2026-12-03 (17:24-17:38), the same machine (the same kernel boot id in every boot's provenance),
# after the test block had run: the calibration's last 5 re-runs, then its report
.venv/bin/python -m benchmarks.claim_calibration --study ctk --storage $URL --resume 509e6ebaf0d2 \
  --out claim_calibration.txt > calibration-resume.log 2>&1
