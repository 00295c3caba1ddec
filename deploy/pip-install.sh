#!/bin/sh
# pip install into the image's virtualenv (/opt/kcoord/venv), in the Dockerfile's build stages.
#
#   kcoord-pip-install ARGS...   pip install ARGS, with /tmp/wheelhouse as a source of
#                                wheels; from it alone when the build argument PIP_OFFLINE=1
#   kcoord-pip-install --strip   check that every installed package has what it requires
#                                (pip check), then remove pip and setuptools from the
#                                virtualenv, which the runtime images do not need
set -eu
venv=${KCOORD_VENV:-/opt/kcoord/venv}
if [ "${1:-}" = --strip ]; then
    "$venv/bin/python" -m pip check
    exec "$venv/bin/python" -m pip uninstall --quiet --yes pip setuptools
fi
if [ "${PIP_OFFLINE:-0}" = 1 ]; then
    set -- --no-index "$@"
fi
exec "$venv/bin/python" -m pip install --find-links /tmp/wheelhouse "$@"
