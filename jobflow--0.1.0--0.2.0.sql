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
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;

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

/*
 * issue 13 (upgrades): wake a worker that waits for this update.  A worker
 * of the 0.2.0 library finds a 0.1.0 schema, logs what to run and waits
 * (schema_version.c); the notification is delivered at the commit of
 * ALTER EXTENSION, so it may stay anywhere in this script.
 */
SELECT pg_catalog.pg_notify('jobflow', '');

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

/* ----------------------------------------------------------------------
 * issue 9, Data 6: every path that changes a cron timer applies to the
 * occurrences it has not fired yet.
 *
 * schedule_cron, unschedule_cron and set_cron_active cancel pending
 * occurrences themselves; a plain UPDATE or DELETE of jobflow.cron_timers
 * (which jobflow_user is granted) did not, so occurrences already made
 * kept firing with the old definition, or after the timer was paused or
 * deleted.  This trigger cancels them on every path: the timer's
 * materialiser then makes the next occurrences from the new definition.
 * A change of next_at, updated_at or missed alone (the materialiser's own
 * bookkeeping, or a policy change) leaves them alone.  SECURITY DEFINER:
 * a tenant may not write last_error, and the rows are the timer's own.
 * ---------------------------------------------------------------------- */
CREATE FUNCTION jobflow._cron_sync_occurrences()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	why text;
BEGIN
	IF TG_OP = 'DELETE' THEN
		why := 'cancelled: its cron timer was deleted';
	ELSIF NOT NEW.active AND OLD.active THEN
		why := 'cancelled: its cron timer was paused';
	ELSIF (OLD.schedule, OLD.timezone, OLD.url, OLD.method, OLD.headers, OLD.body,
		   OLD.content_type, OLD.timeout_ms, OLD.max_attempts, OLD.queue, OLD.owner)
		  IS DISTINCT FROM
		  (NEW.schedule, NEW.timezone, NEW.url, NEW.method, NEW.headers, NEW.body,
		   NEW.content_type, NEW.timeout_ms, NEW.max_attempts, NEW.queue, NEW.owner) THEN
		why := 'cancelled: its cron timer was changed';
	ELSE
		RETURN NULL;
	END IF;
	UPDATE jobflow.tasks t
	   SET state = 'cancelled', last_error = why, updated_at = pg_catalog.now()
	 WHERE t.cron_id = OLD.id AND t.state = 'pending';
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION jobflow._cron_sync_occurrences() FROM PUBLIC;

CREATE TRIGGER cron_sync_occurrences
	AFTER UPDATE OR DELETE ON jobflow.cron_timers
	FOR EACH ROW EXECUTE FUNCTION jobflow._cron_sync_occurrences();

/* ----------------------------------------------------------------------
 * issue 11, item 5: the idioms users bring
 *
 * Binary bodies: body_bytes holds a body that is not text (schedule(...,
 * body_bytes => ..., content_type => ...)); a task has body or body_bytes,
 * never both, and the size limit applies to either.  Cron timers keep
 * text bodies.
 *
 * pg_net's habit: headers => '{"Content-Type": "application/json"}' with a
 * jsonb body.  _json_content_type() takes a JSON media type given as a
 * header instead of adding its own, and refuses only one that contradicts
 * the JSON body; the row trigger accepts content_type and a Content-Type
 * header that say the same, and keeps content_type alone.
 * ---------------------------------------------------------------------- */
ALTER TABLE jobflow.tasks ADD COLUMN body_bytes bytea;
ALTER TABLE jobflow.tasks ADD CONSTRAINT tasks_one_body
	CHECK (body IS NULL OR body_bytes IS NULL);
GRANT INSERT (body_bytes) ON jobflow.tasks TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow._json_content_type(content_type text, headers jsonb)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	given text;
	media text;
BEGIN
	IF content_type IS NOT NULL THEN
		RETURN content_type;
	END IF;
	IF pg_catalog.jsonb_typeof(headers) = 'object' THEN
		SELECT e.value INTO given
		  FROM pg_catalog.jsonb_each_text(headers) e
		 WHERE pg_catalog.lower(e.key) = 'content-type';
	END IF;
	IF given IS NULL THEN
		RETURN 'application/json';
	END IF;
	media := pg_catalog.lower(pg_catalog.btrim(pg_catalog.split_part(given, ';', 1)));
	IF media = 'application/json' OR media ~ '^application/[a-z0-9.!#&^_-]+\+json$' THEN
		RETURN NULL;		/* the header says it */
	END IF;
	RAISE EXCEPTION 'Content-Type header "%" does not agree with a JSON body', given
		USING ERRCODE = 'invalid_parameter_value',
			  HINT = 'Give body_text or body_bytes with content_type for a body that is not JSON.';
