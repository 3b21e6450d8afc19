/* jobflow--0.1.0.sql: schema, SQL API and privileges of jobflow */

\echo Use "CREATE EXTENSION jobflow" to load this file. \quit

/*
 * Task states.  Allowed transitions (enforced by jobflow._task_check):
 *
 *   pending  -> running    the worker claims a due task (attempts + 1)
 *   pending  -> pending    reschedule (run_at changes)
 *   pending  -> cancelled  cancel
 *   running  -> succeeded  2xx response
 *   running  -> failed     non-retryable outcome, or max_attempts reached
 *   running  -> pending    retry with backoff, or rescue after a worker crash
 *
 * succeeded, failed and cancelled are final.  Only the jobflow worker (or a
 * superuser) moves a task into or out of running.
 */
CREATE TYPE jobflow.task_state AS ENUM
	('pending', 'running', 'succeeded', 'failed', 'cancelled');

CREATE SEQUENCE jobflow.tasks_id_seq;

CREATE TABLE jobflow.tasks (
	id			 bigint PRIMARY KEY DEFAULT pg_catalog.nextval('jobflow.tasks_id_seq'),
	url			 text NOT NULL,
	method		 text NOT NULL DEFAULT 'POST',
	headers		 jsonb NOT NULL DEFAULT '{}',
	body		 text,
	content_type text,
	run_at		 timestamptz NOT NULL DEFAULT pg_catalog.now(),
	state		 jobflow.task_state NOT NULL DEFAULT 'pending',
	attempts	 integer NOT NULL DEFAULT 0,
	max_attempts integer NOT NULL DEFAULT 5,
	timeout_ms	 integer NOT NULL DEFAULT 30000,
	queue		 text NOT NULL DEFAULT 'default',
	owner		 regrole NOT NULL,
	created_at	 timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at	 timestamptz NOT NULL DEFAULT pg_catalog.now(),
	last_status	 integer,
	last_error	 text
);
ALTER SEQUENCE jobflow.tasks_id_seq OWNED BY jobflow.tasks.id;

/* The worker's only range query: pending tasks by due time. */
CREATE INDEX tasks_pending_run_at ON jobflow.tasks (run_at)
	WHERE state = 'pending';

/* One row per attempt; owner is copied so row-level security needs no join. */
CREATE TABLE jobflow.task_log (
	task_id		 bigint NOT NULL,
	attempt		 integer NOT NULL,
	owner		 regrole NOT NULL,
	scheduled_at timestamptz NOT NULL,
	started_at	 timestamptz,
	finished_at	 timestamptz,
	outcome		 text NOT NULL,
	http_status	 integer,
	error		 text,
	response	 text
);
CREATE INDEX task_log_task_id ON jobflow.task_log (task_id);

SELECT pg_catalog.pg_extension_config_dump('jobflow.tasks', '');
SELECT pg_catalog.pg_extension_config_dump('jobflow.tasks_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobflow.task_log', '');

/*
 * Row checks in C: validation of url, method, headers, sizes and ranges on
 * INSERT, and the state machine above on UPDATE.  It fires for schedule(),
 * plain INSERT and COPY alike, so nothing invalid ever reaches the table.
 */
CREATE FUNCTION jobflow._task_check()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_task_check'
LANGUAGE C;

CREATE TRIGGER task_check
	BEFORE INSERT OR UPDATE ON jobflow.tasks
	FOR EACH ROW EXECUTE FUNCTION jobflow._task_check();

/*
 * The latest run_at the worker wants to hear about: the end of its wheel's
 * horizon while it runs, infinity when no worker is attached.
 */
CREATE FUNCTION jobflow._wake_horizon()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobflow_wake_horizon'
LANGUAGE C STABLE PARALLEL SAFE;

/*
 * Statement-level wake-up: one NOTIFY per statement that leaves pending
 * tasks due within the worker's horizon, carrying the range of their ids.
 * NOTIFY is delivered at commit only, so a rolled-back task never wakes
 * the worker.
 */
CREATE FUNCTION jobflow._notify_worker()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
	horizon timestamptz := jobflow._wake_horizon();
	lo bigint;
	hi bigint;
BEGIN
	SELECT pg_catalog.min(n.id), pg_catalog.max(n.id) INTO lo, hi
	  FROM changed_tasks n
	 WHERE n.state = 'pending' AND n.run_at < horizon;
	IF lo IS NOT NULL THEN
		PERFORM pg_catalog.pg_notify('jobflow', lo::text || ' ' || hi::text);
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER notify_worker_insert
	AFTER INSERT ON jobflow.tasks
	REFERENCING NEW TABLE AS changed_tasks
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._notify_worker();

CREATE TRIGGER notify_worker_update
	AFTER UPDATE ON jobflow.tasks
	REFERENCING NEW TABLE AS changed_tasks
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._notify_worker();

/*
 * What the worker holds and has done: pid is NULL when no worker runs;
 * counters are cumulative since the server started.
 */
