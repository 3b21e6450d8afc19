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
	last_error	 text,
	cron_id		 bigint,		/* the cron timer that made this task, if any */
	cron_at		 timestamptz	/* and the occurrence it stands for */
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
 * The due time before which a new task must wake the worker: a few
 * reconcile intervals ahead while it runs (later tasks are loaded by its
 * rolling rescan), infinity when no worker is attached.
 */
CREATE FUNCTION jobflow._wake_horizon()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobflow_wake_horizon'
LANGUAGE C STABLE PARALLEL SAFE;

/*
 * Statement-level wake-up: one NOTIFY per statement that leaves pending
 * tasks due before jobflow._wake_horizon(), carrying the range of their
 * ids ("<first> <last>"), gathered by the row trigger above.  NOTIFY is
 * delivered at commit only, so a rolled-back task never wakes the worker.
 */
CREATE FUNCTION jobflow._notify_worker()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_notify_worker'
LANGUAGE C;

CREATE TRIGGER notify_worker
	AFTER INSERT OR UPDATE ON jobflow.tasks
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
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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
SET search_path = pg_catalog, pg_temp
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

CREATE POLICY tasks_owner_select ON jobflow.tasks FOR SELECT
	USING (pg_catalog.pg_has_role(owner::oid, 'USAGE')
		   OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));
CREATE POLICY tasks_owner_insert ON jobflow.tasks FOR INSERT
	WITH CHECK (pg_catalog.pg_has_role(owner::oid, 'USAGE')
				OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));

/*
 * Only pending tasks can be updated (cancel, reschedule) or locked with
 * SELECT ... FOR UPDATE: a role cannot hold a lock on a running task and
 * so stall or deadlock the worker writing its outcome.  The worker claims
 * with SKIP LOCKED, so a locked pending task only delays itself.
 */
CREATE POLICY tasks_owner_update ON jobflow.tasks FOR UPDATE
	USING (state OPERATOR(pg_catalog.=) 'pending'
		   AND (pg_catalog.pg_has_role(owner::oid, 'USAGE')
				OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE')))
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

/* ======================================================================
 * Cron timers: recurring tasks
 *
 * A timer is a template for tasks plus a schedule.  The worker turns each
 * occurrence into an ordinary task ahead of time (jobflow._materialize_cron,
 * called at every housekeeping for the next minute or so), so retries, the
 * log and cancel work for recurring tasks exactly as for one-off ones.
 * next_at is the first occurrence not yet turned into a task; it always
 * comes from the schedule, never from when the last one fired: no drift.
 * (cron_id, cron_at) is unique among live tasks, so an occurrence is never
 * created twice, whatever the number of workers or restarts.
 * ====================================================================== */

CREATE SEQUENCE jobflow.cron_timers_id_seq;

CREATE TABLE jobflow.cron_timers (
	id			 bigint PRIMARY KEY DEFAULT pg_catalog.nextval('jobflow.cron_timers_id_seq'),
	name		 text NOT NULL,
	owner		 regrole NOT NULL,	/* the current role, set by _cron_check */
	schedule	 text NOT NULL,
	timezone	 text NOT NULL DEFAULT 'UTC',
	url			 text NOT NULL,
	method		 text NOT NULL DEFAULT 'POST',
	headers		 jsonb NOT NULL DEFAULT '{}',
	body		 text,
	content_type text,
	timeout_ms	 integer NOT NULL DEFAULT 30000,
	max_attempts integer NOT NULL DEFAULT 5,
	queue		 text NOT NULL DEFAULT 'default',
	active		 boolean NOT NULL DEFAULT true,
	missed		 text NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'once')),
	next_at		 timestamptz,		/* NULL while inactive */
	created_at	 timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at	 timestamptz NOT NULL DEFAULT pg_catalog.now(),
	UNIQUE (owner, name)
);
ALTER SEQUENCE jobflow.cron_timers_id_seq OWNED BY jobflow.cron_timers.id;

/* One live task per occurrence; a cancelled one may be replaced. */
CREATE UNIQUE INDEX tasks_cron_occurrence ON jobflow.tasks (cron_id, cron_at)
	WHERE cron_id IS NOT NULL AND state <> 'cancelled';

SELECT pg_catalog.pg_extension_config_dump('jobflow.cron_timers', '');
SELECT pg_catalog.pg_extension_config_dump('jobflow.cron_timers_id_seq', '');

/*
 * Row checks in C: name, schedule (with the position of a syntax error),
 * time zone (canonical name), the missed policy, and the same request
 * checks as tasks.  Computes next_at from now when the row is created,
 * changed by anyone but the materialiser (which sets next_at itself), or
 * activated; clears it when the timer is inactive.
 */
CREATE FUNCTION jobflow._cron_check()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_cron_check'
LANGUAGE C;

