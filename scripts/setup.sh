#!/usr/bin/env bash
# Create or refresh the virtual environment at .venv (idempotent; re-runs only when the pins change).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.normbench-setup
want=$(cat pyproject.toml constraints.txt scripts/setup.sh examples/*/pyproject.toml 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/normbench ]; then
  exit 0
fi
echo "[setup] creating .venv (first run takes a few minutes)" >&2
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned, so nothing later resolves a CUDA build.
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".[all]"
echo "$want" > "$stamp"
# A bare `import timm` in this venv on the CPU build of torch: PyPI's torchvision is a CUDA build whose compiled ops
# cannot load here; a start-up hook (normbench/_tvhook.py, run by path from a .pth file) defines their schemas at the
# first `import torchvision`, and does nothing where torch and torchvision match (a GPU machine).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import runpy, os; p = '$PWD/normbench/_tvhook.py'; os.path.exists(p) and runpy.run_path(p, run_name='<run_path>')" \
  > "$site/normbench-torchvision.pth"
