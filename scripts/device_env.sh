# Source on a GPU machine without network access, from the project root, after staging
# (scripts/stage_device.sh):
#   source scripts/device_env.sh
# Installs the carried wheels (PyCUDA, Hydra, MLflow client + SQLite store deps) and sets paths.
source .whl/setup.sh
python3 -m pip install -q --no-index --find-links .whl sqlalchemy alembic 2>&1 | grep -vi warning || true
export PIPELINE_DATA_DIR="$PWD/.whl/data"
export PYCUDA_CACHE_DIR=/tmp/pycuda-cache
