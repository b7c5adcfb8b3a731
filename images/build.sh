#!/bin/sh
# Build every image of the docker runtime: the base image (base.sh, skipped when present), then
# each images/<name>/Dockerfile as minborg/<name>, from the repository root (.dockerignore lets
# only examples/ in). `minborg image build` runs this; so does CI.
set -eu
cd "$(dirname "$0")/.."
sh images/base.sh minborg/base
for dockerfile in images/*/Dockerfile; do
    name="minborg/$(basename "$(dirname "$dockerfile")")"
    echo "building $name from $dockerfile"
    docker build -q -t "$name" -f "$dockerfile" . >/dev/null
done
