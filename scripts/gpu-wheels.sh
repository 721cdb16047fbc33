#!/usr/bin/env bash
# The wheels the GPU image lacks, downloaded here (with network) into .whl/ for the device run to carry:
#   bash scripts/gpu-wheels.sh       # then name .whl in the device run's carry; scripts/gpu-campaign.sh installs them
# The image (Python 3.12, torch, Triton, attrs) has no jsonschema, which validating records needs, nor jsonschema-rs
# (its fast path), nor Liger-Kernel.
# Binary wheels only, for CPython 3.12 on manylinux x86_64; nothing is installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
TARGET=(--only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64
        --implementation cp)
# jsonschema as constraints.txt pins it, and its dependencies at the versions this project is tested with (attrs and
# typing-extensions too: the image's may be older, and with them the set resolves on its own).
JSONSCHEMA=(jsonschema==4.26.0 referencing==0.37.0 jsonschema-specifications==2025.9.1 rpds-py==2026.9.1
            attrs==26.1.0 typing-extensions==4.16.0)
# jsonschema-rs: the fast path of the same validation (normbench.records.schema; one abi3 wheel, no dependencies).
# Without it records are checked by jsonschema alone, with the same verdicts, ~20x slower.
FAST=(jsonschema-rs==0.61.0)
# Liger-Kernel for the liger baseline (pure Python; its torch and Triton are the image's).
LIGER=(liger-kernel==0.8.5)
mkdir -p .whl
"$PY" -m pip download --quiet "${TARGET[@]}" --no-deps -d .whl "${JSONSCHEMA[@]}" "${FAST[@]}" "${LIGER[@]}"
# The set is complete: jsonschema resolves from .whl alone for the image's Python and platform.
check="$(mktemp -d)"
trap 'rm -rf "$check"' EXIT
"$PY" -m pip install --quiet --dry-run --no-index --find-links .whl "${TARGET[@]}" --target "$check" "${JSONSCHEMA[0]}" "${FAST[0]}"
ls .whl
du -sh .whl