CREATE TRIGGER cron_check
	BEFORE INSERT OR UPDATE ON jobflow.cron_timers
	FOR EACH ROW EXECUTE FUNCTION jobflow._cron_check();

/* A timer changed: the worker materialises its next occurrences at once. */
CREATE FUNCTION jobflow._cron_notify()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM pg_catalog.pg_notify('jobflow', 'cron');
	RETURN NULL;
END
$$;

CREATE TRIGGER cron_notify
	AFTER INSERT OR UPDATE ON jobflow.cron_timers
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._cron_notify();

/* First occurrence of a schedule strictly after a time; NULL if none. */
CREATE FUNCTION jobflow.cron_next(
	schedule text,
	timezone text DEFAULT 'UTC',
	after timestamptz DEFAULT pg_catalog.now())
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobflow_cron_next'
LANGUAGE C STABLE STRICT PARALLEL SAFE;

/*
 * For the worker: create the tasks of every active timer's occurrences
 * before until (at most 10000 a timer a call), advance next_at, and apply
 * each timer's missed policy to occurrences more than 5 s in the past.
 * With catch_up (worker start), pending occurrences left over from before
 * count as missed too.  Returns the tasks created.
 */
CREATE FUNCTION jobflow._materialize_cron(
	until timestamptz,
	catch_up boolean DEFAULT false)
RETURNS TABLE (id bigint, run_at timestamptz)
AS 'MODULE_PATHNAME', 'jobflow_materialize_cron'
LANGUAGE C VOLATILE STRICT;

/* The calling role's oid, for the per-owner name lookups below. */
CREATE FUNCTION jobflow._current_role()
RETURNS regrole
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT r.oid::regrole FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER $$;

/*
 * Create the timer, or replace the definition of the caller's timer of that
 * name: its pending occurrences are cancelled and the schedule restarts
 * from now.  Returns the timer id (kept on replace).
 */
CREATE FUNCTION jobflow.schedule_cron(
	name text,
	schedule text,
	url text,
	body jsonb DEFAULT NULL,
	headers jsonb DEFAULT '{}',
	method text DEFAULT 'POST',
	timezone text DEFAULT 'UTC',
	timeout_ms integer DEFAULT 30000,
	max_attempts integer DEFAULT 5,
	queue text DEFAULT 'default',
	body_text text DEFAULT NULL,
	content_type text DEFAULT NULL,
	active boolean DEFAULT true,
	missed text DEFAULT 'skip')
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	timer_id bigint;
BEGIN
	IF schedule_cron.body IS NOT NULL AND schedule_cron.body_text IS NOT NULL THEN
		RAISE EXCEPTION 'body and body_text cannot both be given'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use body for a JSON payload, or body_text with content_type for any other payload.';
	END IF;
	INSERT INTO jobflow.cron_timers AS c
		(name, schedule, timezone, url, method, headers, body, content_type,
		 timeout_ms, max_attempts, queue, active, missed)
	VALUES
		(schedule_cron.name, schedule_cron.schedule, schedule_cron.timezone,
		 schedule_cron.url, schedule_cron.method, schedule_cron.headers,
		 COALESCE(schedule_cron.body::text, schedule_cron.body_text),
		 CASE WHEN schedule_cron.body IS NOT NULL
			  THEN COALESCE(schedule_cron.content_type, 'application/json')
			  ELSE schedule_cron.content_type END,
		 schedule_cron.timeout_ms, schedule_cron.max_attempts,
		 schedule_cron.queue, schedule_cron.active, schedule_cron.missed)
	ON CONFLICT ON CONSTRAINT cron_timers_owner_name_key DO UPDATE
		SET schedule = excluded.schedule, timezone = excluded.timezone,
			url = excluded.url, method = excluded.method,
			headers = excluded.headers, body = excluded.body,
			content_type = excluded.content_type,
			timeout_ms = excluded.timeout_ms,
			max_attempts = excluded.max_attempts, queue = excluded.queue,
			active = excluded.active, missed = excluded.missed
	RETURNING c.id INTO timer_id;

	/* the row is locked until commit: the worker cannot add to these */
	UPDATE jobflow.tasks t SET state = 'cancelled'
	 WHERE t.cron_id = timer_id AND t.state = 'pending';
	RETURN timer_id;
END
$$;

/*
 * Delete the caller's timer of that name; its pending occurrences are
 * cancelled, its past tasks and their log stay.  False if there was none.
 */
