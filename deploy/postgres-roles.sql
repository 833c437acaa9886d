-- The role and database agentledger's services use, on a PostgreSQL server of your own
-- (PostgreSQL 15 or newer). Idempotent: run it again to change the password.
--
-- Run as a superuser, with the services' password in the environment (not on the
-- command line, where every local user can read it):
--
--   read -rs AGENTLEDGER_DB_PASSWORD && export AGENTLEDGER_DB_PASSWORD
--   psql "postgresql://postgres@db.example:5432/postgres" -X -f deploy/postgres-roles.sql
--   # add  -v close_maintenance=1  on a server dedicated to agentledger (see step 3)
--
-- The server hashes the password (password_encryption = scram-sha-256, the default) but
-- receives it in clear text, so turn statement logging (log_statement) off while this
-- runs, or set the password afterwards with psql's `\password agentledger`, which hashes
-- it on the client. Then give the services
--
--   AGENTLEDGER_DATABASE_URL=postgresql://agentledger@db.example:5432/agentledger?passfile=/etc/agentledger/pgpass&sslmode=verify-full
--
-- with /etc/agentledger/pgpass (mode 0600, owned by the services' OS user) holding
-- `db.example:5432:agentledger:agentledger:<password>`.

\set ON_ERROR_STOP on
\getenv password AGENTLEDGER_DB_PASSWORD
\if :{?password}
\else
  \warn 'set AGENTLEDGER_DB_PASSWORD to the password of role agentledger'
  SELECT 1 / 0 AS agentledger_db_password_missing;
\endif

-- 1. A login role with no administrative power: it cannot create roles or databases,
--    replicate, bypass row security, or reach server files and programs (those need
--    superuser or the pg_read_server_files / pg_write_server_files /
--    pg_execute_server_program roles, which it is never granted).
SELECT 'CREATE ROLE agentledger'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'agentledger')\gexec
ALTER ROLE agentledger WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
    NOBYPASSRLS PASSWORD :'password';

-- 2. Its database. As owner it owns the `public` schema (PostgreSQL 15+ gives it to the
--    database owner), so migrations create tables and the projector its scratch schemas
--    without any superuser. Other roles may not even connect.
SELECT 'CREATE DATABASE agentledger OWNER agentledger'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'agentledger')\gexec
ALTER DATABASE agentledger OWNER TO agentledger;
REVOKE CONNECT, TEMPORARY ON DATABASE agentledger FROM PUBLIC;

-- 3. Optional, for a server dedicated to agentledger (as the embedded one is): nobody but
--    superusers connects to the maintenance databases. On a shared server this would lock
--    out other applications' roles that rely on PUBLIC's CONNECT, so it is opt-in.
\if :{?close_maintenance}
REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC;
\endif

-- 4. Extensions only a superuser may create, made ready for later migrations.
\connect agentledger
SELECT 'CREATE EXTENSION IF NOT EXISTS vector'
 WHERE EXISTS (SELECT FROM pg_available_extensions WHERE name = 'vector')\gexec
