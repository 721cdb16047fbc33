#!/usr/bin/env bash
# The main job: list and check the zoo, benchmark it on this machine, train the quick default, build the leaderboard.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
nb=.venv/bin/normbench
echo "== the zoo"; $nb list
echo "== contract checks"; $nb check --all
echo "== quick kernel sweep on this machine (skips what results/ already holds)"; $nb bench --quick --out results
echo "== quick training run (offline task)"; $nb train --norm layernorm --quick --out results
echo "== leaderboard"; $nb site build --results results --out site
echo "Open site/index.html in a browser (file://$(pwd)/site/index.html)."