CREATE FUNCTION jobflow.worker_status(
	OUT pid integer,
	OUT started_at timestamptz,
	OUT wheel_tasks bigint,
	OUT wheel_bytes bigint,
	OUT horizon_end timestamptz,
	OUT in_flight bigint,
	OUT queued bigint,
	OUT buffered_rows bigint,
	OUT last_flush timestamptz,
	OUT fired bigint,
	OUT succeeded bigint,
	OUT failed bigint,
	OUT retried bigint,
	OUT flushes bigint,
	OUT flushed_rows bigint,
	OUT statements bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'jobflow_worker_status'
LANGUAGE C VOLATILE;

/* Schedule one HTTP callback; returns the task id. */
CREATE FUNCTION jobflow.schedule(
	url text,
	run_at timestamptz DEFAULT pg_catalog.now(),
	body jsonb DEFAULT NULL,
	headers jsonb DEFAULT '{}',
	method text DEFAULT 'POST',
	timeout_ms integer DEFAULT 30000,
	max_attempts integer DEFAULT 5,
	queue text DEFAULT 'default',
	body_text text DEFAULT NULL,
	content_type text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
	task_id bigint;
BEGIN
	IF schedule.body IS NOT NULL AND schedule.body_text IS NOT NULL THEN
		RAISE EXCEPTION 'body and body_text cannot both be given'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use body for a JSON payload, or body_text with content_type for any other payload.';
	END IF;
	INSERT INTO jobflow.tasks AS t
		(url, run_at, body, content_type, headers, method,
		 timeout_ms, max_attempts, queue)
	VALUES
		(schedule.url, schedule.run_at,
		 COALESCE(schedule.body::text, schedule.body_text),
		 CASE WHEN schedule.body IS NOT NULL
			  THEN COALESCE(schedule.content_type, 'application/json')
			  ELSE schedule.content_type END,
		 schedule.headers, schedule.method,
		 schedule.timeout_ms, schedule.max_attempts, schedule.queue)
	RETURNING t.id INTO task_id;
	RETURN task_id;
END
$$;

/* Cancel a pending task: true if it was pending and is now cancelled. */
CREATE FUNCTION jobflow.cancel(id bigint)
RETURNS boolean
LANGUAGE sql
AS $$
	WITH c AS (
		UPDATE jobflow.tasks t SET state = 'cancelled'
		 WHERE t.id = cancel.id AND t.state = 'pending'
		RETURNING 1)
	SELECT pg_catalog.count(*) > 0 FROM c
$$;

/* Move a pending task to a new time: true if it was pending. */
CREATE FUNCTION jobflow.reschedule(id bigint, run_at timestamptz)
RETURNS boolean
LANGUAGE sql
AS $$
	WITH r AS (
		UPDATE jobflow.tasks t SET run_at = reschedule.run_at
		 WHERE t.id = reschedule.id AND t.state = 'pending'
		RETURNING 1)
	SELECT pg_catalog.count(*) > 0 FROM r
$$;

/*
 * Ownership.  Every task belongs to the role that scheduled it.  A role sees
 * and changes the tasks of the roles whose privileges it has (its own, and
 * those of roles granted to it); members of jobflow_admin see all of them.
 */
ALTER TABLE jobflow.tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobflow.task_log ENABLE ROW LEVEL SECURITY;

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'jobflow_user') THEN
		CREATE ROLE jobflow_user NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'jobflow_admin') THEN
		CREATE ROLE jobflow_admin NOLOGIN;
	END IF;
END
$$;

CREATE POLICY tasks_owner ON jobflow.tasks
	USING (pg_catalog.pg_has_role(owner::oid, 'USAGE')
		   OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'))
	WITH CHECK (pg_catalog.pg_has_role(owner::oid, 'USAGE')
				OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));

CREATE POLICY task_log_owner ON jobflow.task_log FOR SELECT
	USING (pg_catalog.pg_has_role(owner::oid, 'USAGE')
		   OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));

REVOKE ALL ON ALL TABLES IN SCHEMA jobflow FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobflow FROM PUBLIC;

GRANT USAGE ON SCHEMA jobflow TO jobflow_user, jobflow_admin;
GRANT SELECT ON jobflow.tasks, jobflow.task_log TO jobflow_user, jobflow_admin;
GRANT INSERT (url, method, headers, body, content_type, run_at,
			  max_attempts, timeout_ms, queue)
	ON jobflow.tasks TO jobflow_user, jobflow_admin;
GRANT UPDATE (state, run_at) ON jobflow.tasks TO jobflow_user, jobflow_admin;
GRANT USAGE ON SEQUENCE jobflow.tasks_id_seq TO jobflow_user, jobflow_admin;
GRANT EXECUTE ON FUNCTION
	jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer, integer, text, text, text),
	jobflow.cancel(bigint),
	jobflow.reschedule(bigint, timestamptz),
	jobflow._task_check(),
	jobflow._wake_horizon(),
	jobflow._notify_worker(),
	jobflow.worker_status()
	TO jobflow_user, jobflow_admin;

/* wake a worker that waits for this extension to exist */
SELECT pg_catalog.pg_notify('jobflow', '');
