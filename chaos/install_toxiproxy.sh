#!/usr/bin/env bash
# Installs the Toxiproxy server into the project-local tools/bin (skipped when already there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${TOXIPROXY_VERSION:-v2.12.0}"
BIN="$ROOT/tools/bin"
if [[ -x "$BIN/toxiproxy-server" ]]; then
  echo "toxiproxy-server already installed: $BIN/toxiproxy-server"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "go is not on PATH: the Toxiproxy server is built with 'go install'" >&2
  exit 1
fi
mkdir -p "$BIN"
# The module's cmd/server package builds a binary named 'server'; it is renamed so the
# launcher and a user find it under the name Toxiproxy's own docs use.
GOBIN="$BIN" go install "github.com/Shopify/toxiproxy/v2/cmd/server@${VERSION}"
mv "$BIN/server" "$BIN/toxiproxy-server"
echo "installed $BIN/toxiproxy-server ($VERSION)"
