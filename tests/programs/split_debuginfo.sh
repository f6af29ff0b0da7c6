#!/usr/bin/env bash
# Splits a program's debuginfo the way distributions ship it: the DWARF and .symtab go to
# ROOT/.build-id/ab/cdef....debug (gdb's and perf's build-id layout), the program keeps neither
# (objcopy --strip-all) but gets a .gnu_debuglink naming that file.
# Usage: split_debuginfo.sh OBJCOPY READELF PROGRAM STRIPPED_OUT DEBUG_ROOT
set -euo pipefail
objcopy=$1 readelf=$2 in=$3 out=$4 root=$5
id=$("$readelf" -n "$in" | awk '/Build ID:/ {print $3; exit}')
if [[ -z $id ]]; then
  echo "split_debuginfo: $in has no build-id note (link it with -Wl,--build-id)" >&2
  exit 1
fi
debug="$root/.build-id/${id:0:2}/${id:2}.debug"
mkdir -p "$(dirname "$debug")"
"$objcopy" --only-keep-debug "$in" "$debug"
"$objcopy" --strip-all --add-gnu-debuglink="$debug" "$in" "$out"
