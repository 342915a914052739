#!/usr/bin/env bash
# Install Debian's Slurm and MUNGE for the test that runs the grading array job on a
# one-node cluster (tests/test_slurm.py). Needs root and apt-get; exits 1 if it cannot
# install them, and the test then skips with a note.
set -uo pipefail
if command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "Slurm is not installed and this machine cannot install it (it needs root and apt-get)."
  exit 1
fi
echo "Installing Debian's slurm-wlm and munge for the Slurm test ..."
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 || \
  { apt-get update -qq >/dev/null && apt-get install -y -qq slurm-wlm munge >/dev/null; }
