#!/usr/bin/env bash
# Stage what a GPU machine without network access needs into .whl/ (git-ignored): the wheels and
# datasets of a device kit (a folder with a stage.sh that copies PyCUDA, Hydra and MLflow wheels
# built for that machine into .whl/), plus the SQLite-store dependencies of the MLflow client;
# then, on that machine:  source scripts/device_env.sh && ...
#   DEVICE_KIT=/path/to/kit bash scripts/stage_device.sh [dataset ...]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if [[ -z "${DEVICE_KIT:-}" || ! -f "${DEVICE_KIT}/stage.sh" ]]; then
    echo "error: DEVICE_KIT=${DEVICE_KIT:-<unset>} is not a device kit (a folder with stage.sh); set DEVICE_KIT to one, or install the 'cuda' extra on a GPU machine with network access instead" >&2
    exit 2
fi
bash "$DEVICE_KIT/stage.sh" "$@"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl sqlalchemy==2.1.9 alembic==1.20.1 2>&1 | grep -vi warning || true
git rev-parse --short HEAD > .whl/COMMIT   # the commit the GPU records name (re-run before each run)
du -sh .whl
