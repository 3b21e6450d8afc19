/* jobflow--0.1.0--0.2.0.sql: from the shipped 0.1.0 schema to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.2.0'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs jobflow--0.1.0.sql and then this script, so
 * a new installation and an upgraded one have the same schema by
 * construction.  Every schema change of 0.2.0 goes here, grouped by the
 * issue it belongs to.
 */

/* ---- Isolation (issue 8) ---- */

/*
 * No table-level DELETE for tenants: it would let them LOCK TABLE
 * jobflow.cron_timers IN ACCESS EXCLUSIVE MODE (directly or through a view
 * of their own) and stop the worker for everyone.  unschedule_cron()
 * deletes through _delete_cron_timer(), which checks as the caller, under
 * row-level security, and deletes as the table's owner.
 */
CREATE FUNCTION jobflow._delete_cron_timer(id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_delete_cron_timer'
LANGUAGE C VOLATILE STRICT;

CREATE OR REPLACE FUNCTION jobflow.unschedule_cron(name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	timer_id bigint;
BEGIN
	SELECT c.id INTO timer_id FROM jobflow.cron_timers c
	 WHERE c.name = unschedule_cron.name AND c.owner = jobflow._current_role();
	IF timer_id IS NULL THEN
		RETURN false;
	END IF;
	RETURN jobflow._delete_cron_timer(timer_id);
END
$$;

REVOKE ALL ON FUNCTION jobflow._delete_cron_timer(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow._delete_cron_timer(bigint) TO jobflow_user, jobflow_admin;
REVOKE DELETE ON jobflow.cron_timers FROM jobflow_user;

/*
 * A changed timer wakes the worker through shared memory at commit, like
 * new tasks: a NOTIFY payload could be sent by any role, so the worker no
 * longer acts on any.
 */
CREATE OR REPLACE FUNCTION jobflow._cron_notify()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_cron_wake'
LANGUAGE C;

/* Wake-ups published at commit since the server started (for operators and tests). */
CREATE FUNCTION jobflow.wakeups(OUT ranges bigint, OUT timers bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'jobflow_wakeups'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION jobflow.wakeups() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.wakeups() TO jobflow_admin;
