#!/usr/bin/env bash
# apt-install.sh WHY PACKAGE...: installs Debian packages as root, or names them and fails for another user.
# Shared by install-python-venv.sh and install-system-deps.sh.
set -euo pipefail
why=$1
shift
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "$why: install $* (as root: apt-get install $*)" >&2
  exit 1
fi
echo "installing Debian packages: $* ($why)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
