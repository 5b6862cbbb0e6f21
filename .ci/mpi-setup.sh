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
# The mpi4py wheel looks for libmpi.so.12 while Debian's MPICH ships libmpich.so.12: build mpi4py
# from source against Debian's mpicc so it links the library that is really there.
if ! "$PY" -c 'from mpi4py import MPI; MPI.Get_library_version()' >/dev/null 2>&1; then
    MPICC="$(command -v mpicc)" "$PY" -m pip install --no-binary mpi4py --no-cache-dir mpi4py
fi

"$PY" -c 'from mpi4py import MPI; print("mpi4py", MPI.Get_library_version().splitlines()[0])'
