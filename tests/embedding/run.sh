#!/usr/bin/env bash
# Installs the built tracer into a temporary prefix, then configures, builds and runs the
# embedding example against it with find_package(tracer).
set -euo pipefail
build_dir="$1"
src_dir="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
# The supported set only: exactly the declared public headers (cmake/public_headers.cmake).
declared=$(sed -n 's/^    \(tracer\/[^ ]*\)$/\1/p' "$src_dir/../../cmake/public_headers.cmake" | sort)
installed=$(cd "$work/prefix/include" && find . -type f | sed 's|^\./||' | sort)
if [[ "$declared" != "$installed" ]]; then
  echo "the installed headers are not cmake/public_headers.cmake's list:" >&2
  diff <(echo "$declared") <(echo "$installed") >&2 || true
  exit 1
fi
cmake -S "$src_dir" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  >/dev/null  # no flags of ours: the imported targets carry what a consumer needs
cmake --build "$work/build" >/dev/null
"$work/build/embedding_example"
# docs/embedding.md's consumer, verbatim: its ```cmake block with the example's main.cpp.
mkdir -p "$work/docs"
sed -n '/^```cmake$/,/^```$/{/^```/d;p}' "$src_dir/../../docs/embedding.md" >"$work/docs/CMakeLists.txt"
if ! grep -q 'find_package(tracer REQUIRED)' "$work/docs/CMakeLists.txt"; then
  echo "docs/embedding.md has no \`\`\`cmake consumer block" >&2
  exit 1
fi
cp "$src_dir/main.cpp" "$work/docs/main.cpp"
cmake -S "$work/docs" -B "$work/docs/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/docs/build" >/dev/null
"$work/docs/build/app"
# Against libtracer.so: it links nothing of the layers' archives, and exports the tracer
# namespace only.
"$work/build/embedding_example_shared"
# A command's whole output is taken before it is searched: `cmd | grep -q` under pipefail fails
# when grep's early exit kills cmd with SIGPIPE (it did in CI, on a loaded machine).
uses_libtracer() {
  local deps
  deps=$(ldd "$1")
  if ! grep -q 'libtracer\.so' <<<"$deps"; then
    echo "$(basename "$1") does not use libtracer.so; ldd says:" >&2
    echo "$deps" >&2
    exit 1
  fi
}
uses_libtracer "$work/build/embedding_example_shared"
so=$(find "$work/prefix" -name 'libtracer.so.*.*' -print -quit)
exported=$(nm -D --defined-only -C "$so")
foreign=$(grep -vE ' (tracer::|typeinfo for tracer::|typeinfo name for tracer::|vtable for tracer::|VTT for tracer::)' <<<"$exported" || true)
if [[ -n "$foreign" ]]; then
  echo "libtracer.so exports more than the tracer namespace:" >&2
  head <<<"$foreign" >&2
  exit 1
fi
# Only the declared API: the installed headers' declarations (the layers are built with hidden
# visibility), none of the layers' own namespaces, and the API itself.
# A symbol's own name: what precedes its parameters ("vtable for X", "X::f").
names=$(sed -E 's/^[0-9a-f]+ [A-Za-z] //; s/^(typeinfo name for|typeinfo for|vtable for|VTT for) //; s/\(.*//' <<<"$exported")
internal=$(grep -E '^tracer::(kernel|core|stages|exporter)::|^tracer::([A-Za-z_]+::)*detail::|^tracer::perf::Ring(Reader)?::|::Impl::' <<<"$names" || true)
if [[ -n "$internal" ]]; then
  echo "libtracer.so exports symbols of no installed header:" >&2
  head <<<"$internal" >&2
  exit 1
fi
for api in 'tracer::Session::start()' 'tracer::Recipe::load(' 'tracer::Pipeline::on_batch(' \
  'tracer::perfdata::Reader::' 'tracer::symbols::Symbolizer::'; do
  if ! grep -qF "$api" <<<"$exported"; then
    echo "libtracer.so does not export $api" >&2
    exit 1
  fi
done
# The same program through pkg-config, from the .pc file of the --prefix install as it is (its
# prefix is relative to where it lies: no --define-variable).
pc=$(find "$work/prefix" -name tracer.pc -print -quit)
PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs tracer >"$work/pc_flags"
# shellcheck disable=SC2046
c++ "$src_dir/main.cpp" -o "$work/pc_example" $(cat "$work/pc_flags")
"$work/pc_example" >/dev/null
# And against libtracer.so through tracer-shared.pc.
PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs tracer-shared >"$work/pc_shared_flags"
# shellcheck disable=SC2046
c++ "$src_dir/main.cpp" -o "$work/pc_shared_example" $(cat "$work/pc_shared_flags")
uses_libtracer "$work/pc_shared_example"
"$work/pc_shared_example" >/dev/null
# The example stage plugin against the installed C header alone (no tracer library: a plugin
# speaks the C ABI only), then loaded by the installed tracer from a recipe.
c++ -std=c++17 -shared -fPIC -Wall -Wextra -Werror -I"$work/prefix/include" \
  "$src_dir/../../examples/plugin/sum_by.cpp" -o "$work/libsum_by.so"
cat >"$work/plugin.toml" <<'TOML'
[recipe]
name = "plugin"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
plugin = "./libsum_by.so"
key = "comm"
value = "pid"
TOML
out=$("$work/prefix/bin/tracer" run "$work/plugin.toml" --json -- /bin/sh -c 'for i in 1 2 3 4 5; do :; done')
grep -q '"stage":"sum_by"' <<<"$out" || { echo "the installed plugin wrote no table: $out" >&2; exit 1; }
# The embedded server (examples/server): Beast and a Session on one io_context, the server
# tracing itself. A client makes a known number of requests; the counts it then serves are
# exactly what they did (3 getppid calls each) and its latency histogram holds each request.
cmake -S "$src_dir/../../examples/server" -B "$work/server" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/server" >/dev/null
"$work/server/tracer_example_server" >"$work/server.out" 2>"$work/server.err" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's/^listening \([0-9]*\)$/\1/p' "$work/server.out")
  [[ -n "$port" ]] && break
  kill -0 $server 2>/dev/null || { cat "$work/server.err" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { echo "the server never said listening" >&2; cat "$work/server.err" >&2; exit 1; }
get() {  # GET $1 over bash's /dev/tcp: the body
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' "$1" >&3
  sed '1,/^\r$/d' <&3
  exec 3<&-
}
requests=25
for _ in $(seq 1 $requests); do get /work >/dev/null; done
expected=$((requests * 3))
counts="" latency_total=0
for _ in $(seq 1 50); do  # the tables come every 100 ms
  counts=$(get /counts)
  latency_total=$( (get /latency | grep -o '"count":[0-9]*' || true) | cut -d: -f2 |
    awk '{ n += $1 } END { print n + 0 }')
  [[ "$counts" == *"\"getppid\":$expected"* && "${latency_total:-0}" -eq $requests ]] && break
  sleep 0.1
done
[[ "$counts" == *"\"getppid\":$expected"* ]] || { echo "server counts: $counts (expected getppid $expected)" >&2; exit 1; }
[[ "${latency_total:-0}" -eq $requests ]] || { echo "latency histogram holds ${latency_total:-0} requests, not $requests" >&2; exit 1; }
echo "server: $requests requests, getppid $expected, latency histogram $latency_total"
