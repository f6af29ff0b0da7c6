#!/usr/bin/env bash
# The layering at link level: no layer library uses a symbol that only a higher layer defines
# (cmake/check_layers.cmake checks the includes; this catches a declaration in a lower layer's
# header whose definition lives above it). Usage: check_symbols.sh LIB... (lowest layer first).
set -euo pipefail
libs=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in "${!libs[@]}"; do
  # Strong definitions (text, data, bss, read-only); weak and inline ones are everywhere.
  nm -g --defined-only "${libs[$i]}" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBR]$/ {print $3}' |
    sort -u >"$tmp/def$i"
  nm -g --defined-only "${libs[$i]}" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u >"$tmp/any$i"
  nm -g --undefined-only "${libs[$i]}" 2>/dev/null | awk '{print $NF}' | sort -u >"$tmp/undef$i"
done
status=0
n=${#libs[@]}
for ((i = 0; i < n; i++)); do
  # What layer i and the layers below it define, in any form.
  : >"$tmp/below"
  for ((k = 0; k <= i; k++)); do
    cat "$tmp/any$k" >>"$tmp/below"
  done
  sort -u -o "$tmp/below" "$tmp/below"
  for ((j = i + 1; j < n; j++)); do
    comm -12 "$tmp/undef$i" "$tmp/def$j" | comm -23 - "$tmp/below" >"$tmp/up" || true
    if [[ -s "$tmp/up" ]]; then
      status=1
      echo "layering: $(basename "${libs[$i]}") uses symbols defined only in the higher layer $(basename "${libs[$j]}"):"
      c++filt <"$tmp/up" | head -20 | sed 's/^/  /'
    fi
  done
done
if ((status == 0)); then
  echo "layering: ${n} layer libraries, no symbol used below the layer that defines it"
fi
exit $status
