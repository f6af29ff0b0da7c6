#!/usr/bin/env bash
# Installs the built tracer into a temporary prefix, then configures, builds and runs the
# embedding example against it with find_package(tracer).
set -euo pipefail
build_dir="$1"
src_dir="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
# The supported set only: the umbrella and what it reaches, none of the layers' own headers.
for own in tracer/common tracer/kernel tracer/perf/ring_reader.hpp tracer/syscall_names.hpp; do
  if [[ -e "$work/prefix/include/$own" ]]; then
    echo "installed a layer's own header: include/$own" >&2
    exit 1
  fi
done
cmake -S "$src_dir" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  >/dev/null  # no forced flags: the installed headers include what they use
cmake --build "$work/build" >/dev/null
"$work/build/embedding_example"
# The same program through pkg-config, from the .pc file of the --prefix install as it is (its
# prefix is relative to where it lies: no --define-variable).
pc=$(find "$work/prefix" -name tracer.pc -print -quit)
PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs tracer >"$work/pc_flags"
# shellcheck disable=SC2046
c++ "$src_dir/main.cpp" -o "$work/pc_example" $(cat "$work/pc_flags")
"$work/pc_example" >/dev/null
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
