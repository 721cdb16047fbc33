#!/usr/bin/env bash
# One script for a short GPU window (issue #48; docs/measurement.md, "On a short GPU window"): environment check, the
# check gate on CUDA, smoke, validation (a slice of tier 1 against the profiler), tier 1, then the models tier;
# resumable across calls and windows from --out, records packed there after every group.
#   bash scripts/gpu-window.sh [--out DIR] [--window 15] [--call-limit 10]   # on the GPU machine (carry .whl)
#   bash scripts/gpu-window.sh --dry-run [--out DIR]       # the plan, per step, with its cost source (any machine)
#   bash scripts/gpu-window.sh --rehearse [SCENARIO] --out DIR   # the same Python on the CPU, simulated device
# Exit: 0 all done and clean; 3 not finished (run again with the same --out); 1 a problem (report.md says which);
# 2 no CUDA device (or no jsonschema) here.
set -euo pipefail
cd "$(dirname "$0")/.."
local_run=0
for a in "$@"; do case "$a" in --dry-run|--rehearse|--rehearse=*) local_run=1 ;; esac; done
if [ "$local_run" = 0 ]; then
  source scripts/gpu-env.sh gpu-window
else
  source scripts/gpu-env.sh gpu-window --local
fi
exec "$PY" scripts/gpu_window.py "$@"
