#!/usr/bin/env bash
# Install MPICH (Debian) and mpi4py built against it, for the real-MPI oracle tier (pytest -m mpi).
# Idempotent: each step is skipped when its result is already there.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v mpiexec >/dev/null 2>&1 || ! command -v mpicc >/dev/null 2>&1; then
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends mpich libmpich-dev
fi

PY="${PYTHON:-python3}"
works() { "$PY" -c 'from mpi4py import MPI; MPI.Get_library_version()' >/dev/null 2>&1; }
# The mpi4py wheel loads MPICH's ABI as libmpi.so.12, which Debian's MPICH ships as
# libmpich.so.12: name it so beside it and take the wheel. Where that does not import, build
# mpi4py from source against Debian's mpicc instead.
if ! works; then
    LIB="$(ldconfig -p | awk '/libmpich\.so\.12 /{print $NF; exit}' || true)"
    if [ -n "$LIB" ] && [ ! -e "$(dirname "$LIB")/libmpi.so.12" ]; then
        $SUDO ln -s libmpich.so.12 "$(dirname "$LIB")/libmpi.so.12"
    fi
    "$PY" -m pip install -q --only-binary mpi4py mpi4py || true
fi
if ! works; then
    "$PY" -m pip uninstall -q -y mpi4py || true
    MPICC="$(command -v mpicc)" "$PY" -m pip install --no-binary mpi4py --no-cache-dir mpi4py
fi

"$PY" -c 'from mpi4py import MPI; print("mpi4py", MPI.Get_library_version().splitlines()[0])'
