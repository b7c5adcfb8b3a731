#!/usr/bin/env bash
# Builds the borglet's spawn helper (minborg_spawn.c beside this script) into the project-local
# tools/bin/minborg-spawn-<first 16 hex digits of the source's SHA-256>: static where the C
# library has a static archive, else dynamic (the borglet runs it with an empty environment
# either way). Skipped when that binary is there; prints its path. The borglet runs this on
# first use (reference/borglet/spawner.py); CI runs it before tox. docs/decisions.md says why.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
SRC="$HERE/minborg_spawn.c"
BIN="${MINBORG_TOOLS_BIN:-$ROOT/tools/bin}"
OUT="$BIN/minborg-spawn-$(sha256sum "$SRC" | cut -c1-16)"
if [[ -x "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi
CC="${CC:-cc}"
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "no C compiler ($CC) to build $SRC" >&2
  exit 1
fi
mkdir -p "$BIN"
# One build at a time: a second caller (another borglet of the same host) waits, then finds it.
exec 9>"$BIN/.minborg-spawn-build.lock"
flock 9
if [[ -x "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi
TMP="$BIN/.minborg-spawn.$$.tmp"
trap 'rm -f "$TMP" "$TMP.log"' EXIT
FLAGS=(-O2 -Wall -Wextra -o "$TMP" "$SRC")
if ! "$CC" -static "${FLAGS[@]}" 2>"$TMP.log"; then
  echo "no static build ($(tail -1 "$TMP.log")); building it dynamic" >&2
  "$CC" "${FLAGS[@]}"
fi
chmod 0755 "$TMP"
mv "$TMP" "$OUT"
echo "$OUT"
