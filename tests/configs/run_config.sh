#!/usr/bin/env bash
# Runs one shipped recipe live for a moment: `tracer check`, then `tracer run --json` for 1.5 s.
# A recipe this kernel cannot serve (kprobes without CONFIG_KPROBES) must fail `check` with the
# reason; the test is then reported as skipped (exit 77) with that reason.
# Usage: run_config.sh TRACER RECIPE [WORKLOAD...]
set -uo pipefail
tracer="$1"
recipe="$2"
shift 2
check_out=$("$tracer" check "$recipe" 2>&1)
rc=$?
if ((rc != 0)); then
  if grep -q "CONFIG_KPROBES is off" <<<"$check_out"; then
    echo "SKIPPED: $(basename "$recipe") needs kprobes: $check_out"
    exit 77
  fi
  echo "tracer check failed ($rc):"
  echo "$check_out"
  exit 1
fi
echo "$check_out"
if (($#)); then (sleep 0.3; "$@" >/dev/null 2>&1) & fi
err=$(mktemp) || exit 1  # never a predictable name in /tmp
trap 'rm -f "$err"' EXIT
out=$("$tracer" run "$recipe" --json --duration 1500ms 2>"$err")
rc=$?
cat "$err" >&2
wait
if ((rc != 0)); then
  echo "tracer run failed ($rc)"
  exit 1
fi
last=$(tail -n 1 <<<"$out")
if [[ "$last" != '{"type":"summary"'* ]]; then
  echo "the last line is not the summary: $last"
  exit 1
fi
echo "$(wc -l <<<"$out") JSON lines; $last"
