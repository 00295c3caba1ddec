#!/bin/sh
# Podman confined to this repository and a temporary directory, without a daemon.
#
#   deploy/compose/podman-session.sh run COMMAND [ARG...]   COMMAND in one session
#   deploy/compose/podman-session.sh hold                   a session for other commands:
#       prints `pid=N` and the variables the commands need, then `ready`, and lasts until
#       its standard input closes; run each command as
#       `nsenter --mount=/proc/N/ns/mnt --wd="$PWD" -- COMMAND` with those variables set.
#
# Podman keeps its images, containers, volumes and networks in .compose/ (git-ignored;
# KCOORD_COMPOSE_STATE moves it) and its settings in a temporary directory, passed as
# CONTAINERS_CONF and CONTAINERS_STORAGE_CONF: runc with the cgroupfs manager and no
# default ulimits, which work without systemd. What a root podman writes outside those
# places (its run-time state in /run, its locks in /dev/shm, a cache in
# /var/lib/containers) lands in a private mount namespace: a fresh /run and /dev/shm, and
# /var/lib with a temporary overlay, all gone when the session ends. One session at a time uses a state directory (a lock says so at once);
# a `hold` session stops whatever containers still run when it ends. Needs root (unshare,
# mount, flock), podman and runc.
set -eu

usage() { echo "usage: $0 run COMMAND [ARG...] | hold" >&2; exit 2; }
[ $# -ge 1 ] || usage
mode=$1
shift
case $mode in
    run) [ $# -ge 1 ] || usage ;;
    hold) [ $# -eq 0 ] || usage ;;
    *) usage ;;
esac

repo=$(CDPATH='' cd -- "$(dirname -- "$0")/../.." && pwd)
state=${KCOORD_COMPOSE_STATE:-$repo/.compose}
session=$(mktemp -d "${TMPDIR:-/tmp}/kcoord-podman.XXXXXX")
trap 'rm -rf "$session"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$state/storage" "$state/networks" "$session/tmp" "$session/var-lib/upper" "$session/var-lib/work"
# podman marks every container stopped when it meets a fresh /run: two sessions on one
# storage would stop each other's containers.
exec 9>"$state/session.lock"
if ! flock --nonblock 9; then
    echo "podman-session.sh: another session is using $state; wait for it to end" >&2
    exit 1
fi
# The mount namespace is private but the network is the host's: two sessions from two
# checkouts would each create the same bridge (podman1, 10.89.0.0/24) and break each
# other's containers. Sessions on one machine therefore take turns, waiting a bounded time.
host_lock=${KCOORD_PODMAN_HOST_LOCK:-/tmp/kcoord-podman-host.lock}
wait_s=${KCOORD_PODMAN_HOST_WAIT:-3600}
exec 8>"$host_lock"
if ! flock --nonblock 8; then
    echo "podman-session.sh: a session of another checkout is running; waiting up to ${wait_s}s for it" >&2
    if ! flock --wait "$wait_s" 8; then
        echo "podman-session.sh: the other session still runs after ${wait_s}s; giving up" >&2
        exit 1
    fi
fi

cat >"$session/containers.conf" <<CONF
[containers]
default_ulimits = []

[network]
network_config_dir = "$state/networks"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "/run/libpod"
CONF
cat >"$session/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$state/storage"
runroot = "/run/containers/storage"
CONF

export CONTAINERS_CONF="$session/containers.conf"
export CONTAINERS_STORAGE_CONF="$session/storage.conf"
export TMPDIR="$session/tmp"
# Images keep their HEALTHCHECK only in the Docker format.
export BUILDAH_FORMAT=docker

# shellcheck disable=SC2016
unshare --mount --propagation private -- sh -c '
    set -eu
    session=$1 mode=$2
    shift 2
    mount -t tmpfs -o mode=0755 kcoord-run /run
    mount -t tmpfs -o mode=1777 kcoord-shm /dev/shm
    mount -t overlay kcoord-var-lib \
        -o "lowerdir=/var/lib,upperdir=$session/var-lib/upper,workdir=$session/var-lib/work" /var/lib
    if [ "$mode" = hold ]; then
        echo "pid=$$"
        echo "CONTAINERS_CONF=$CONTAINERS_CONF"
        echo "CONTAINERS_STORAGE_CONF=$CONTAINERS_STORAGE_CONF"
        echo "TMPDIR=$TMPDIR"
        echo "BUILDAH_FORMAT=$BUILDAH_FORMAT"
        echo ready
        cat >/dev/null
        # normally the caller has removed its containers by now; after a crash, stop them
        podman stop --all --time 10 >/dev/null 2>&1 || true
        exit 0
    fi
    exec 9>&- 8>&-
    exec "$@"
' sh "$session" "$mode" "$@"
