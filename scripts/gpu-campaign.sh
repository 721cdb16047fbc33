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
source scripts/gpu-env.sh gpu-campaign
# Which validator checks the records: jsonschema-rs where it imports (carried in .whl/), else jsonschema alone (the
# same verdicts, slower); normbench.records.schema decides the same way.
if "$PY" -c "import jsonschema_rs" 2>/dev/null; then
  echo "gpu-campaign: records validated by jsonschema-rs (fast path), jsonschema for the problems" >&2
else
  echo "gpu-campaign: records validated by jsonschema alone (jsonschema-rs not in .whl/: the same verdicts, slower)" >&2
fi
exec "$PY" -m normbench.campaign "$@"
