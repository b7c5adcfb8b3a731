#!/bin/sh
# CI: make sure this machine has a Docker engine and the docker runtime's images. Installs
# docker.io and debootstrap when missing, starts dockerd when `docker info` does not answer
# (waiting for it, bounded), then builds the images. A machine where any of this fails fails
# CI: the docker runtime's tests are not skipped there.
set -eu
cd "$(dirname "$0")/.."
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "docker.io and debootstrap are missing and cannot be installed here" >&2
        exit 1
    fi
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io debootstrap
fi
if ! docker info >/dev/null 2>&1; then
    echo "starting dockerd (log: /tmp/dockerd.log)"
    nohup dockerd >/tmp/dockerd.log 2>&1 &
    waited=0
    until docker info >/dev/null 2>&1; do
        if [ "$waited" -ge 60 ]; then
            echo "dockerd did not answer within 60 s; see /tmp/dockerd.log" >&2
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
fi
sh images/build.sh
