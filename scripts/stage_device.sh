#!/usr/bin/env bash
# Stage what a GPU machine without network access needs into .whl/ (git-ignored): wheels and
# datasets from the staging script beside the checkout, plus the SQLite-store dependencies of the
# MLflow client; then, on that machine:  source scripts/device_env.sh && ...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bash ../shared/device/stage.sh "$@"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl sqlalchemy==2.1.9 alembic==1.20.1 2>&1 | grep -vi warning || true
git rev-parse --short HEAD > .whl/COMMIT   # the commit the GPU records name (re-run before each run)
du -sh .whl
