#!/usr/bin/env bash
# The GPU campaign on a fresh GPU machine whose image has torch and Triton (no .venv; the wheels it lacks travel in
# .whl/, from scripts/gpu-wheels.sh):
#   bash scripts/gpu-campaign.sh --tier 1 --commit <sha> [--resume results/campaign-in] [--budget-s 540]
#   bash scripts/gpu-campaign.sh --dry-run          # plan on any machine: counts and estimated minutes per tier
# Records land under $OUT (default ./campaign-out) as at most 8 gzipped files; see docs/measurement.md, "GPU campaign".
# It starts with a smoke step (one tier-1 case per backend; --no-smoke skips it) and exits 1 when anything is refused
# by the check gate, a case fails or a tier writes nothing: the reasons are printed and in campaign-log.json's
# "problems".
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! "$PY" -c "import torch" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
# The image lacks jsonschema (record validation needs it) and Liger-Kernel: install the wheels carried in .whl/ (from
# scripts/gpu-wheels.sh) into .pydeps, not into the image.
if ! "$PY" -c "import jsonschema" 2>/dev/null && [ -d .whl ]; then
  "$PY" -m pip install --quiet --no-deps --no-index --upgrade --target .pydeps .whl/*.whl
  export PYTHONPATH=".pydeps:$PYTHONPATH"
fi
if ! "$PY" -c "import jsonschema" 2>/dev/null; then
  echo "gpu-campaign: jsonschema (record validation) does not import with $PY: run 'bash scripts/gpu-wheels.sh' on" \
       "a machine with network and name .whl in the device run's carry" >&2
  exit 1
fi
# Which validator checks the records: jsonschema-rs where it imports (carried in .whl/), else jsonschema alone (the
# same verdicts, slower); normbench.records.schema decides the same way.
if "$PY" -c "import jsonschema_rs" 2>/dev/null; then
  echo "gpu-campaign: records validated by jsonschema-rs (fast path), jsonschema for the problems" >&2
else
  echo "gpu-campaign: records validated by jsonschema alone (jsonschema-rs not in .whl/: the same verdicts, slower)" >&2
fi
export PYTHONUNBUFFERED=1
# the commit of this tree: an argument wins, else the environment, else git when the tree has .git
if [ -z "${NORMBENCH_GIT_COMMIT:-}" ] && [ -d .git ] && command -v git >/dev/null; then
  NORMBENCH_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"; export NORMBENCH_GIT_COMMIT
fi
exec "$PY" -m normbench.campaign "$@"
