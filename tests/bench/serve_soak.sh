#!/usr/bin/env bash
# The soak of `tracer serve` (not in CI's default run): recipes always on for SECONDS (default
# 600) under a moderate, known load, scraped every 5 s as Prometheus would. Passes when RSS (within
# 10%) and the open descriptors stay flat after two minutes (the series of exited processes leave
# the export after --idle 60s), no event is lost, and the count of the load's calls in the last
# scrape is what the load made.
#
#   tests/bench/serve_soak.sh [build/default] [SECONDS]
set -euo pipefail
build=${1:-build/default}
seconds=${2:-600}
tracer=$build/tracer
syscaller=$build/tests/tracer_test_syscaller
dir=$(mktemp -d)
trap 'kill "$serve" "$load" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT

# The load's own calls (lseek, counted by pid in the kernel) beside the shelf's recipes.
cat >"$dir/soak.toml" <<'EOF'
[recipe]
name = "soak"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["comm"]
EOF
exec 3>"$dir/ready"
"$tracer" serve --listen 127.0.0.1:0 --ready-fd 3 --idle 60s "$dir/soak.toml" configs/syscalls-by-process.toml \
  configs/runqlat.toml 2>"$dir/serve.log" &
serve=$!
exec 3>&-
for _ in $(seq 100); do grep -q ready "$dir/ready" 2>/dev/null && break; sleep 0.1; done
port=$(grep -o 'listen=127.0.0.1:[0-9]*' "$dir/serve.log" | cut -d: -f2)
[[ -n $port ]] || { cat "$dir/serve.log"; exit 1; }

# About 5,000 calls a second, in batches whose total is known.
(
  while :; do "$syscaller" lseek 2500 >/dev/null && echo x >>"$dir/done"; sleep 0.5; done
) &
load=$!

metric() { grep -E "^$1 " "$dir/scrape" | awk '{print $2}' | head -1; }
echo "second rss_kib fds lost scrape_s"
declare -a rss fds
start=$(date +%s)
while (($(date +%s) - start < seconds)); do
  curl -s "http://127.0.0.1:$port/metrics" >"$dir/scrape"
  r=$(metric process_resident_memory_bytes)
  f=$(metric process_open_fds)
  lost=$(grep -E '^tracer_probe_lost_total' "$dir/scrape" | awk '{s += $2} END {print s + 0}')
  took=$(metric tracer_scrape_duration_seconds)
  t=$(($(date +%s) - start))
  echo "$t $((r / 1024)) $f $lost $took"
  rss+=("$r")
  fds+=("$f")
  sleep 5
done
kill "$load"
wait "$load" 2>/dev/null || true
sleep 1
curl -s "http://127.0.0.1:$port/metrics" >"$dir/scrape"
counted=$(metric 'tracer_soak_count_total\{comm="tracer_test_sys"\}')
made=$(($(wc -l <"$dir/done") * 2500))
kill -TERM "$serve"
wait "$serve"

# After two minutes (rings, maps and caches warm; the series of processes gone for --idle 60s
# leave the export): flat.
warm=24
((${#rss[@]} > warm + 1)) || { echo "soak too short"; exit 1; }
first=${rss[$warm]} last=${rss[-1]} max=0
for r in "${rss[@]:$warm}"; do ((r > max)) && max=$r; done
echo "rss after 2 min: $((first / 1024)) KiB, at the end: $((last / 1024)) KiB, max $((max / 1024)) KiB"
echo "fds after 2 min: ${fds[$warm]}, at the end: ${fds[-1]}"
echo "lost: $lost; the load made $made calls (finished batches), tracer counted ${counted:-0}"
status=0
# A batch cut by the stop counts its calls so far: counted is made + that part.
((${counted:-0} >= made && ${counted:-0} < made + 2500)) || { echo "FAIL: counts differ"; status=1; }
((last <= first + first / 10)) || { echo "FAIL: RSS grew more than 10%"; status=1; }
[[ ${fds[$warm]} == "${fds[-1]}" ]] || { echo "FAIL: the open descriptors changed"; status=1; }
((lost == 0)) || { echo "FAIL: events were lost"; status=1; }
exit $status
