#!/usr/bin/env bash
# The GPU campaign on a fresh GPU machine whose image has torch and Triton (no pip install, no .venv):
#   bash scripts/gpu-campaign.sh --tier 1 --commit <sha> [--resume results/campaign-in] [--budget-s 540]
#   bash scripts/gpu-campaign.sh --dry-run          # plan on any machine: counts and estimated minutes per tier
# Records land under $OUT (default ./campaign-out) as at most 8 gzipped files; see docs/measurement.md, "GPU campaign".
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! "$PY" -c "import torch" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# the commit of this tree: an argument wins, else the environment, else git when the tree has .git
if [ -z "${NORMBENCH_GIT_COMMIT:-}" ] && [ -d .git ] && command -v git >/dev/null; then
  NORMBENCH_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"; export NORMBENCH_GIT_COMMIT
fi
exec "$PY" -m normbench.campaign "$@"
