#!/usr/bin/env bash
# Mutation testing of the measurement and verdict core with mutmut (issue #52 item 2; docs/testing.md).
#
#   bash scripts/mutation.sh [MODULE ...]     # default: every module of MODULES below
#   MUTATION_TIME_LIMIT=600 bash scripts/mutation.sh MODULE   # stop after 600 s: a partial report
#   MUTATION_RESUME=1 bash scripts/mutation.sh MODULE        # only the mutants its last run left unchecked
#
# Each module is mutated alone, against the test files that cover it (TESTS below; mutmut's own stats phase then
# runs, per mutant, only the tests that reach the mutated function), in a throw-away copy of this tree (git's tracked
# and new files): an interrupted run leaves this tree as it was. Niced (the machine is shared). The per-module
# results go to scripts/mutation/<module>.json (mutant name -> status) and the committed report,
# docs/mutation-report.json, is rebuilt from them with the modules' sha256 (tests/test_mutation_report.py fails when a
# covered module's hash differs from the report's). Not in CI: it takes minutes per module.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-$REPO/.venv/bin/python}
MUTMUT=${MUTMUT:-$(dirname "$PY")/mutmut}

# module -> the test files that cover it (by coverage: the files that import or reach it)
declare -A TESTS=(
  [normbench/results/staleness.py]="tests/test_prune.py tests/test_mutation_kills.py"
  [normbench/results/counted.py]="tests/test_mutation_counted.py tests/test_prune.py"
  [normbench/measure/headtohead.py]="tests/test_mutation_headtohead.py tests/test_mutation_headtohead_more.py"
  [normbench/best/__init__.py]="tests/test_headtohead.py tests/test_mutation_kills.py tests/test_mutation_best_command.py tests/test_mutation_best_command_more.py tests/test_mutation_best_text.py tests/test_mutation_best_policy.py tests/test_mutation_best_decide.py"
  [normbench/best/command.py]="tests/test_mutation_best_command.py tests/test_mutation_best_command_more.py tests/test_mutation_best_policy.py"
  [normbench/measure/group.py]="tests/test_mutation_group.py tests/test_mutation_group_more.py tests/test_mutation_headtohead.py tests/test_mutation_headtohead_more.py tests/test_timing_paths.py tests/test_flags.py tests/test_gpu_noise.py tests/test_measure.py"
  [normbench/measure/timers.py]="tests/test_mutation_timers.py tests/test_gpu_timer.py tests/test_gpu_noise.py tests/test_timing_paths.py tests/test_mutation_headtohead.py"
  [normbench/campaign.py]="tests/test_campaign.py tests/test_mutation_campaign.py tests/test_mutation_campaign_more.py"
  [normbench/policy/recognise.py]="tests/test_mutation_recognise.py tests/test_mutation_recognise_more.py tests/test_mutation_recognise_find.py tests/test_policy_recognise.py tests/test_policy.py"
)
MODULES=("$@")
[ ${#MODULES[@]} -gt 0 ] || MODULES=(normbench/results/staleness.py normbench/results/counted.py
                                     normbench/measure/headtohead.py
                                     normbench/best/__init__.py normbench/best/command.py)

mkdir -p scripts/mutation
for mod in "${MODULES[@]}"; do
  tests=${TESTS[$mod]:?"no test files listed for $mod in scripts/mutation.sh"}
  work=$(mktemp -d /tmp/normbench-mutation.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work"
  ln -s "$(readlink -f .venv)" "$work/.venv"
  sel=$(printf '    %s\n' $tests)
  cat > "$work/setup.cfg" <<CFG
[mutmut]
source_paths = normbench
only_mutate = $mod
also_copy =
    examples
    suites
    docs
    scripts
    asv.conf.json
    results
    constraints.txt
pytest_add_cli_args =
    -p
    no:randomly
    -n
    0
    -q
    -x
pytest_add_cli_args_test_selection =
$sel
process_isolation = forkserver
use_git_change_detection = False
CFG
  echo "== $mod against $tests"
  out="$REPO/scripts/mutation/$(echo "$mod" | tr / _).json"   # written whole or not at all
  # MUTATION_RESUME=1: the mutants the last run did not reach (same module source, else an error), merged into it
  names=() merge=()
  if [ -n "${MUTATION_RESUME:-}" ]; then
    list=$("$PY" scripts/mutation_report.py unchecked "$mod")   # fails (and stops) when the module changed
    [ -z "$list" ] || mapfile -t names <<<"$list"
    [ ${#names[@]} -gt 0 ] || { echo "$mod: every mutant of its last run was checked"; rm -rf "$work"; continue; }
    cp "$out" "$work/previous.json"; merge=(--merge "$work/previous.json")
    echo "resuming: ${#names[@]} unchecked mutants"
  fi
  # MUTATION_TIME_LIMIT (seconds): stop mutmut then and report what it checked (the rest "not checked")
  rc=0
  (cd "$work" && env -u PYTHONPATH timeout --signal=INT "${MUTATION_TIME_LIMIT:-0}" nice -n 10 "$MUTMUT" run \
     --max-children 2 "${names[@]}" >"$work/run.log" 2>&1) || rc=$?
  if [ "$rc" = 124 ] && [ -f "$work/mutants/$mod.meta" ]; then
    echo "time limit: $mod partly checked"
  elif [ "$rc" != 0 ]; then
    tail -c 4000 "$work/run.log"; echo "mutmut failed for $mod"; exit 1
  fi
  (cd "$work" && "$PY" "$REPO/scripts/mutation_report.py" collect "$mod" "${merge[@]}" > "$out.tmp") \
    && mv "$out.tmp" "$out"
  rm -rf "$work"; trap - EXIT
done
"$PY" scripts/mutation_report.py report
