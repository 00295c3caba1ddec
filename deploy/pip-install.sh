#!/bin/sh
# pip for one step of the Dockerfile's stages, leaving no pip behind.
#
#   pip-install.sh install [--check] ARGS...   pip install ARGS into the virtualenv
#                                              (/opt/kcoord/venv); --check: then pip check,
#                                              that every installed package has what it requires
#   pip-install.sh wheel ARGS...               pip wheel ARGS, with that virtualenv's Python
#
# deploy/wheelhouse/ (beside this script; the stages mount deploy/ at /tmp/deploy) is a
# source of wheels, the only one when the build argument PIP_OFFLINE=1. pip (and setuptools)
# go into the virtualenv with ensurepip first and are removed again at the end, in the same
# step, so the layer keeps what was installed and not pip.
set -eu
usage() { echo "usage: $0 install [--check] ARGS... | wheel ARGS..." >&2; exit 2; }
[ $# -ge 1 ] || usage
command=$1
shift
case $command in install | wheel) ;; *) usage ;; esac
check=0
if [ "$command" = install ] && [ "${1:-}" = --check ]; then
    check=1
    shift
fi
python=${KCOORD_VENV:-/opt/kcoord/venv}/bin/python
wheelhouse=$(dirname -- "$0")/wheelhouse
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
"$python" -m ensurepip --default-pip >/dev/null
if [ "${PIP_OFFLINE:-0}" = 1 ]; then
    set -- --no-index "$@"
fi
"$python" -m pip "$command" --find-links "$wheelhouse" "$@"
if [ "$check" = 1 ]; then
    "$python" -m pip check
fi
"$python" -m pip uninstall --quiet --yes pip setuptools
