#!/usr/bin/env bash
# Start an MLflow tracking server that a group's jobs log to (tracking=server tracking.uri=http://HOST:PORT).
#   bash scripts/mlflow_server.sh [BACKEND_STORE_URI] [PORT] [HOST]
# BACKEND_STORE_URI defaults to the project's SQLite store (sqlite:///<project>/outputs/mlflow.db); a
# group can use any SQLAlchemy URI instead, e.g. postgresql://user:pass@dbhost/mlflow. Artifacts are
# stored under outputs/mlartifacts-server (MLFLOW_ARTIFACTS_DESTINATION overrides) and served through
# the server (--serve-artifacts), so jobs need no shared file system. HOST 0.0.0.0 listens on every
# interface (the default, 127.0.0.1, only on this machine).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$root/outputs"
store=${1:-sqlite:///$root/outputs/mlflow.db}
port=${2:-5000}
host=${3:-127.0.0.1}
artifacts=${MLFLOW_ARTIFACTS_DESTINATION:-$root/outputs/mlartifacts-server}
exec mlflow server --backend-store-uri "$store" --serve-artifacts --artifacts-destination "$artifacts" \
  --host "$host" --port "$port" --workers "${MLFLOW_WORKERS:-2}"