END
$$;
REVOKE ALL ON FUNCTION jobflow._json_content_type(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow._json_content_type(text, jsonb) TO jobflow_user, jobflow_admin;

CREATE OR REPLACE FUNCTION jobflow.schedule_cron(
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
			  THEN jobflow._json_content_type(schedule_cron.content_type, schedule_cron.headers)
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

/* ----------------------------------------------------------------------
 * issue 11, item 4: outcome notifications
 *
 * A task scheduled with notify => true is announced when the worker
 * writes its final outcome: NOTIFY jobflow_outcome, sent by the worker in
 * the transaction that writes a batch of outcomes (so at its commit), with
 * "<id>:<succeeded|failed>" for each such task of the batch, separated by
 * spaces; more than 200 tasks take several notifications of 200.
 * ---------------------------------------------------------------------- */
ALTER TABLE jobflow.tasks ADD COLUMN notify boolean NOT NULL DEFAULT false;
GRANT INSERT (notify) ON jobflow.tasks TO jobflow_user, jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 11, item 1: idempotency keys
 *
 * A key is unique per owner among the tasks that have not finished
 * (pending or running: a running task may go back to pending for a retry,
 * so it keeps its key).  The unique partial index gives a plain INSERT,
 * INSERT ... SELECT and COPY the 'error' meaning (unique_violation), and
 * INSERT ... ON CONFLICT DO NOTHING the 'ignore' meaning; schedule() offers
 * all three.  Once a task has succeeded, failed or been cancelled, its key
 * is free again: the key protects against scheduling the same callback
 * twice while the first may still run, and the receiver deduplicates
 * deliveries with webhook-id.
 * ---------------------------------------------------------------------- */
ALTER TABLE jobflow.tasks ADD COLUMN key text;
ALTER TABLE jobflow.tasks ADD CONSTRAINT tasks_key_length
	CHECK (key IS NULL OR pg_catalog.octet_length(key) BETWEEN 1 AND 512);

CREATE UNIQUE INDEX tasks_owner_key ON jobflow.tasks (owner, key)
	WHERE key IS NOT NULL AND state IN ('pending', 'running');

GRANT INSERT (key) ON jobflow.tasks TO jobflow_user, jobflow_admin;
/*
 * on_duplicate => 'replace' changes the request of a pending task, which
 * tenants may not UPDATE themselves (only state and run_at): schedule()
 * goes through _replace_task(), which locks the task as the caller, under
 * row-level security, and writes as the table's owner; the row trigger
 * checks the new request as it checks an insert.
 */
CREATE FUNCTION jobflow._replace_task(id bigint, url text, run_at timestamptz,
	body text, content_type text, headers jsonb, method text,
	timeout_ms integer, max_attempts integer, queue text, body_bytes bytea)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_replace_task'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow._replace_task(bigint, text, timestamptz, text, text,
	jsonb, text, integer, integer, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow._replace_task(bigint, text, timestamptz, text, text,
	jsonb, text, integer, integer, text, bytea) TO jobflow_user, jobflow_admin;

DROP FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer,
							   integer, text, text, text);

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
	content_type text DEFAULT NULL,
	key text DEFAULT NULL,
	on_duplicate text DEFAULT 'ignore',
	body_bytes bytea DEFAULT NULL,
	notify boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	task_id bigint;
	task_state jobflow.task_state;
	new_body text;
	new_content_type text;
BEGIN
	IF (schedule.body IS NOT NULL)::int + (schedule.body_text IS NOT NULL)::int
	   + (schedule.body_bytes IS NOT NULL)::int > 1 THEN
		RAISE EXCEPTION 'only one of body, body_text and body_bytes can be given'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use body for a JSON payload, body_text with content_type for any other text, or body_bytes with content_type for binary data.';
	END IF;
	IF schedule.on_duplicate IS NULL
	   OR schedule.on_duplicate NOT IN ('ignore', 'replace', 'error') THEN
		RAISE EXCEPTION 'on_duplicate must be ''ignore'', ''replace'' or ''error'', not %',
			COALESCE(pg_catalog.quote_literal(schedule.on_duplicate), 'null')
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	new_body := COALESCE(schedule.body::text, schedule.body_text);
	new_content_type := CASE
		WHEN schedule.body IS NOT NULL
			THEN jobflow._json_content_type(schedule.content_type, schedule.headers)
		WHEN schedule.body_bytes IS NOT NULL
			THEN COALESCE(schedule.content_type, 'application/octet-stream')
		ELSE schedule.content_type END;
	IF schedule.key IS NULL OR schedule.on_duplicate = 'error' THEN
		/* a duplicate raises unique_violation from tasks_owner_key */
		INSERT INTO jobflow.tasks AS t
			(url, run_at, body, body_bytes, content_type, headers, method,
			 timeout_ms, max_attempts, queue, key, notify)
		VALUES
			(schedule.url, schedule.run_at, new_body, schedule.body_bytes, new_content_type,
			 schedule.headers, schedule.method, schedule.timeout_ms,
			 schedule.max_attempts, schedule.queue, schedule.key,
			 COALESCE(schedule.notify, false))
		RETURNING t.id INTO task_id;
		RETURN task_id;
	END IF;
	/*
	 * ON CONFLICT DO NOTHING waits for a racing transaction that inserted
	 * the same key: if it commits, this insert does nothing and the loop
	 * finds its task; if it rolls back, this insert goes ahead.  A task
	 * that finishes in between frees the key, and the loop inserts again.
	 */
	LOOP
		INSERT INTO jobflow.tasks AS t
			(url, run_at, body, body_bytes, content_type, headers, method,
			 timeout_ms, max_attempts, queue, key, notify)
		VALUES
			(schedule.url, schedule.run_at, new_body, schedule.body_bytes, new_content_type,
			 schedule.headers, schedule.method, schedule.timeout_ms,
			 schedule.max_attempts, schedule.queue, schedule.key,
			 COALESCE(schedule.notify, false))
		ON CONFLICT (owner, key) WHERE key IS NOT NULL AND state IN ('pending', 'running')
		DO NOTHING
		RETURNING t.id INTO task_id;
		IF task_id IS NOT NULL THEN
			RETURN task_id;
		END IF;
		SELECT t.id, t.state INTO task_id, task_state
		  FROM jobflow.tasks t
		 WHERE t.owner = jobflow._current_role() AND t.key = schedule.key
		   AND t.state IN ('pending', 'running');
		IF task_id IS NOT NULL THEN
			IF schedule.on_duplicate = 'ignore' OR task_state <> 'pending' THEN
				RETURN task_id;
			END IF;
			/* replace: only while it is still pending (the policy says so) */
			IF jobflow._replace_task(task_id, schedule.url, schedule.run_at, new_body,
									 new_content_type, schedule.headers, schedule.method,
									 schedule.timeout_ms, schedule.max_attempts,
									 schedule.queue, schedule.body_bytes) THEN
				RETURN task_id;
			END IF;
			/* claimed or cancelled in between: look again */
		END IF;
	END LOOP;
END
$$;

REVOKE ALL ON FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer,
										integer, text, text, text, text, text, bytea, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer,
										   integer, text, text, text, text, text, bytea, boolean)
	TO jobflow_user, jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 11, item 2: Standard Webhooks signatures
 *
 * jobflow.installation names this incarnation of the extension: a random
 * token made by CREATE EXTENSION, part of every webhook-id
 * ("jf_<token>_<task id>").  Task ids restart after DROP/CREATE EXTENSION;
 * the new token keeps them from colliding with earlier ids at a receiver.
 * It is configuration, so dumps keep it: a restore runs CREATE EXTENSION
 * (one new row), then loads the dumped row, and the oldest row is the one
 * in use, so restored tasks keep the webhook-id they had.
 *
 * jobflow.signing_secrets holds the signing keys.  Nobody but its owner
 * (the superuser who created the extension, whose worker signs) may read
 * it; create_signing_secret() and revoke_signing_secret() check the caller
 * and write as the owner.  It is not configuration: dumps do not contain
 * the secrets, and after a restore each role creates a new secret (and
 * gives it to its receivers) before its callbacks are signed again.
 * ---------------------------------------------------------------------- */