CREATE FUNCTION jobflow.unschedule_cron(name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	timer_id bigint;
BEGIN
	DELETE FROM jobflow.cron_timers c
	 WHERE c.name = unschedule_cron.name AND c.owner = jobflow._current_role()
	RETURNING c.id INTO timer_id;
	IF timer_id IS NULL THEN
		RETURN false;
	END IF;
	UPDATE jobflow.tasks t SET state = 'cancelled'
	 WHERE t.cron_id = timer_id AND t.state = 'pending';
	RETURN true;
END
$$;

/*
 * Pause (pending occurrences are cancelled) or resume (the schedule
 * restarts from now) the caller's timer of that name.  False if none.
 */
CREATE FUNCTION jobflow.set_cron_active(name text, active boolean)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	timer_id bigint;
BEGIN
	UPDATE jobflow.cron_timers c SET active = set_cron_active.active
	 WHERE c.name = set_cron_active.name AND c.owner = jobflow._current_role()
	RETURNING c.id INTO timer_id;
	IF timer_id IS NULL THEN
		RETURN false;
	END IF;
	IF NOT set_cron_active.active THEN
		UPDATE jobflow.tasks t SET state = 'cancelled'
		 WHERE t.cron_id = timer_id AND t.state = 'pending';
	END IF;
	RETURN true;
END
$$;

ALTER TABLE jobflow.cron_timers ENABLE ROW LEVEL SECURITY;

CREATE POLICY cron_timers_owner ON jobflow.cron_timers
	USING (pg_catalog.pg_has_role(owner::oid, 'USAGE')
		   OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'))
	WITH CHECK (pg_catalog.pg_has_role(owner::oid, 'USAGE')
				OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));

/*
 * The timers with their next occurrence (the earliest one waiting as a
 * task, else next_at), their last occurrence that fired and its outcome.
 * security_invoker: the caller's row-level security applies to both tables.
 */
CREATE VIEW jobflow.cron WITH (security_invoker = true) AS
SELECT c.id, c.name, c.owner, c.schedule, c.timezone, c.url, c.method,
	   c.active, c.missed,
	   CASE WHEN c.active THEN COALESCE(n.next_at, c.next_at) END AS next_at,
	   l.cron_at AS last_at,
	   l.id AS last_task_id,
	   l.state AS last_state,
	   l.last_status,
	   l.last_error,
	   c.created_at, c.updated_at
  FROM jobflow.cron_timers c
  LEFT JOIN LATERAL (
	SELECT pg_catalog.min(t.cron_at) AS next_at
	  FROM jobflow.tasks t
	 WHERE t.cron_id = c.id AND t.state <> 'cancelled'
	   AND t.state = 'pending' AND t.attempts = 0) n ON true
  LEFT JOIN LATERAL (
	SELECT t.cron_at, t.id, t.state, t.last_status, t.last_error
	  FROM jobflow.tasks t
	 WHERE t.cron_id = c.id AND t.state <> 'cancelled' AND t.attempts > 0
	 ORDER BY t.cron_at DESC
	 LIMIT 1) l ON true;

REVOKE ALL ON jobflow.cron_timers, jobflow.cron FROM PUBLIC;
REVOKE ALL ON FUNCTION
	jobflow._cron_check(),
	jobflow._cron_notify(),
	jobflow.cron_next(text, text, timestamptz),
	jobflow._materialize_cron(timestamptz, boolean),
	jobflow._current_role(),
	jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer, integer, text, text, text, boolean, text),
	jobflow.unschedule_cron(text),
	jobflow.set_cron_active(text, boolean)
	FROM PUBLIC;

GRANT SELECT, DELETE ON jobflow.cron_timers TO jobflow_user, jobflow_admin;
GRANT INSERT (name, schedule, timezone, url, method, headers, body, content_type,
			  timeout_ms, max_attempts, queue, active, missed),
	  UPDATE (schedule, timezone, url, method, headers, body, content_type,
			  timeout_ms, max_attempts, queue, active, missed)
	ON jobflow.cron_timers TO jobflow_user, jobflow_admin;
GRANT USAGE ON SEQUENCE jobflow.cron_timers_id_seq TO jobflow_user, jobflow_admin;
GRANT SELECT ON jobflow.cron TO jobflow_user, jobflow_admin;
GRANT EXECUTE ON FUNCTION
	jobflow._cron_check(),
	jobflow._cron_notify(),
	jobflow.cron_next(text, text, timestamptz),
	jobflow._current_role(),
	jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer, integer, text, text, text, boolean, text),
	jobflow.unschedule_cron(text),
	jobflow.set_cron_active(text, boolean)
	TO jobflow_user, jobflow_admin;
/* jobflow._materialize_cron is for the worker (and superusers) only */

/* Tasks only fire in the database the worker serves: say so at once. */
DO $$
BEGIN
	IF pg_catalog.current_database() <> pg_catalog.current_setting('jobflow.database_name') THEN
		RAISE WARNING 'jobflow''s worker runs in database "%", not in "%"',
			pg_catalog.current_setting('jobflow.database_name'), pg_catalog.current_database()
			USING DETAIL = 'Tasks scheduled in this database will not fire.',
				  HINT = 'Set jobflow.database_name to this database and restart the server, or create the extension in that database.';
	END IF;
END
$$;
