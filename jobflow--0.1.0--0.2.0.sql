/* jobflow--0.1.0--0.2.0.sql: from the shipped 0.1.0 schema to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.2.0'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs jobflow--0.1.0.sql and then this script, so
 * a new installation and an upgraded one have the same schema by
 * construction.  Every schema change of 0.2.0 goes here, grouped by the
 * issue it belongs to.
 */

/*
 * issue 13 (upgrades): wake a worker that waits for this update.  A worker
 * of the 0.2.0 library finds a 0.1.0 schema, logs what to run and waits
 * (schema_version.c); the notification is delivered at the commit of
 * ALTER EXTENSION, so it may stay anywhere in this script.
 */
SELECT pg_catalog.pg_notify('jobflow', '');
