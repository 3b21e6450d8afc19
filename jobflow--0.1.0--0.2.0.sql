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

/*
 * issue 13 (\dx+ jobflow documents its objects): comments on the types,
 * tables, view and API.  Functions are found by name, whatever their
 * argument lists.
 */
COMMENT ON TYPE jobflow.task_state IS 'pending -> running -> succeeded | failed; pending -> cancelled';
COMMENT ON TABLE jobflow.tasks IS 'one row per HTTP callback: the truth the worker fires from';
COMMENT ON TABLE jobflow.task_log IS 'one row per attempt of a task, with its outcome';
COMMENT ON TABLE jobflow.cron_timers IS 'recurring callbacks; each occurrence becomes a task';
COMMENT ON VIEW jobflow.cron IS 'cron timers with their last run, as their owner sees them';
DO $$
DECLARE
	f record;
BEGIN
	FOR f IN
		SELECT p.oid::pg_catalog.regprocedure AS sig, c.text
		  FROM pg_catalog.pg_proc p
		  JOIN (VALUES
			('schedule', 'schedule an HTTP callback at run_at; returns the task id'),
			('cancel', 'cancel a pending task; true if it was pending'),
			('reschedule', 'move a pending task to a new run_at'),
			('worker_status', 'what the background worker holds and has done'),
			('schedule_cron', 'create or replace a recurring callback by name'),
			('unschedule_cron', 'delete a cron timer; its past tasks and log stay'),
			('set_cron_active', 'pause (false) or resume (true) a cron timer'),
			('cron_next', 'next occurrence of a cron schedule after a time, in a time zone'),
			('_task_check', 'internal: row checks and state machine of tasks'),
			('_wake_horizon', 'internal: announces new pending tasks to the worker'),
			('_notify_worker', 'internal: statement trigger waking the worker'),
			('_cron_check', 'internal: row checks of cron timers'),
			('_cron_notify', 'internal: tells the worker a cron timer changed'),
			('_materialize_cron', 'internal: turns due cron occurrences into tasks'),
			('_current_role', 'internal: the role a task or timer belongs to')
		  ) AS c(name, text) ON p.proname = c.name
		 WHERE p.pronamespace = 'jobflow'::pg_catalog.regnamespace
	LOOP
		EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.sig, f.text);
	END LOOP;
END
$$;
