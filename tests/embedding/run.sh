#!/usr/bin/env bash
# Installs the built tracer into a temporary prefix, then configures, builds and runs the
# embedding example against it with find_package(tracer).
set -euo pipefail
build_dir="$1"
src_dir="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$src_dir" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  >/dev/null  # no forced flags: the installed headers include what they use
cmake --build "$work/build" >/dev/null
"$work/build/embedding_example"
