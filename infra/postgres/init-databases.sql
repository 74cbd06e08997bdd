-- Run once by the postgres image on an empty data volume (/docker-entrypoint-initdb.d/).
-- POSTGRES_DB (mlflow) already exists; Prefect gets its own database (both use Alembic, whose
-- version tables would collide in one database).
CREATE DATABASE prefect;
