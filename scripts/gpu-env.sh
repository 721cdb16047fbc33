# Sourced by scripts/gpu-campaign.sh, scripts/gpu-validate.sh and scripts/gpu-window.sh: the set-up of a fresh GPU machine whose image has
# torch and Triton but not our other dependencies (no .venv; the wheels it lacks travel in .whl/, from
# scripts/gpu-wheels.sh). Sets PY, PYTHONPATH and NORMBENCH_GIT_COMMIT; $1 names the script in its messages.
# (Not executable on its own: `source scripts/gpu-env.sh NAME` from the repository root.) With a second argument
# `--local` (a dry run or a rehearsal, on any machine) it sets PY and PYTHONPATH only.
gpu_env_name="${1:-gpu}"
PY="${PYTHON:-python3}"
if [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && ! "$PY" -c "import torch" 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [ "${2:-}" = "--local" ]; then return 0; fi
# The image lacks jsonschema (record validation needs it) and Liger-Kernel: install the wheels carried in .whl/ into
# .pydeps, not into the image.
if ! "$PY" -c "import jsonschema" 2>/dev/null && [ -d .whl ]; then
  "$PY" -m pip install --quiet --no-deps --no-index --upgrade --target .pydeps .whl/*.whl
  export PYTHONPATH=".pydeps:$PYTHONPATH"
fi
if ! "$PY" -c "import jsonschema" 2>/dev/null; then
  echo "$gpu_env_name: jsonschema (record validation) does not import with $PY: run 'bash scripts/gpu-wheels.sh' on" \
       "a machine with network and name .whl in the device run's carry" >&2
  exit 1
fi
# the commit of this tree: the environment wins, else git when the tree has .git
if [ -z "${NORMBENCH_GIT_COMMIT:-}" ] && [ -d .git ] && command -v git >/dev/null; then
  NORMBENCH_GIT_COMMIT="$(git rev-parse HEAD 2>/dev/null || true)"; export NORMBENCH_GIT_COMMIT
fi
