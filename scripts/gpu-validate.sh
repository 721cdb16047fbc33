#!/usr/bin/env bash
# Validate the GPU path in one short call (issue #35 item 5) on a fresh GPU machine whose image has torch and Triton
# (no .venv; the wheels it lacks travel in .whl/, from scripts/gpu-wheels.sh, as for scripts/gpu-campaign.sh):
#   bash scripts/gpu-validate.sh [--budget-s 280]     # output under $OUT (default ./validate-out), at most 6 files
#   bash scripts/gpu-validate.sh --dry-run            # the plan, on any machine (CI runs it)
# Exit 0 only if the gate passed and harness and profiler agree on every case; docs/measurement.md, "Verify on a GPU".
set -euo pipefail
cd "$(dirname "$0")/.."
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ "$dry" = 0 ]; then
  source scripts/gpu-env.sh gpu-validate
else
  source scripts/gpu-env.sh gpu-validate --local
fi
exec "$PY" scripts/gpu_validate.py "$@"
