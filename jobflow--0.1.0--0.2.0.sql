/* jobflow--0.1.0--0.2.0.sql: from the shipped 0.1.0 schema to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobflow UPDATE TO '0.2.0'" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs jobflow--0.1.0.sql and then this script, so
 * a new installation and an upgraded one have the same schema by
 * construction.  Every schema change of 0.2.0 goes here, grouped by the
 * issue it belongs to.
 */

/* ----------------------------------------------------------------------
 * issue 9, item 17: inputs refused with a clear SQLSTATE, nothing written
 * ---------------------------------------------------------------------- */

/*
 * The trigger functions are internal: tenants need no EXECUTE on them to
 * fire the triggers (the privilege is checked when a trigger is created,
 * not when it fires), and without it they cannot attach them to tables of
 * their own.  _wake_horizon() is read by nobody but jobflow itself.
 */
REVOKE EXECUTE ON FUNCTION
	jobflow._task_check(),
	jobflow._notify_worker(),
	jobflow._wake_horizon(),
	jobflow._cron_check(),
	jobflow._cron_notify()
	FROM PUBLIC, jobflow_user, jobflow_admin;

/*
 * reschedule() checks its arguments before it looks for the task, so a
 * bad time raises whether or not the id exists (and is visible).
 */
CREATE OR REPLACE FUNCTION jobflow.reschedule(id bigint, run_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n bigint;
BEGIN
	IF reschedule.run_at IS NULL THEN
		RAISE EXCEPTION 'run_at must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Give the time the task should run at; now() runs it at once.';
	END IF;
	IF NOT pg_catalog.isfinite(reschedule.run_at) THEN
		RAISE EXCEPTION 'run_at must be a finite timestamp'
			USING ERRCODE = 'datetime_field_overflow';
	END IF;
	UPDATE jobflow.tasks t SET run_at = reschedule.run_at
	 WHERE t.id = reschedule.id AND t.state = 'pending';
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n > 0;
END
$$;

/*
 * COPY FROM into a table with row-level security is refused by PostgreSQL
 * for every role the policies apply to ("COPY FROM not supported with
 * row-level security", 0A000), so an application role cannot \copy into
 * jobflow.tasks.  It copies into this view instead: its INSTEAD OF trigger
 * inserts each row into jobflow.tasks as the calling role, under the same
 * policies, checks and notification as any INSERT.  The view has the
 * columns an application may set, with the table's defaults.
 */
CREATE VIEW jobflow.task_import AS
SELECT t.url, t.method, t.headers, t.body, t.content_type, t.run_at,
	   t.max_attempts, t.timeout_ms, t.queue
  FROM jobflow.tasks t
 WHERE false;

ALTER VIEW jobflow.task_import ALTER COLUMN method SET DEFAULT 'POST';
ALTER VIEW jobflow.task_import ALTER COLUMN headers SET DEFAULT '{}';
ALTER VIEW jobflow.task_import ALTER COLUMN run_at SET DEFAULT pg_catalog.now();
ALTER VIEW jobflow.task_import ALTER COLUMN max_attempts SET DEFAULT 5;
ALTER VIEW jobflow.task_import ALTER COLUMN timeout_ms SET DEFAULT 30000;
ALTER VIEW jobflow.task_import ALTER COLUMN queue SET DEFAULT 'default';

CREATE FUNCTION jobflow._task_import()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	INSERT INTO jobflow.tasks
		(url, method, headers, body, content_type, run_at,
		 max_attempts, timeout_ms, queue)
	VALUES
		(NEW.url, NEW.method, NEW.headers, NEW.body, NEW.content_type, NEW.run_at,
		 NEW.max_attempts, NEW.timeout_ms, NEW.queue);
	RETURN NEW;
END
$$;

CREATE TRIGGER task_import
	INSTEAD OF INSERT ON jobflow.task_import
	FOR EACH ROW EXECUTE FUNCTION jobflow._task_import();

REVOKE ALL ON jobflow.task_import FROM PUBLIC;
REVOKE ALL ON FUNCTION jobflow._task_import() FROM PUBLIC;
GRANT INSERT ON jobflow.task_import TO jobflow_user, jobflow_admin;
