/* jobflow--0.2.0--0.3.0.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.3.0'" to load this file. \quit

/*
 * 0.3.0: the tenant boundary.  A fresh install runs this script after
 * 0.1.0's and 0.2.0's (jobflow--0.3.0.sql is their concatenation behind
 * src/install_prelude.sql), so a database updated from 0.1.0 or 0.2.0 ends
 * up with exactly the schema of a fresh install.  Each section below is
 * one concern of the tenant boundary.
 */

/* ---- section: the objects jobflow trusts (schema, roles) ---- */


/* ---- end of section: the objects jobflow trusts ---- */


/* ---- section: search_path of functions that run with more privileges ---- */


/* ---- end of section: search_path ---- */


/* ---- section: who may own tasks ---- */


/* ---- end of section: who may own tasks ---- */


/* ---- section: secrets bound to origins ---- */


/* ---- end of section: secrets bound to origins ---- */


/* ---- section: quotas and wake-ups proportional to what changed ---- */

/*
 * Issue 20, item 6.  The worker reads again only the queues and timers
 * whose rows a committed transaction changed: row triggers name them in
 * shared memory at commit (changes.c), instead of statement triggers that
 * fired, and had the worker read every queue and scan every timer, for
 * every statement, even one that changed no row.  A TRUNCATE of
 * jobflow.queues still has it read them all.  The functions keep their
 * names (and so their privileges and comments); only their code and the
 * triggers' level change.
 */
CREATE OR REPLACE FUNCTION jobflow._cron_notify()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_cron_rows_changed'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;

DROP TRIGGER cron_notify ON jobflow.cron_timers;
CREATE TRIGGER cron_notify
	AFTER INSERT OR UPDATE ON jobflow.cron_timers
	FOR EACH ROW EXECUTE FUNCTION jobflow._cron_notify();

CREATE OR REPLACE FUNCTION jobflow._queues_notify()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_queues_rows_changed'
LANGUAGE C
SET search_path = pg_catalog, pg_temp;

DROP TRIGGER queues_notify ON jobflow.queues;
CREATE TRIGGER queues_notify
	AFTER INSERT OR UPDATE OR DELETE ON jobflow.queues
	FOR EACH ROW EXECUTE FUNCTION jobflow._queues_notify();
CREATE TRIGGER queues_truncate
	AFTER TRUNCATE ON jobflow.queues
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._queues_notify();

/*
 * Whether some queue has a retention of its own, asked after each change:
 * only those queues are in this index, so the answer costs a look at
 * them, not at every configured queue.
 */
CREATE INDEX queues_retention ON jobflow.queues (owner) WHERE retention IS NOT NULL;


/* ---- end of section: quotas and wake-ups ---- */


/* ---- section: outcome notifications ---- */


/* ---- end of section: outcome notifications ---- */


/* ---- section: comments of the objects 0.3.0 adds ---- */


/* ---- end of section: comments ---- */

/* the worker waits for this update: wake it */
SELECT pg_catalog.pg_notify('jobflow', '');