CREATE TABLE jobflow.installation (
	id			text NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
INSERT INTO jobflow.installation (id)
	VALUES (pg_catalog.left(pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', ''), 12));
SELECT pg_catalog.pg_extension_config_dump('jobflow.installation', '');
REVOKE ALL ON jobflow.installation FROM PUBLIC;
GRANT SELECT ON jobflow.installation TO jobflow_user, jobflow_admin;

CREATE TABLE jobflow.signing_secrets (
	owner		regrole NOT NULL,
	secret		bytea NOT NULL,
	created_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	expires_at	timestamptz		/* NULL: the newest; else the end of its grace */
);
CREATE INDEX signing_secrets_owner ON jobflow.signing_secrets (owner);
REVOKE ALL ON jobflow.signing_secrets FROM PUBLIC;

/* What a role may know of its secrets: that they exist, and until when. */
CREATE VIEW jobflow.signing_keys WITH (security_barrier) AS
SELECT s.owner, s.created_at, s.expires_at
  FROM jobflow.signing_secrets s
 WHERE pg_catalog.pg_has_role(s.owner::oid, 'USAGE')
	OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE');
REVOKE ALL ON jobflow.signing_keys FROM PUBLIC;
GRANT SELECT ON jobflow.signing_keys TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow.create_signing_secret(
	for_role regrole DEFAULT NULL,
	grace interval DEFAULT '24 hours')
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_create_signing_secret'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.revoke_signing_secret(
	for_role regrole DEFAULT NULL,
	only_previous boolean DEFAULT false)
RETURNS integer
AS 'MODULE_PATHNAME', 'jobflow_revoke_signing_secret'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow._webhook_signature(secret text, msg_id text, ts bigint, body bytea)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_webhook_signature'
LANGUAGE C IMMUTABLE STRICT;

REVOKE ALL ON FUNCTION
	jobflow.create_signing_secret(regrole, interval),
	jobflow.revoke_signing_secret(regrole, boolean),
	jobflow._webhook_signature(text, text, bigint, bytea)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	jobflow.create_signing_secret(regrole, interval),
	jobflow.revoke_signing_secret(regrole, boolean)
	TO jobflow_user, jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 11, item 3: secrets that stay secret
 *
 * A header value may be {"secret": "name"}: the task row keeps the
 * reference, the worker sends the owner's secret of that name.  Secrets
 * are in jobflow.secrets, which only its owner (the worker) reads;
 * set_secret() and drop_secret() check the caller and write as the owner.
 * Not configuration: dumps do not contain the values, so after a restore
 * each role stores its secrets again (until then, a header whose secret is
 * missing is left out of the request).
 * ---------------------------------------------------------------------- */
CREATE TABLE jobflow.secrets (
	owner		regrole NOT NULL,
	name		text NOT NULL,
	value		text NOT NULL,
	updated_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	PRIMARY KEY (owner, name)
);
REVOKE ALL ON jobflow.secrets FROM PUBLIC;

/* The names of the secrets a role has, without their values. */
CREATE VIEW jobflow.secret_names WITH (security_barrier) AS
SELECT s.owner, s.name, s.updated_at
  FROM jobflow.secrets s
 WHERE pg_catalog.pg_has_role(s.owner::oid, 'USAGE')
	OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE');
REVOKE ALL ON jobflow.secret_names FROM PUBLIC;
GRANT SELECT ON jobflow.secret_names TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow.set_secret(name text, value text, for_role regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_secret'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.drop_secret(name text, for_role regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_drop_secret'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION
	jobflow.set_secret(text, text, regrole),
	jobflow.drop_secret(text, regrole)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	jobflow.set_secret(text, text, regrole),
	jobflow.drop_secret(text, regrole)
	TO jobflow_user, jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 10, item 2: redrive and dead letters
 *
 * A failed or cancelled task can go back to pending with a fresh attempt
 * budget (the row trigger allows that move and computes the budget; see
 * attempts_base).  Tenants may update pending rows only (row-level
 * security), so retry() and retry_failed() check as the caller, under
 * row-level security, and update as the table's owner (tenant_api.c).
 * ---------------------------------------------------------------------- */
ALTER TABLE jobflow.tasks ADD COLUMN attempts_base integer NOT NULL DEFAULT 0;

CREATE FUNCTION jobflow.retry(id bigint, run_at timestamptz DEFAULT pg_catalog.now())
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_retry'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.retry_failed(queue text DEFAULT NULL, since timestamptz DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobflow_retry_failed'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * Finished tasks by the time they finished: dead letters, and pruning (id
 * too: with per-queue retentions, pruning goes on from an (updated_at, id)
 * mark; see item 3).
 */
CREATE INDEX tasks_finished_at ON jobflow.tasks (updated_at, id)
	WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE VIEW jobflow.failed_tasks WITH (security_invoker = true) AS
SELECT t.id, t.queue, t.url, t.attempts, t.last_status, t.last_error,
	   t.updated_at AS failed_at
  FROM jobflow.tasks t
 WHERE t.state = 'failed';

REVOKE ALL ON FUNCTION jobflow.retry(bigint, timestamptz),
	jobflow.retry_failed(text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.retry(bigint, timestamptz),
	jobflow.retry_failed(text, timestamptz) TO jobflow_user, jobflow_admin;
REVOKE ALL ON jobflow.failed_tasks FROM PUBLIC;
GRANT SELECT ON jobflow.failed_tasks TO jobflow_user, jobflow_admin;


/* ----------------------------------------------------------------------
 * issue 10, item 1: retention
 *
 * The worker prunes finished tasks older than jobflow.retention in small
 * batches (prune.c), oldest first through tasks_finished_at (above).  A
 * task and its log rows always go together, whoever deletes: a statement
 * trigger removes the log rows of the tasks a DELETE removed (one join per
 * statement over its transition table; a foreign key would instead cost a
 * lookup and a row lock on the task for every log row the worker writes),
 * and a TRUNCATE of tasks truncates the log.  SECURITY DEFINER: whoever
 * may delete tasks may delete their log rows.
 * ---------------------------------------------------------------------- */
CREATE FUNCTION jobflow._task_log_cascade()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		BEGIN
			TRUNCATE jobflow.task_log;
		EXCEPTION WHEN object_in_use THEN
			-- "TRUNCATE jobflow.tasks, jobflow.task_log": truncated already
			-- (or a cursor of this session reads it)
			DELETE FROM jobflow.task_log;
		END;
	ELSE
		DELETE FROM jobflow.task_log l USING gone_tasks g WHERE l.task_id = g.id;
	END IF;
	RETURN NULL;
END
$$;

CREATE TRIGGER task_log_cascade
	AFTER DELETE ON jobflow.tasks
	REFERENCING OLD TABLE AS gone_tasks
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._task_log_cascade();

CREATE TRIGGER task_log_truncate
	AFTER TRUNCATE ON jobflow.tasks
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._task_log_cascade();

/* Prune now, for administrators: the worker's rule with another age. */
CREATE FUNCTION jobflow.prune(older_than interval)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	n bigint;
BEGIN
	IF prune.older_than IS NULL THEN
		RAISE EXCEPTION 'older_than must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Give an age, e.g. interval ''7 days''; interval ''0'' prunes every finished task.';
	END IF;
	IF prune.older_than < interval '0' THEN
		RAISE EXCEPTION 'older_than must not be negative'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	DELETE FROM jobflow.tasks t
	 WHERE t.state IN ('succeeded', 'failed', 'cancelled')
	   AND t.updated_at < pg_catalog.now() - prune.older_than;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

REVOKE ALL ON FUNCTION jobflow._task_log_cascade() FROM PUBLIC;
REVOKE ALL ON FUNCTION jobflow.prune(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.prune(interval) TO jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 10, item 4: metrics
 *
 * The worker keeps histograms and counters in shared memory (metrics.c):
 * jobflow.metrics() shows them in the Prometheus text format, the view
 * jobflow.stats as rows for psql.  jobflow_monitor may read them and
 * worker_status(), and nothing with task contents (no SELECT on any
 * table); members of pg_monitor have it.
 * ---------------------------------------------------------------------- */
CREATE FUNCTION jobflow.metrics()
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_metrics'
LANGUAGE C VOLATILE STRICT;

CREATE FUNCTION jobflow._stats(
	OUT metric text, OUT labels text, OUT value double precision, OUT description text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'jobflow_stats'
LANGUAGE C VOLATILE STRICT;

CREATE VIEW jobflow.stats AS
SELECT s.metric, s.labels, s.value, s.description FROM jobflow._stats() s;

DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'jobflow_monitor') THEN
		CREATE ROLE jobflow_monitor NOLOGIN;
	END IF;
END
$$;
GRANT jobflow_monitor TO pg_monitor;

REVOKE ALL ON FUNCTION jobflow.metrics(), jobflow._stats() FROM PUBLIC;
REVOKE ALL ON jobflow.stats FROM PUBLIC;
GRANT USAGE ON SCHEMA jobflow TO jobflow_monitor;
/* a view's functions run with the reader's privileges: _stats() too */
GRANT EXECUTE ON FUNCTION jobflow.metrics(), jobflow._stats(), jobflow.worker_status()
	TO jobflow_monitor, jobflow_admin;
GRANT SELECT ON jobflow.stats TO jobflow_monitor, jobflow_admin;

/* ----------------------------------------------------------------------
 * issue 10, item 3: queues as objects
 *
 * A task's queue (jobflow.tasks.queue) names a queue of its owner: queues
 * are namespaced per owner like tasks, so one tenant's pause or limit never
 * touches another's tasks.  A queue with no row here behaves as before.  A
 * row says whether the queue is paused, its own limits (requests in
 * flight, a smooth dispatch rate), its priority among due tasks when
 * capacity is short, and its retention.  Tenants read their own rows
 * (row-level security as on tasks); writes go through pause_queue(),
 * resume_queue(), set_queue() and drop_queue(), which check the caller
 * (itself, or any owner for jobflow_admin and superusers) and write as the
 * table's owner (queues_api.c).  The statement trigger tells the worker at
 * commit, through shared memory, to read the table again.
 * ---------------------------------------------------------------------- */
CREATE TABLE jobflow.queues (
	owner			regrole NOT NULL,
	name			text NOT NULL,
	paused			boolean NOT NULL DEFAULT false,
	max_concurrent	integer CHECK (max_concurrent BETWEEN 1 AND 1000000),
	max_per_second	double precision CHECK (max_per_second > 0 AND max_per_second <= 1000000),
	priority		integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
	retention		interval CHECK (retention >= interval '0'),
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at		timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (owner, name)
);
SELECT pg_catalog.pg_extension_config_dump('jobflow.queues', '');
REVOKE ALL ON jobflow.queues FROM PUBLIC;
ALTER TABLE jobflow.queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY queues_owner_select ON jobflow.queues FOR SELECT
	USING (pg_catalog.pg_has_role(owner::oid, 'USAGE')
		   OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));
GRANT SELECT ON jobflow.queues TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow._queues_notify()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobflow_queues_wake'
LANGUAGE C;

CREATE TRIGGER queues_notify
	AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON jobflow.queues
	FOR EACH STATEMENT EXECUTE FUNCTION jobflow._queues_notify();

/* Finished tasks of one queue by the time they finished: per-queue retention. */
CREATE INDEX tasks_finished_queue ON jobflow.tasks (owner, queue, updated_at)
	WHERE state IN ('succeeded', 'failed', 'cancelled');

CREATE FUNCTION jobflow.pause_queue(name text, owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_pause_queue'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.resume_queue(name text, owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_resume_queue'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.set_queue(name text,
	max_concurrent integer DEFAULT NULL,
	max_per_second double precision DEFAULT NULL,
	priority integer DEFAULT 0,
	retention interval DEFAULT NULL,
	owner regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_queue'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION jobflow.drop_queue(name text, owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_drop_queue'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION
	jobflow._queues_notify(),
	jobflow.pause_queue(text, regrole),
	jobflow.resume_queue(text, regrole),
	jobflow.set_queue(text, integer, double precision, integer, interval, regrole),
	jobflow.drop_queue(text, regrole)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	jobflow.pause_queue(text, regrole),
	jobflow.resume_queue(text, regrole),
	jobflow.set_queue(text, integer, double precision, integer, interval, regrole),
	jobflow.drop_queue(text, regrole)
	TO jobflow_user, jobflow_admin;

/*
 * issue 13 (\dx+ jobflow documents its objects): comments on the types,
 * tables, views and functions.  Functions are found by name, whatever their
 * argument lists.  Keep this section last, and add every new object to it.
 */
COMMENT ON TYPE jobflow.task_state IS 'pending -> running -> succeeded | failed; pending -> cancelled; failed | cancelled -> pending (retry)';
COMMENT ON TABLE jobflow.tasks IS 'one row per HTTP callback: the truth the worker fires from';
COMMENT ON TABLE jobflow.task_log IS 'one row per attempt of a task, with its outcome';
COMMENT ON TABLE jobflow.cron_timers IS 'recurring callbacks; each occurrence becomes a task';
COMMENT ON COLUMN jobflow.tasks.attempts_base IS 'attempts made before the last retry(): max_attempts - attempts_base is the task''s budget';
COMMENT ON COLUMN jobflow.tasks.run_at IS 'when the task is due (for a retry, when the next attempt is due)';
COMMENT ON COLUMN jobflow.tasks.attempts IS 'attempts made so far, counting the one running; never goes back';
COMMENT ON COLUMN jobflow.tasks.max_attempts IS 'the task fails for good once attempts reaches this; retry() raises it by the task''s budget';
COMMENT ON COLUMN jobflow.tasks.timeout_ms IS 'limit of one attempt, connection to last byte, in milliseconds';
COMMENT ON COLUMN jobflow.tasks.queue IS 'the owner''s queue the task belongs to: jobflow.queues may pause or limit it (failed_tasks, retry_failed group by it too)';
COMMENT ON COLUMN jobflow.tasks.owner IS 'the role that scheduled the task; row-level security and the fair share go by it';
COMMENT ON COLUMN jobflow.tasks.updated_at IS 'last change of the row: for a finished task, when it finished (retention counts from it)';
COMMENT ON COLUMN jobflow.tasks.last_status IS 'HTTP status of the last answer, if any';
COMMENT ON COLUMN jobflow.tasks.last_error IS 'why the last attempt did not succeed, or why the task was cancelled';
COMMENT ON COLUMN jobflow.tasks.cron_id IS 'the cron timer that made this task, if any';
COMMENT ON COLUMN jobflow.tasks.cron_at IS 'the occurrence of that timer this task stands for';
COMMENT ON COLUMN jobflow.task_log.attempt IS 'attempt number, as sent in X-Jobflow-Attempt';
COMMENT ON COLUMN jobflow.task_log.owner IS 'the task''s owner, copied so that row-level security needs no join';
COMMENT ON COLUMN jobflow.task_log.scheduled_at IS 'when the attempt was due';
COMMENT ON COLUMN jobflow.task_log.started_at IS 'when the request started (NULL if it never did)';
COMMENT ON COLUMN jobflow.task_log.outcome IS 'succeeded, retry, failed or interrupted';
COMMENT ON COLUMN jobflow.task_log.response IS 'the start of the response body, up to jobflow.max_response_size';
COMMENT ON COLUMN jobflow.cron_timers.schedule IS 'cron expression (5 fields, or 6 with seconds first) or every N seconds|minutes|hours|days';
COMMENT ON COLUMN jobflow.cron_timers.timezone IS 'time zone the schedule is read in';
COMMENT ON COLUMN jobflow.cron_timers.missed IS 'occurrences missed while the server was down: skip them, or fire once';
COMMENT ON COLUMN jobflow.cron_timers.next_at IS 'first occurrence not yet made into a task; NULL while inactive';
COMMENT ON COLUMN jobflow.failed_tasks.failed_at IS 'when the task failed for good';
COMMENT ON COLUMN jobflow.stats.metric IS 'name of the figure, as in jobflow.metrics() without the jobflow_ prefix';
COMMENT ON COLUMN jobflow.stats.labels IS 'Prometheus labels of the figure, if any';
COMMENT ON VIEW jobflow.cron IS 'cron timers with their last run, as their owner sees them';
COMMENT ON TABLE jobflow.installation IS 'this incarnation of the extension: the token in every webhook-id (the oldest row is in use)';
COMMENT ON TABLE jobflow.signing_secrets IS 'Standard Webhooks signing keys per role; readable by its owner only';
COMMENT ON VIEW jobflow.signing_keys IS 'the signing secrets a role has, without their values';
COMMENT ON TABLE jobflow.secrets IS 'named secrets that header values refer to ({"secret": "name"}); readable by its owner only';
COMMENT ON VIEW jobflow.secret_names IS 'the secrets a role has, without their values';
COMMENT ON VIEW jobflow.failed_tasks IS 'dead letters: failed tasks, as their owner sees them; retry() or retry_failed() runs them again';
COMMENT ON VIEW jobflow.stats IS 'the figures of jobflow.metrics() as rows: histograms as count, sum and p50/p99 bucket bounds';
COMMENT ON TABLE jobflow.queues IS 'configured queues of each owner: pause, limits, priority, retention; a queue without a row has none (change with set_queue, pause_queue, resume_queue, drop_queue)';
COMMENT ON COLUMN jobflow.queues.name IS 'the queue name tasks give in jobflow.tasks.queue, per owner';
COMMENT ON COLUMN jobflow.queues.paused IS 'true: its due tasks stay pending until resume_queue()';
COMMENT ON COLUMN jobflow.queues.max_concurrent IS 'most requests of the queue in flight at once; NULL: no limit of its own';
COMMENT ON COLUMN jobflow.queues.max_per_second IS 'most requests sent per second, spread evenly; NULL: no limit';
COMMENT ON COLUMN jobflow.queues.priority IS 'higher first among due tasks when a limit leaves fewer places than tasks';
COMMENT ON COLUMN jobflow.queues.retention IS 'how long finished tasks of the queue are kept; 0 keeps them; NULL: jobflow.retention';
COMMENT ON VIEW jobflow.task_import IS 'the task columns an application may set: COPY into it as an application role (COPY into jobflow.tasks is refused under row-level security)';
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
			('_current_role', 'internal: the role a task or timer belongs to'),
			('_delete_cron_timer', 'internal: deletes a timer the caller may change, for unschedule_cron'),
			('wakeups', 'wake-ups published at commit since the server started: id ranges and timer changes'),
			('_task_import', 'internal: inserts each row written to jobflow.task_import as a task'),
			('_cron_sync_occurrences', 'internal: a changed or deleted timer cancels its pending occurrences'),
			('create_signing_secret', 'new Standard Webhooks secret for a role, shown once; the previous ones sign beside it for the grace period'),
			('revoke_signing_secret', 'remove a role''s signing secrets (or only the previous ones)'),
			('_webhook_signature', 'internal: the v1 signature of a message, for checking against the specification'),
			('_json_content_type', 'internal: the content type of a JSON body, given a Content-Type header'),
			('set_secret', 'store or replace a secret that header values refer to as {"secret": "name"}'),
			('drop_secret', 'drop a secret no unfinished task or cron timer refers to'),
			('_replace_task', 'internal: writes the new request of a pending task, for schedule(on_duplicate => ''replace'')'),
			('retry', 'a failed or cancelled task goes back to pending with a fresh attempt budget, due at run_at; true if it did'),
			('_task_log_cascade', 'internal: deleting tasks deletes their log rows; truncating them truncates the log'),
			('prune', 'delete finished tasks (and their log rows) older than older_than now; returns how many tasks; for jobflow_admin'),
			('metrics', 'the worker''s histograms and counters in the Prometheus text exposition format'),
			('_stats', 'internal: the figures of metrics() as rows, for the view jobflow.stats'),
			('retry_failed', 'every failed task of a queue (or all), failed since a time (or ever), goes back to pending; returns how many'),
			('pause_queue', 'a queue of the caller (or, for jobflow_admin, of owner) stops firing; its tasks stay pending; true if it was not paused'),
			('resume_queue', 'a paused queue fires again, its overdue tasks first in due order; true if it was paused'),
			('set_queue', 'configure a queue: max_concurrent, max_per_second, priority, retention (each left out goes back to its default); a pause is kept'),
			('drop_queue', 'forget a queue''s configuration (it fires unpaused and unlimited again); true if it had one'),
			('_queues_notify', 'internal: tells the worker at commit that jobflow.queues changed')
		  ) AS c(name, text) ON p.proname = c.name
		 WHERE p.pronamespace = 'jobflow'::pg_catalog.regnamespace
	LOOP
		EXECUTE pg_catalog.format('COMMENT ON FUNCTION %s IS %L', f.sig, f.text);
	END LOOP;
END
$$;
