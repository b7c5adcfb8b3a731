#!/usr/bin/env bash
# Builds the etcd server pinned in reference/store/etcdbuild/go.mod from the Go module proxy
# into the project-local tools/bin/etcd; skipped when the binary there is already that version.
# `find_etcd_binary()` runs it on first use; CI runs it before tox. docs/decisions.md says why.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$ROOT/reference/store/etcdbuild"
BIN="${MINBORG_TOOLS_BIN:-$ROOT/tools/bin}"
VERSION="$(awk '$1 == "go.etcd.io/etcd/server/v3" || ($1 == "require" && $2 == "go.etcd.io/etcd/server/v3") {print $NF; exit}' "$SRC/go.mod")"
VERSION="${VERSION#v}"
installed() {
  # The version read whole, then matched: `etcd --version | grep -q` under pipefail failed when
  # grep, done at the first line, closed the pipe before etcd wrote its last (SIGPIPE, 141).
  local said
  [[ -x "$BIN/etcd" ]] && said="$("$BIN/etcd" --version 2>/dev/null)" && grep -qx "etcd Version: $VERSION" <<<"$said"
}
if installed; then
  echo "etcd $VERSION already installed: $BIN/etcd"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "go is not on PATH: etcd $VERSION is built from the Go module proxy (install Go 1.24 or later)" >&2
  exit 1
fi
mkdir -p "$BIN"
# One build at a time: a second caller waits, then finds the binary the first one built.
exec 9>"$BIN/.etcd-build.lock"
flock 9
if installed; then
  echo "etcd $VERSION already installed: $BIN/etcd"
  exit 0
fi
echo "building etcd $VERSION from the Go module proxy into $BIN/etcd (once; a few minutes on a fresh machine)"
TMP="$BIN/.etcd.$$.tmp"
trap 'rm -f "$TMP"' EXIT
(cd "$SRC" && CGO_ENABLED=0 go build -trimpath -o "$TMP" .)
mv "$TMP" "$BIN/etcd"
installed || { echo "the built $BIN/etcd does not report version $VERSION" >&2; exit 1; }
echo "installed $BIN/etcd ($("$BIN/etcd" --version | head -1))"
