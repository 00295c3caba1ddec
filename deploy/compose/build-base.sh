#!/bin/sh
# A Debian bookworm base image for the Dockerfile, built without an image registry.
#
#   deploy/compose/build-base.sh OUTPUT.tar
#
# Debian's minbase variant plus Python 3 (with venv), from the Debian mirror apt already
# uses here (DEBIAN_MIRROR overrides it), without the package lists, the downloaded
# packages, the documentation and the translations. The result is a root file system as a
# tar archive for `podman import`; it serves as the build argument PYTHON_IMAGE, in place of
# python:3.11-slim-bookworm. Needs root and mmdebstrap (about half debootstrap's time: it
# installs with apt, downloading in parallel, and writes the archive itself), or else
# debootstrap.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 OUTPUT.tar" >&2; exit 2; }
output=$1

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
    # the first Debian (not security) source apt knows, one-line or deb822 format
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
                 2>/dev/null | grep -v '^[[:space:]]*#' \
             | grep -o -E 'https?://[^ ]+/debian/?( |$)' | grep -v -- '-security' | head -n 1 | tr -d ' ') || true
fi
mirror=${mirror:-http://deb.debian.org/debian}

mkdir -p "$(dirname -- "$output")"
if command -v mmdebstrap >/dev/null 2>&1; then
    echo "build-base: mmdebstrap --variant=minbase bookworm from $mirror" >&2
    log=$(mktemp "${TMPDIR:-/tmp}/kcoord-base.XXXXXX")
    trap 'rm -f "$log" "$output.partial"' EXIT
    # mmdebstrap removes the package lists and the downloaded packages itself
    # the merged-usr hook: merged /usr as debootstrap makes it, with usr-is-merged, not usrmerge (and Perl)
    mmdebstrap --variant=minbase --include=python3,python3-venv --format=tar \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$output.partial" "$mirror" >"$log" 2>&1 || {
        tail -n 20 "$log" >&2
        exit 1
    }
    mv "$output.partial" "$output"
    echo "build-base: $output ($(du -h "$output" | cut -f1))" >&2
    exit 0
fi

rootfs=$(mktemp -d "${TMPDIR:-/tmp}/kcoord-base.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT
echo "build-base: debootstrap --variant=minbase bookworm from $mirror" >&2
debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
    tail -n 20 "$rootfs.log" >&2
    rm -f "$rootfs.log"
    exit 1
}
rm -f "$rootfs.log"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
       "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* \
       "$rootfs"/usr/share/info/*
tar --numeric-owner -C "$rootfs" -cf "$output.partial" .
mv "$output.partial" "$output"
echo "build-base: $output ($(du -h "$output" | cut -f1))" >&2
