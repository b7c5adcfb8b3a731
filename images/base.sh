#!/bin/sh
# The base image of task containers: Debian bookworm minbase with python3, built with
# debootstrap from the mirror apt on this machine already uses (no registry is needed).
# Idempotent: does nothing when the engine already holds the image.
#   images/base.sh [NAME]        (default minborg/base)
set -eu
NAME="${1:-minborg/base}"
if docker image inspect "$NAME" >/dev/null 2>&1; then
    echo "image $NAME is present"
    exit 0
fi
# The first Debian mirror named in apt's own sources (one-line or deb822 form).
MIRROR="$(
    { cat /etc/apt/sources.list 2>/dev/null; cat /etc/apt/sources.list.d/*.list 2>/dev/null; } \
        | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }'
)"
if [ -z "$MIRROR" ]; then
    MIRROR="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }')"
fi
if [ -z "$MIRROR" ]; then
    echo "no Debian mirror found in apt's sources" >&2
    exit 1
fi
DIR="$(mktemp -d /tmp/minborg-base.XXXXXX)"
trap 'rm -rf "$DIR"' EXIT
debootstrap --variant=minbase --include=python3 bookworm "$DIR" "$MIRROR"
rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
tar -C "$DIR" -c . | docker import - "$NAME"
echo "image $NAME built from $MIRROR"
