#!/usr/bin/env bash
# Makes `$PYTHON -m venv` work on a fresh Debian or Ubuntu, which ships the venv module's ensurepip apart
# (python3-venv, or python3.X-venv for a versioned interpreter). Called by the Makefile before it creates .venv;
# does nothing when the interpreter can already create one.
set -euo pipefail
python=${1:-python3}
"$python" -c 'import ensurepip, venv' 2>/dev/null && exit 0
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
packages=(python3-venv "python${version}-venv")
bash "$(dirname "$0")/apt-install.sh" "$python cannot create a virtual environment (no ensurepip)" "${packages[@]}"
"$python" -c 'import ensurepip, venv'
