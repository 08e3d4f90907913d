-- The costapp role and database; safe to run again.
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'costapp') THEN
    CREATE ROLE costapp LOGIN CREATEDB PASSWORD 'costapp';
  END IF;
END $$;
SELECT 'CREATE DATABASE costapp OWNER costapp'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'costapp')\gexec
