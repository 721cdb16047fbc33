#!/usr/bin/env bash
# Validate the GPU path in one short call (issue #35 item 5) on a fresh GPU machine whose image has torch and Triton
# (no .venv; the wheels it lacks travel in .whl/, from scripts/gpu-wheels.sh, as for scripts/gpu-campaign.sh):
#   bash scripts/gpu-validate.sh [--budget-s 280]     # output under $OUT (default ./validate-out), at most 6 files
#   bash scripts/gpu-validate.sh --dry-run            # the plan, on any machine (CI runs it)
# Exit 0 only if the gate passed and harness and profiler agree on every case; docs/measurement.md, "Verify on a GPU".
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! "$PY" -c "import torch" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ "$dry" = 0 ]; then
  # the same set-up as gpu-campaign.sh: jsonschema (record validation) and Liger-Kernel from .whl/ into .pydeps
  if ! "$PY" -c "import jsonschema" 2>/dev/null && [ -d .whl ]; then
    "$PY" -m pip install --quiet --no-deps --no-index --upgrade --target .pydeps .whl/*.whl
    export PYTHONPATH=".pydeps:$PYTHONPATH"
  fi
  if ! "$PY" -c "import jsonschema" 2>/dev/null; then
    echo "gpu-validate: jsonschema (record validation) does not import with $PY: run 'bash scripts/gpu-wheels.sh' on" \
         "a machine with network and name .whl in the device run's carry" >&2
    exit 1
  fi
  if [ -z "${NORMBENCH_GIT_COMMIT:-}" ] && [ -d .git ] && command -v git >/dev/null; then
    NORMBENCH_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"; export NORMBENCH_GIT_COMMIT
  fi
fi
exec "$PY" scripts/gpu_validate.py "$@"
