#!/bin/sh
# The MLflow tracking server of the cluster profile: `infra/compose.yaml` runs this script in the
# pipeline image (copied to /opt/toolorchestra/mlflow/). Runs and the model registry live in
# PostgreSQL; artifacts are proxied to s3://$MLFLOW_BUCKET/artifacts, so clients need only the
# tracking URI. Secrets come from the environment (infra/secrets.env), never from this file.
#
# Optional basic auth: set MLFLOW_AUTH_ADMIN_PASSWORD (and MLFLOW_FLASK_SERVER_SECRET_KEY) in
# secrets.env; the server then starts with `--app-name basic-auth` and `basic_auth.ini` (its
# database is the same PostgreSQL database; MLflow keeps the auth tables apart). Clients then set
# MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD.
set -eu
: "${POSTGRES_PASSWORD:?set in infra/secrets.env}"
: "${MLFLOW_BUCKET:?set in infra/cluster.env}"
HERE=$(cd "$(dirname "$0")" && pwd)

MLFLOW_BACKEND_STORE_URI="postgresql+psycopg2://orchestra:${POSTGRES_PASSWORD}@${MLFLOW_DB_HOST:-postgres}:5432/${MLFLOW_DB_NAME:-mlflow}"
export MLFLOW_BACKEND_STORE_URI  # read by `mlflow server` (not on its command line: no password in `ps`)

set -- --host 0.0.0.0 --port "${MLFLOW_PORT:-5000}" --workers "${MLFLOW_WORKERS:-2}" \
    --artifacts-destination "s3://${MLFLOW_BUCKET}/artifacts" \
    --allowed-hosts "${MLFLOW_ALLOWED_HOSTS:-localhost,localhost:5000}"

if [ -n "${MLFLOW_AUTH_ADMIN_PASSWORD:-}" ]; then
    : "${MLFLOW_FLASK_SERVER_SECRET_KEY:?set in infra/secrets.env when basic auth is on}"
    umask 077
    MLFLOW_AUTH_CONFIG_PATH=$(mktemp /tmp/mlflow-auth-XXXXXX)
    export MLFLOW_AUTH_CONFIG_PATH
    # The template with the database URI filled in (from the environment, not argv).
    python -c 'import os, sys; t = open(sys.argv[1]).read(); open(sys.argv[2], "w").write(t.replace("@DATABASE_URI@", os.environ["MLFLOW_BACKEND_STORE_URI"]))' \
        "$HERE/basic_auth.ini" "$MLFLOW_AUTH_CONFIG_PATH"
    set -- "$@" --app-name basic-auth
fi

exec mlflow server "$@"
