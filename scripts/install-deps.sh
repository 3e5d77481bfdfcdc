#!/usr/bin/env bash
# install-deps.sh - install, from Debian's packages, exactly what nprobe's
# build, tests, demo and benchmarks need (the Python side: scripts/setup-venv.sh). Idempotent: installs only what is
# missing. Works as root or through sudo.
set -euo pipefail

packages=(
  # build
  gcc make cmake pkg-config
  libhdf5-dev libxlsxwriter-dev libjansson-dev libopenblas-dev libzip-dev zlib1g-dev libisal-dev
  # Debian 13's xlsxwriter.pc requires minizip.pc, which libxlsxwriter-dev
  # does not pull in (Debian 12's has no such requirement; the package exists there too)
  libminizip-dev
  # data-parallel train and compare over MPI (mpirun; tests run several ranks on one machine)
  libopenmpi-dev openmpi-bin
  # tests, samples and benchmarks: tools independent of nprobe; their Python
  # libraries (torch 2.13, numpy, h5py, pandas, openpyxl, transformers, msprobe)
  # are PyPI's, pinned in python/requirements/dev.lock, in the project's venv
  # (scripts/setup-venv.sh), not Debian's
  hdf5-tools unzip time python3 python3-venv
  # a second, independent xlsx reader (test_cmp_xlsx_libreoffice converts reports to csv)
  libreoffice-calc-nogui
  # a real browser for the HTML report's tests and benchmark (headless, no driver)
  chromium
)

# install_missing PKG...: apt-get install those not installed yet.
install_missing() {
  local p missing=()
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all $# packages present"
    return 0
  fi
  local SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 2
    fi
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: done"
}

install_missing "${packages[@]}"

# No Python 3.11 (Debian 13 ships 3.13 only): the lock's torch 2.13 wheel does
# not fit its Python, and scripts/setup-venv.sh makes a venv that sees Debian's
# torch and its companions instead (python3-torch is 2.6 on Debian 13).
if ! command -v python3.11 >/dev/null 2>&1; then
  echo "install-deps: no Python 3.11: Debian's Python packages for the venv"
  install_missing python3-torch python3-numpy python3-h5py python3-pandas python3-openpyxl
fi
