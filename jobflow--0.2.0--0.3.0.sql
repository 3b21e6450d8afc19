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

/*
 * jobflow's roles are cluster-wide and its schema may have been there
 * before CREATE EXTENSION (src/install_prelude.sql refuses that on a fresh
 * install); 0.1.0 and 0.2.0 took both as they found them.  A role made
 * beforehand by a CREATEROLE user or a database owner could keep what its
 * maker gave it: LOGIN or other attributes, ADMIN OPTION for its maker
 * (who could then grant itself jobflow_admin), members its maker granted.
 * Refuse, on a fresh install and on an update alike, a jobflow role with
 * an attribute, a non-superuser holding ADMIN OPTION on it, a member of
 * jobflow_admin granted by a non-superuser, or anything it owns in any
 * database (jobflow's roles own nothing: a SECURITY DEFINER function its
 * maker made it own would let the maker act as it); and a schema owned by
 * a non-superuser or granting anyone but jobflow's roles, or CREATE to
 * anyone.
 * The DBA decides what to keep; the hint says how.
 */
DO $trust$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT a.rolname,
			   a.rolsuper OR a.rolcreaterole OR a.rolcreatedb OR a.rolcanlogin
				   OR a.rolreplication OR a.rolbypassrls AS has_attributes,
			   (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
				  FROM pg_catalog.pg_auth_members am
				  JOIN pg_catalog.pg_roles m ON m.oid OPERATOR(pg_catalog.=) am.member
				 WHERE am.roleid OPERATOR(pg_catalog.=) a.oid AND am.admin_option
				   AND NOT m.rolsuper) AS admins,
			   (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(m.rolname), ', ' ORDER BY m.rolname)
				  FROM pg_catalog.pg_auth_members am
				  JOIN pg_catalog.pg_roles m ON m.oid OPERATOR(pg_catalog.=) am.member
				  JOIN pg_catalog.pg_roles g ON g.oid OPERATOR(pg_catalog.=) am.grantor
				 WHERE am.roleid OPERATOR(pg_catalog.=) a.oid
				   AND a.rolname OPERATOR(pg_catalog.=) 'jobflow_admin'::pg_catalog.name
				   AND NOT g.rolsuper) AS granted_by_others,
			   (SELECT pg_catalog.count(*) FROM pg_catalog.pg_shdepend d
				 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_authid'::pg_catalog.regclass
				   AND d.refobjid OPERATOR(pg_catalog.=) a.oid
				   AND d.deptype OPERATOR(pg_catalog.=) 'o'::"char") AS owned
		  FROM pg_catalog.pg_roles a
		 WHERE a.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[])
		 ORDER BY a.rolname
	LOOP
		IF r.has_attributes THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = pg_catalog.format('role "%s" has attributes jobflow''s roles never have', r.rolname),
				DETAIL = 'jobflow''s roles are NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS; this one was made or changed by someone else.',
				HINT = pg_catalog.format('Check who made it, then ALTER ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS, or drop it, and try again.', r.rolname);
		END IF;
		IF r.admins IS NOT NULL THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = pg_catalog.format('role "%s" can be granted by roles that are not superusers', r.rolname),
				DETAIL = pg_catalog.format('These roles hold ADMIN OPTION on it, and could grant it to anyone, themselves included: %s.', r.admins),
				HINT = pg_catalog.format('Revoke the role from them (REVOKE %I FROM %s), grant it again as a superuser where it belongs, and try again.', r.rolname, r.admins);
		END IF;
		IF r.owned OPERATOR(pg_catalog.>) 0 THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = pg_catalog.format('role "%s" owns objects', r.rolname),
				DETAIL = pg_catalog.format('It owns %s object(s) in this cluster''s databases; jobflow''s roles own nothing, and a function made to run as this role would let its maker act as it.', r.owned),
				HINT = pg_catalog.format('Look at what it owns (in each database: REASSIGN OWNED BY %I TO ..., or DROP OWNED BY %I), and try again.', r.rolname, r.rolname);
		END IF;
		IF r.granted_by_others IS NOT NULL THEN
			RAISE EXCEPTION USING
				ERRCODE = 'insufficient_privilege',
				MESSAGE = 'role "jobflow_admin" was granted by roles that are not superusers',
				DETAIL = pg_catalog.format('These roles were made members of jobflow_admin by a role that is not a superuser: %s.', r.granted_by_others),
				HINT = 'Revoke those memberships (REVOKE jobflow_admin FROM ...), grant again as a superuser what should stay, and try again.';
		END IF;
	END LOOP;

	/*
	 * Default privileges of the role running this script that grant to
	 * jobflow's roles were applied to what the scripts made (say ALL, WITH
	 * GRANT OPTION, to jobflow_user: every tenant could TRUNCATE the tasks).
	 */
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_default_acl d, pg_catalog.aclexplode(d.defaclacl) a
				WHERE d.defaclrole OPERATOR(pg_catalog.=) (SELECT u.oid FROM pg_catalog.pg_roles u
															WHERE u.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
				  AND (d.defaclnamespace OPERATOR(pg_catalog.=) 0::pg_catalog.oid
					   OR d.defaclnamespace OPERATOR(pg_catalog.=) (SELECT n.oid FROM pg_catalog.pg_namespace n
																	 WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name))
				  AND a.grantee OPERATOR(pg_catalog.=) ANY (ARRAY(
						SELECT x.oid FROM pg_catalog.pg_roles x
						 WHERE x.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[])))) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = pg_catalog.format('default privileges of role "%s" grant privileges to jobflow''s roles', CURRENT_USER),
			DETAIL = 'They would apply to the objects this script makes, beyond what jobflow grants its roles.',
			HINT = 'Revoke them (ALTER DEFAULT PRIVILEGES REVOKE ... FROM jobflow_user, ...; see \ddp in psql), and try again.';
	END IF;

	IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n
				 JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) n.nspowner
				WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name AND NOT o.rolsuper) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "jobflow" belongs to a role that is not a superuser',
			DETAIL = 'Its owner could drop and replace jobflow''s tables and functions.',
			HINT = 'Give it to a superuser (ALTER SCHEMA jobflow OWNER TO ...), and try again.';
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
				WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name
				  AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
				  AND (a.privilege_type OPERATOR(pg_catalog.<>) 'USAGE'
					   OR a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY(
							SELECT x.oid FROM pg_catalog.pg_roles x
							 WHERE x.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[]))))) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "jobflow" grants privileges jobflow does not',
			DETAIL = 'jobflow grants USAGE on its schema to jobflow_user, jobflow_admin and jobflow_monitor, and nothing else.',
			HINT = 'Revoke the others (REVOKE ... ON SCHEMA jobflow FROM ...), and try again.';
	END IF;
END
$trust$;

/* ---- end of section: the objects jobflow trusts ---- */


/* ---- section: search_path of functions that run with more privileges ---- */


/* ---- end of section: search_path ---- */


/* ---- section: who may own tasks ---- */

/*
 * From 0.3.0 a role every tenant holds cannot own anything of jobflow's
 * (jf_check_owner_role): jobflow_user, jobflow_monitor, jobflow_admin,
 * the predefined pg_* roles, and the roles one of jobflow's roles is a
 * member of.  What such a role owns from before stops here: its pending
 * tasks are cancelled (a tenant could have planted them for everyone to
 * see), its timers paused, its secrets, signing secrets and queue settings
 * deleted.  Running tasks finish.  A fresh install has nothing to stop.
 */
DO $owners$
DECLARE
	shared pg_catalog.oid[];
BEGIN
	SELECT pg_catalog.array_agg(r.oid) INTO shared
	  FROM pg_catalog.pg_roles r
	 WHERE r.rolname OPERATOR(pg_catalog.~~) 'pg\_%'
		OR pg_catalog.pg_has_role('jobflow_user'::pg_catalog.name, r.oid, 'MEMBER')
		OR pg_catalog.pg_has_role('jobflow_monitor'::pg_catalog.name, r.oid, 'MEMBER')
		OR pg_catalog.pg_has_role('jobflow_admin'::pg_catalog.name, r.oid, 'MEMBER');
	UPDATE jobflow.tasks t
	   SET state = 'cancelled',
		   last_error = 'cancelled: its owner is a role every tenant holds, which cannot own tasks since 0.3.0',
		   updated_at = pg_catalog.now()
	 WHERE t.state OPERATOR(pg_catalog.=) 'pending'
	   AND t.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (shared);
	UPDATE jobflow.cron_timers c SET active = false
	 WHERE c.active AND c.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (shared);
	DELETE FROM jobflow.secrets s
	 WHERE s.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (shared);
	DELETE FROM jobflow.signing_secrets s
	 WHERE s.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (shared);
	DELETE FROM jobflow.queues q
	 WHERE q.owner::pg_catalog.oid OPERATOR(pg_catalog.=) ANY (shared);
END
$owners$;

/* ---- end of section: who may own tasks ---- */


/* ---- section: secrets bound to origins ---- */

/*
 * A header secret is sent only to the origins given with its value
 * (secrets.c): pointing a task that uses it at a receiver of one's own, as
 * the owner or as jobflow_admin, no longer reads it back.  Origins are kept
 * as the worker keys them, "scheme://host:port" in lower case
 * (jobflow._origin).  A secret from 0.2.0 may go where the unfinished
 * tasks and timers of its role that use it go today, and nowhere else
 * until it is set again with its origins.
 */
CREATE FUNCTION jobflow._origin(url text)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_origin'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
REVOKE ALL ON FUNCTION jobflow._origin(text) FROM PUBLIC;

ALTER TABLE jobflow.secrets ADD COLUMN origins text[] NOT NULL DEFAULT '{}';
UPDATE jobflow.secrets s
   SET origins = COALESCE((
		SELECT pg_catalog.array_agg(DISTINCT u.origin ORDER BY u.origin)
		  FROM (SELECT jobflow._origin(t.url) AS origin
				  FROM jobflow.tasks t, pg_catalog.jsonb_each(t.headers) h
				 WHERE t.owner OPERATOR(pg_catalog.=) s.owner
				   AND t.state OPERATOR(pg_catalog.=) ANY ('{pending,running}')
				   AND h.value OPERATOR(pg_catalog.->>) 'secret' OPERATOR(pg_catalog.=) s.name
				UNION
				SELECT jobflow._origin(c.url)
				  FROM jobflow.cron_timers c, pg_catalog.jsonb_each(c.headers) h
				 WHERE c.owner OPERATOR(pg_catalog.=) s.owner
				   AND h.value OPERATOR(pg_catalog.->>) 'secret' OPERATOR(pg_catalog.=) s.name) u
		 WHERE u.origin IS NOT NULL), '{}');

DROP FUNCTION jobflow.set_secret(text, text, regrole);
CREATE FUNCTION jobflow.set_secret(name text, value text, origins text[] DEFAULT NULL,
								   for_role regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_secret_origins'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.set_secret(text, text, text[], regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.set_secret(text, text, text[], regrole)
	TO jobflow_user, jobflow_admin;

CREATE OR REPLACE VIEW jobflow.secret_names WITH (security_barrier) AS
SELECT s.owner, s.name, s.updated_at, s.origins
  FROM jobflow.secrets s
 WHERE pg_catalog.pg_has_role(s.owner::oid, 'USAGE')
	OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE');

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

/*
 * Outcome notifications go to a channel per role (outcome_channel.c):
 * "jobflow_outcome_" and 32 hex digits of an HMAC of the role's OID under
 * a random key only the extension's owner reads.  No other role can
 * listen to a role's outcomes or forge one on its channel; 0.2.0's
 * jobflow_outcome, open to every role, is no longer used.  The key is not
 * in dumps: a restore makes a new one (channels are asked for again).
 */
CREATE TABLE jobflow.outcome_key (
	key			bytea NOT NULL
);
INSERT INTO jobflow.outcome_key (key)
	VALUES (pg_catalog.decode(pg_catalog.replace(pg_catalog.gen_random_uuid()::text
												 OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::text,
												 '-', ''), 'hex'));
REVOKE ALL ON jobflow.outcome_key FROM PUBLIC;

CREATE FUNCTION jobflow.outcome_channel(for_role regrole DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_outcome_channel'
LANGUAGE C STABLE
SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION jobflow.listen_outcomes(for_role regrole DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_listen_outcomes'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION jobflow._outcome_channel(owner regrole)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_outcome_channel_of'
LANGUAGE C STABLE STRICT
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.outcome_channel(regrole), jobflow.listen_outcomes(regrole),
	jobflow._outcome_channel(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.outcome_channel(regrole), jobflow.listen_outcomes(regrole)
	TO jobflow_user, jobflow_admin;

/* ---- end of section: outcome notifications ---- */


/* ---- section: logical replication ---- */

/*
 * A database that receives jobflow's tables by logical replication holds
 * its worker (jobflow.dispatch = auto): worker_status() says why a worker
 * claims nothing.  And every table of jobflow can be published: UPDATE
 * and DELETE of a published table need a replica identity, and those
 * without a primary key (the log, the signing secrets, the one-row
 * tables) have the whole row as theirs, or a publication of the schema
 * (or FOR ALL TABLES, as change-data capture makes) would make pruning
 * and deleting tasks fail.  It costs nothing without wal_level = logical.
 */
DROP FUNCTION jobflow.worker_status();
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
	OUT statements bigint,
	OUT held text)
RETURNS record
AS 'MODULE_PATHNAME', 'jobflow_worker_status'
LANGUAGE C VOLATILE;
GRANT EXECUTE ON FUNCTION jobflow.worker_status() TO jobflow_user, jobflow_admin, jobflow_monitor;
COMMENT ON FUNCTION jobflow.worker_status() IS
	'what the background worker holds and has done, and why it claims nothing (held) if it does not';

ALTER TABLE jobflow.task_log REPLICA IDENTITY FULL;
ALTER TABLE jobflow.signing_secrets REPLICA IDENTITY FULL;
ALTER TABLE jobflow.installation REPLICA IDENTITY FULL;
ALTER TABLE jobflow.outcome_key REPLICA IDENTITY FULL;

/* ---- end of section: logical replication ---- */


/* ---- section: monitoring ---- */

/*
 * jobflow.stats shows each figure's labels as a JSON object too
 * (label_set), so that an exporter's queries can pick label values out
 * without parsing the Prometheus text form, and the histograms' buckets
 * as rows, as jobflow.metrics() has them.  The figures per queue (backlog,
 * its age, dead letters) are read through the partial index of pending
 * tasks and this one of failed tasks: a scrape costs in proportion to the
 * backlog and the dead letters, never to the finished tasks kept.  The
 * view gets its new column at the end from a new function (the one
 * behind it cannot change its columns): it keeps the grants a site gave
 * on it and the views a site made over it.
 */
CREATE FUNCTION jobflow._figures(
	OUT metric text, OUT labels text, OUT value double precision, OUT description text,
	OUT label_set jsonb)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'jobflow_stats'
LANGUAGE C VOLATILE STRICT;
REVOKE ALL ON FUNCTION jobflow._figures() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow._figures() TO jobflow_monitor, jobflow_admin;

CREATE OR REPLACE VIEW jobflow.stats AS
SELECT s.metric, s.labels, s.value, s.description, s.label_set FROM jobflow._figures() s;
DROP FUNCTION jobflow._stats();

CREATE INDEX tasks_failed_queue ON jobflow.tasks (owner, queue)
	WHERE state = 'failed';

/* ---- end of section: monitoring ---- */


/* ---- section: explain ---- */

/*
 * Issue 24, item 5: why is it late?  jobflow.explain(id) and
 * jobflow.explain_cron(name) say, one row per reason, the one that holds
 * it first, why a task (or the caller's timer) is where it is (explain.c).
 * They run as the caller: row-level security decides what it may see, and
 * a task it may not see is explained as one that does not exist.  The
 * index lets them count the running tasks of an owner and queue without
 * reading the table: there are few of them at any table size.  Its
 * "owner IS NOT NULL" is always true (owner is NOT NULL): it is there so
 * that only a statement that names an owner can use the index.  The
 * worker's outcome write (t.id = u.id AND t.state = 'running', a generic
 * plan) matched "state = 'running'" alone, and after an ANALYZE that saw
 * no running task its plan read the whole index at every flush: W2 ran at
 * a quarter of its speed (bench/indexes.sh).
 */
CREATE FUNCTION jobflow.explain(id bigint)
RETURNS TABLE (reason text, explanation text)
AS 'MODULE_PATHNAME', 'jobflow_explain'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
CREATE FUNCTION jobflow.explain_cron(name text)
RETURNS TABLE (reason text, explanation text)
AS 'MODULE_PATHNAME', 'jobflow_explain_cron'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.explain(bigint), jobflow.explain_cron(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.explain(bigint), jobflow.explain_cron(text)
	TO jobflow_user, jobflow_admin;

CREATE INDEX tasks_running ON jobflow.tasks (owner, queue)
	WHERE state = 'running' AND owner IS NOT NULL;

/* ---- end of section: explain ---- */


/* ---- section: quiet logging ---- */

/*
 * Issue 25, item 6.  A queue may log every attempt (all) or failures only
 * (failures: a success at a task's first attempt writes no jobflow.task_log
 * row, its row in jobflow.tasks says it succeeded); NULL follows the
 * setting jobflow.log_attempts.  set_queue() takes it as its last argument,
 * so that calls by position keep their meaning; left out, it goes back to
 * NULL like the other arguments.  The worker reads it with the queue's
 * other settings (worker/queues.c).  The arguments after it are the flow
 * control of the section "flow keys and ordered delivery" below.
 */
ALTER TABLE jobflow.queues ADD COLUMN log_attempts text
	CHECK (log_attempts IN ('all', 'failures'));

DROP FUNCTION jobflow.set_queue(text, integer, double precision, integer, interval, regrole);
CREATE FUNCTION jobflow.set_queue(name text,
	max_concurrent integer DEFAULT NULL,
	max_per_second double precision DEFAULT NULL,
	priority integer DEFAULT 0,
	retention interval DEFAULT NULL,
	owner regrole DEFAULT NULL,
	log_attempts text DEFAULT NULL,
	max_concurrent_per_key integer DEFAULT NULL,
	max_per_second_per_key double precision DEFAULT NULL,
	ordered boolean DEFAULT false,
	dead_letter text DEFAULT 'block')
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_queue'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION
	jobflow.set_queue(text, integer, double precision, integer, interval, regrole, text,
		integer, double precision, boolean, text)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	jobflow.set_queue(text, integer, double precision, integer, interval, regrole, text,
		integer, double precision, boolean, text)
	TO jobflow_user, jobflow_admin;

/* ---- end of section: quiet logging ---- */

/* ---- section: circuits per (owner, origin) ---- */

/*
 * Issue 25, item 5: endpoints that heal.  After jobflow.circuit_failures
 * consecutive failures (connection, timeout, TLS, DNS, 5xx) of one owner's
 * requests to one origin, the worker holds that owner's due tasks there
 * (pending, no attempt spent) but for one probe at growing intervals; a
 * success closes the circuit (core/circuit.h).  A circuit is per (owner,
 * origin): one tenant's failures never hold another tenant's tasks.  The
 * workers publish their circuits in shared memory; _endpoints() shows the
 * caller those of the roles whose privileges it has (members of
 * jobflow_admin: all), and reset_circuit() closes the caller's own (or,
 * for members of jobflow_admin, anyone's) at the workers' next turn.
 */
CREATE FUNCTION jobflow._endpoints(
	OUT owner regrole, OUT origin text, OUT state text, OUT since timestamptz,
	OUT failures integer, OUT held_tasks bigint, OUT next_probe timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'jobflow_endpoints'
LANGUAGE C VOLATILE STRICT
SET search_path = pg_catalog, pg_temp;
CREATE VIEW jobflow.endpoints AS
SELECT e.owner, e.origin, e.state, e.since, e.failures, e.held_tasks, e.next_probe
  FROM jobflow._endpoints() e;
CREATE FUNCTION jobflow.reset_circuit(origin text, owner regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_reset_circuit'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow._endpoints(), jobflow.reset_circuit(text, regrole) FROM PUBLIC;
REVOKE ALL ON jobflow.endpoints FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow._endpoints(), jobflow.reset_circuit(text, regrole)
	TO jobflow_user, jobflow_admin;
GRANT SELECT ON jobflow.endpoints TO jobflow_user, jobflow_admin;

/* ---- end of section: circuits ---- */

/* ---- section: cron overlap and conveniences ---- */

/*
 * Issue 25, items 3 and 4.  A timer's overlap policy says what happens to
 * an occurrence that falls due while an earlier occurrence of the same
 * timer is still pending or running (retries included): 'allow' fires it
 * anyway (0.2.0's behaviour, the default: a timer made before keeps doing
 * what it did), 'skip' cancels it and counts it, 'queue' holds it until
 * the earlier one finished (at most one waits: one falling due while
 * another waits is cancelled and counted).  The worker decides at claim
 * time (dispatch.c), and is the only writer of skipped and
 * last_skipped_at (tenants are granted neither column).
 * run_cron_now(name) makes one extra occurrence of the caller's timer,
 * now; cron_preview() lists the next occurrences of a schedule as the
 * worker will compute them, with the local wall time of each.
 */
ALTER TABLE jobflow.cron_timers
	ADD COLUMN overlap text NOT NULL DEFAULT 'allow'
		CHECK (overlap IN ('allow', 'skip', 'queue')),
	ADD COLUMN skipped bigint NOT NULL DEFAULT 0,
	ADD COLUMN last_skipped_at timestamptz;
GRANT INSERT (overlap), UPDATE (overlap) ON jobflow.cron_timers TO jobflow_user, jobflow_admin;

/*
 * The claim looks for an earlier unfinished occurrence of a cron task's
 * timer: through this index it reads the timer's few pending and running
 * tasks, not every occurrence kept since the timer began (the unique
 * index on (cron_id, cron_at) holds the finished ones too).
 */
CREATE INDEX tasks_cron_unfinished ON jobflow.tasks (cron_id, cron_at)
	WHERE cron_id IS NOT NULL AND state IN ('pending', 'running');

DROP FUNCTION jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer, integer,
									text, text, text, boolean, text);
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
	missed text DEFAULT 'skip',
	overlap text DEFAULT 'allow')
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
		 timeout_ms, max_attempts, queue, active, missed, overlap)
	VALUES
		(schedule_cron.name, schedule_cron.schedule, schedule_cron.timezone,
		 schedule_cron.url, schedule_cron.method, schedule_cron.headers,
		 COALESCE(schedule_cron.body::text, schedule_cron.body_text),
		 CASE WHEN schedule_cron.body IS NOT NULL
			  THEN jobflow._json_content_type(schedule_cron.content_type, schedule_cron.headers)
			  ELSE schedule_cron.content_type END,
		 schedule_cron.timeout_ms, schedule_cron.max_attempts,
		 schedule_cron.queue, schedule_cron.active, schedule_cron.missed,
		 schedule_cron.overlap)
	ON CONFLICT ON CONSTRAINT cron_timers_owner_name_key DO UPDATE
		SET schedule = excluded.schedule, timezone = excluded.timezone,
			url = excluded.url, method = excluded.method,
			headers = excluded.headers, body = excluded.body,
			content_type = excluded.content_type,
			timeout_ms = excluded.timeout_ms,
			max_attempts = excluded.max_attempts, queue = excluded.queue,
			active = excluded.active, missed = excluded.missed,
			overlap = excluded.overlap
	RETURNING c.id INTO timer_id;

	/* the row is locked until commit: the worker cannot add to these */
	UPDATE jobflow.tasks t SET state = 'cancelled'
	 WHERE t.cron_id = timer_id AND t.state = 'pending';
	RETURN timer_id;
END
$$;
REVOKE ALL ON FUNCTION jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer,
											 integer, text, text, text, boolean, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer,
												integer, text, text, text, boolean, text, text)
	TO jobflow_user, jobflow_admin;

/*
 * One extra occurrence of the caller's timer of that name, due now (its
 * cron_at is the moment of the call): checked as the caller under
 * row-level security, made as the owner of jobflow.tasks (cron.c).
 */
CREATE FUNCTION jobflow.run_cron_now(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobflow_run_cron_now'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;

/* The next n occurrences of a schedule after a time, as the worker computes them. */
CREATE FUNCTION jobflow.cron_preview(schedule text, timezone text DEFAULT 'UTC',
									 n integer DEFAULT 10,
									 after timestamptz DEFAULT pg_catalog.now())
RETURNS TABLE (run_at timestamptz, local_time text)
AS 'MODULE_PATHNAME', 'jobflow_cron_preview'
LANGUAGE C STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.run_cron_now(text), jobflow.cron_preview(text, text, integer, timestamptz)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.run_cron_now(text), jobflow.cron_preview(text, text, integer, timestamptz)
	TO jobflow_user, jobflow_admin;

/* the view shows the policy and the skipped occurrences (install_pg14.sql too) */
CREATE OR REPLACE VIEW jobflow.cron WITH (security_invoker = true) AS
SELECT c.id, c.name, c.owner, c.schedule, c.timezone, c.url, c.method,
	   c.active, c.missed,
	   CASE WHEN c.active THEN COALESCE(n.next_at, c.next_at) END AS next_at,
	   l.cron_at AS last_at,
	   l.id AS last_task_id,
	   l.state AS last_state,
	   l.last_status,
	   l.last_error,
	   c.created_at, c.updated_at,
	   c.overlap, c.skipped, c.last_skipped_at
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

/* ---- end of section: cron overlap and conveniences ---- */

/* ---- section: client certificates for mutual TLS ---- */

/*
 * A role stores named client certificates with their private keys, bound
 * to the https origins each may be presented to (client_certs.c); a queue
 * names the one its tasks present (set_queue_client_certificate).  Like
 * jobflow.secrets, the table has row-level security and no policy: only
 * its owner (the worker) and superusers read it, and it is not dumped, so
 * after a restore each role stores its certificates again (until then the
 * queue's tasks present none).  The view shows names and origins only.
 */
CREATE TABLE jobflow.client_certificates (
	owner		regrole NOT NULL,
	name		text NOT NULL,
	certificate text NOT NULL,
	private_key text NOT NULL,
	origins		text[] NOT NULL,
	updated_at	timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	PRIMARY KEY (owner, name)
);
REVOKE ALL ON jobflow.client_certificates FROM PUBLIC;

CREATE VIEW jobflow.client_certificate_names WITH (security_barrier) AS
SELECT c.owner, c.name, c.origins, c.updated_at
  FROM jobflow.client_certificates c
 WHERE pg_catalog.pg_has_role(c.owner::oid, 'USAGE')
	OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE');
REVOKE ALL ON jobflow.client_certificate_names FROM PUBLIC;
GRANT SELECT ON jobflow.client_certificate_names TO jobflow_user, jobflow_admin;

ALTER TABLE jobflow.queues ADD COLUMN client_certificate text;

CREATE FUNCTION jobflow.set_client_certificate(name text, certificate text, private_key text,
											   origins text[] DEFAULT NULL,
											   for_role regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_client_certificate'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.set_client_certificate(text, text, text, text[], regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.set_client_certificate(text, text, text, text[], regrole)
	TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow.drop_client_certificate(name text, for_role regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobflow_drop_client_certificate'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.drop_client_certificate(text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.drop_client_certificate(text, regrole)
	TO jobflow_user, jobflow_admin;

CREATE FUNCTION jobflow.set_queue_client_certificate(name text, certificate text,
													 owner regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobflow_set_queue_client_certificate'
LANGUAGE C VOLATILE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow.set_queue_client_certificate(text, text, regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.set_queue_client_certificate(text, text, regrole)
	TO jobflow_user, jobflow_admin;

/* ---- end of section: client certificates for mutual TLS ---- */


/* ---- section: flow keys and ordered delivery ---- */

/*
 * Issue 25, items 1 and 2.  A task may carry a flow key (any text, per
 * owner and named queue: the same text of two owners, or of two queues, is
 * two keys).  A queue may limit each key: max_concurrent_per_key requests
 * in flight, max_per_second_per_key (smooth, like the queue's rate), and
 * ordered delivery: the tasks of one key one at a time, in run_at order
 * then id, the next one waiting until the previous finished, retries
 * included.  The order is flow_at, the run_at a task was scheduled (or
 * rescheduled, or replaced) for, which the row trigger keeps: a retry
 * moves run_at later but not flow_at, so the task keeps its place.
 * dead_letter says what a task that failed for good does to its key:
 * 'block' (the default: its later tasks wait until it is redriven or
 * cancelled, so that no task ever overtakes an earlier one unseen) or
 * 'skip' (they go on).  The worker holds keys in its fair share
 * (core/fair.c) and the claim checks the order again in SQL (dispatch.c),
 * through the partial index below, which holds the unfinished and failed
 * tasks of keys only.  With several workers per database, keyed tasks go
 * to the worker of their key's hash (worker/state.h), so that each key's
 * limits are held by one worker.
 */
ALTER TABLE jobflow.tasks
	ADD COLUMN flow_key text,
	ADD COLUMN flow_at timestamptz;
ALTER TABLE jobflow.tasks ADD CONSTRAINT tasks_flow_key_length
	CHECK (flow_key IS NULL OR pg_catalog.octet_length(flow_key) BETWEEN 1 AND 512);
GRANT INSERT (flow_key) ON jobflow.tasks TO jobflow_user, jobflow_admin;
CREATE INDEX tasks_flow_unfinished ON jobflow.tasks (owner, queue, flow_key, flow_at, id)
	WHERE flow_key IS NOT NULL AND state IN ('pending', 'running', 'failed');

ALTER TABLE jobflow.queues
	ADD COLUMN max_concurrent_per_key integer
		CHECK (max_concurrent_per_key >= 1),
	ADD COLUMN max_per_second_per_key double precision
		CHECK (max_per_second_per_key > 0),
	ADD COLUMN ordered boolean NOT NULL DEFAULT false,
	ADD COLUMN dead_letter text NOT NULL DEFAULT 'block'
		CHECK (dead_letter IN ('block', 'skip')),
	ADD CONSTRAINT queues_ordered_one_per_key
		CHECK (NOT ordered OR max_concurrent_per_key IS NULL OR max_concurrent_per_key = 1);

DROP FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer,
							   integer, text, text, text, text, text, bytea, boolean);
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
	notify boolean DEFAULT false,
	flow_key text DEFAULT NULL)
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
			 timeout_ms, max_attempts, queue, key, notify, flow_key)
		VALUES
			(schedule.url, schedule.run_at, new_body, schedule.body_bytes, new_content_type,
			 schedule.headers, schedule.method, schedule.timeout_ms,
			 schedule.max_attempts, schedule.queue, schedule.key,
			 COALESCE(schedule.notify, false), schedule.flow_key)
		RETURNING t.id INTO task_id;
		RETURN task_id;
	END IF;
	/*
	 * ON CONFLICT DO NOTHING waits for a racing transaction that inserted
	 * the same key: if it commits, this insert does nothing and the loop
	 * finds its task; if it rolls back, this insert goes ahead.  A task
	 * that finishes in between frees the key, and the loop inserts again.
	 * A replaced task keeps its flow key.
	 */
	LOOP
		INSERT INTO jobflow.tasks AS t
			(url, run_at, body, body_bytes, content_type, headers, method,
			 timeout_ms, max_attempts, queue, key, notify, flow_key)
		VALUES
			(schedule.url, schedule.run_at, new_body, schedule.body_bytes, new_content_type,
			 schedule.headers, schedule.method, schedule.timeout_ms,
			 schedule.max_attempts, schedule.queue, schedule.key,
			 COALESCE(schedule.notify, false), schedule.flow_key)
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
										integer, text, text, text, text, text, bytea, boolean,
										text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer,
										   integer, text, text, text, text, text, bytea, boolean,
										   text)
	TO jobflow_user, jobflow_admin;

/* ---- end of section: flow keys and ordered delivery ---- */

/* ---- section: importing pg_cron's HTTP jobs ---- */

/*
 * Issue 26, item 2.  jobflow.import_pg_cron() turns pg_cron jobs whose
 * command is one net.http_get/http_post/http_delete call (the shape
 * Supabase's dashboard writes) into jobflow cron timers, and reports
 * every other job with the reason it stays.  _pg_net_call() reads the
 * command with PostgreSQL's parser and never runs it (pg_net_call.c).
 * Only a superuser imports: it reads every role's jobs and makes timers
 * in their names.  Each timer is made as the job's role (SET ROLE for the
 * call), through schedule_cron(), so it gets exactly what that role could
 * make itself: its grants, quotas, deny list and secrets.  cron.job is
 * found as the table of extension pg_cron, never by name through a
 * search_path, and no command text is ever executed.
 */
CREATE FUNCTION jobflow._pg_net_call(command text)
RETURNS text
AS 'MODULE_PATHNAME', 'jobflow_pg_net_call'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION jobflow._pg_net_call(text) FROM PUBLIC;

CREATE FUNCTION jobflow.import_pg_cron(dry_run boolean DEFAULT true)
RETURNS TABLE (jobid bigint, jobname text, username text, action text, timer text, reason text)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	ext pg_catalog.oid;
	job_table pg_catalog.regclass;
	tz text := COALESCE(NULLIF(pg_catalog.current_setting('cron.timezone', true), ''), 'GMT');
	j record;
	call text;
	req jsonb;
	role pg_catalog.regrole;
	t record;
	s jsonb;
	origin text;
	body jsonb;
	why text;
	was text;
BEGIN
	IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r
			 WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
		RAISE EXCEPTION 'permission denied to import pg_cron jobs'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'The importer reads every role''s pg_cron jobs and makes timers in their names.',
				  HINT = 'Run jobflow.import_pg_cron() as a superuser.';
	END IF;
	SELECT e.oid INTO ext FROM pg_catalog.pg_extension e
	 WHERE e.extname OPERATOR(pg_catalog.=) 'pg_cron';
	IF ext IS NOT NULL THEN
		SELECT c.oid INTO job_table
		  FROM pg_catalog.pg_depend d
		  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
		 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
		   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND d.refobjid OPERATOR(pg_catalog.=) ext
		   AND d.deptype OPERATOR(pg_catalog.=) 'e'
		   AND c.relkind OPERATOR(pg_catalog.=) 'r'
		   AND c.relname OPERATOR(pg_catalog.=) 'job';
	END IF;
	IF job_table IS NULL THEN
		RAISE EXCEPTION 'extension "pg_cron" is not installed in this database'
			USING ERRCODE = 'undefined_object',
				  HINT = 'Run jobflow.import_pg_cron() in the database that cron.database_name names, where pg_cron keeps its jobs.';
	END IF;

	FOR j IN EXECUTE pg_catalog.format(
		'SELECT c.jobid::bigint AS jobid, c.jobname::text AS jobname, c.schedule::text AS schedule,'
		' c.command::text AS command, c.database::text AS database,'
		' c.username::text AS username, c.active AS active'
		' FROM %s c ORDER BY c.jobid', job_table)
	LOOP
		jobid := j.jobid;
		jobname := j.jobname;
		username := j.username;
		timer := 'pg_cron:' OPERATOR(pg_catalog.||) COALESCE(j.jobname, j.jobid::text);
		action := 'left alone';
		reason := NULL;
		req := NULL;
		role := pg_catalog.to_regrole(pg_catalog.quote_ident(j.username));

		/* what the command is: read, never run */
		BEGIN
			call := jobflow._pg_net_call(j.command);
		EXCEPTION WHEN OTHERS THEN
			call := pg_catalog.jsonb_build_object('reason',
				'not a single net.http_* call: ' OPERATOR(pg_catalog.||) SQLERRM)::text;
		END;
		BEGIN
			req := call::jsonb;
		EXCEPTION WHEN OTHERS THEN
			reason := 'an argument is not valid JSON: ' OPERATOR(pg_catalog.||) SQLERRM;
		END;
		IF reason IS NULL THEN
			reason := req OPERATOR(pg_catalog.->>) 'reason';
		END IF;
		IF reason IS NULL AND j.database OPERATOR(pg_catalog.<>) pg_catalog.current_database() THEN
			reason := pg_catalog.format('runs in database %s: import it there', j.database);
		END IF;
		IF reason IS NULL AND (req OPERATOR(pg_catalog.->) 'params') OPERATOR(pg_catalog.<>) '{}'::jsonb THEN
			reason := 'argument params is not empty: put the query into the url';
		END IF;
		IF reason IS NULL AND j.schedule OPERATOR(pg_catalog.~*) 'second' THEN
			reason := pg_catalog.format('schedule %L runs more often than once a minute: jobflow''s cron has minutes', j.schedule);
		END IF;
		IF reason IS NULL AND pg_catalog.strpos(j.schedule, '$') OPERATOR(pg_catalog.>) 0 THEN
			reason := pg_catalog.format('schedule %L uses $ (the last day of the month), which jobflow''s cron has not', j.schedule);
		END IF;
		IF reason IS NULL THEN
			BEGIN
				PERFORM jobflow.cron_preview(j.schedule, tz, 1);
			EXCEPTION WHEN OTHERS THEN
				reason := pg_catalog.format('schedule %L: %s', j.schedule, SQLERRM);
			END;
		END IF;
		IF reason IS NULL AND role IS NULL THEN
			reason := pg_catalog.format('role %I does not exist', j.username);
		END IF;
		IF reason IS NULL AND NOT pg_catalog.pg_has_role(role, 'jobflow_user', 'MEMBER')
		   AND NOT pg_catalog.pg_has_role(role, 'jobflow_admin', 'MEMBER') THEN
			reason := pg_catalog.format('role %s may not use jobflow: GRANT jobflow_user TO %s, then import again', role, role);
		END IF;
		/* each Vault lookup needs a jobflow secret of the role, bound to the url's origin */
		IF reason IS NULL THEN
			origin := jobflow._origin(req OPERATOR(pg_catalog.->>) 'url');
			FOR s IN SELECT x.value FROM pg_catalog.jsonb_array_elements(req OPERATOR(pg_catalog.->) 'secrets') x
			LOOP
				IF NOT EXISTS (SELECT FROM jobflow.secrets k
								WHERE k.owner OPERATOR(pg_catalog.=) role
								  AND k.name OPERATOR(pg_catalog.=) (s OPERATOR(pg_catalog.->>) 'secret')
								  AND origin OPERATOR(pg_catalog.=) ANY (k.origins)) THEN
					reason := pg_catalog.format(
						'header %s reads Vault''s secret %L: store %s for role %s first, as jobflow.set_secret(%L, <value>, origins => ARRAY[%L], for_role => %L), then import again',
						s OPERATOR(pg_catalog.->>) 'header', s OPERATOR(pg_catalog.->>) 'vault',
						CASE WHEN s OPERATOR(pg_catalog.->>) 'prefix' OPERATOR(pg_catalog.=) '' THEN 'its value'
							 ELSE pg_catalog.format('%L followed by its value', s OPERATOR(pg_catalog.->>) 'prefix') END,
						role, s OPERATOR(pg_catalog.->>) 'secret', origin, role::text);
					EXIT;
				END IF;
			END LOOP;
		END IF;
		IF reason IS NOT NULL THEN
			timer := NULL;
			RETURN NEXT;
			CONTINUE;
		END IF;

		body := NULLIF(req OPERATOR(pg_catalog.->) 'body', 'null'::jsonb);
		SELECT c.* INTO t FROM jobflow.cron_timers c
		 WHERE c.owner OPERATOR(pg_catalog.=) role AND c.name OPERATOR(pg_catalog.=) timer;
		IF FOUND THEN
			IF t.schedule OPERATOR(pg_catalog.=) j.schedule AND t.timezone OPERATOR(pg_catalog.=) tz
			   AND t.url OPERATOR(pg_catalog.=) (req OPERATOR(pg_catalog.->>) 'url')
			   AND t.method OPERATOR(pg_catalog.=) (req OPERATOR(pg_catalog.->>) 'method')
			   AND t.headers OPERATOR(pg_catalog.=) (req OPERATOR(pg_catalog.->) 'headers')
			   AND t.body::jsonb IS NOT DISTINCT FROM body
			   AND t.timeout_ms OPERATOR(pg_catalog.=) (req OPERATOR(pg_catalog.->>) 'timeout_ms')::integer THEN
				IF j.active AND NOT dry_run THEN
					EXECUTE pg_catalog.format('UPDATE %s c SET active = false WHERE c.jobid OPERATOR(pg_catalog.=) $1', job_table)
						USING j.jobid;
					action := 'migrated';
					reason := 'the timer existed with the same definition; the pg_cron job is now inactive';
				ELSE
					action := 'unchanged';
					reason := CASE WHEN j.active THEN 'the timer exists with the same definition; the pg_cron job is still active'
								   ELSE 'already imported: the timer exists with the same definition' END;
				END IF;
			ELSE
				timer := NULL;
				reason := pg_catalog.format('timer %L of role %s exists with another definition', t.name, role);
			END IF;
			RETURN NEXT;
			CONTINUE;
		END IF;
		IF NOT j.active THEN
			timer := NULL;
			reason := 'inactive in pg_cron';
			RETURN NEXT;
			CONTINUE;
		END IF;
		/*
		 * As the job's role, with its grants only; its errors leave the job
		 * alone.  A dry run makes the timer too, to hear jobflow's checks,
		 * and rolls it back.
		 */
		BEGIN
			was := pg_catalog.current_setting('role');
			PERFORM pg_catalog.set_config('role', j.username, true);
			PERFORM jobflow.schedule_cron(
				name => timer, schedule => j.schedule, timezone => tz,
				url => req OPERATOR(pg_catalog.->>) 'url',
				method => req OPERATOR(pg_catalog.->>) 'method',
				headers => req OPERATOR(pg_catalog.->) 'headers',
				body => body,
				timeout_ms => (req OPERATOR(pg_catalog.->>) 'timeout_ms')::integer,
				max_attempts => 1);
			PERFORM pg_catalog.set_config('role', was, true);
			IF dry_run THEN
				RAISE EXCEPTION USING ERRCODE = 'JFDRY';
			END IF;
			EXECUTE pg_catalog.format('UPDATE %s c SET active = false WHERE c.jobid OPERATOR(pg_catalog.=) $1', job_table)
				USING j.jobid;
			action := 'migrated';
		EXCEPTION WHEN SQLSTATE 'JFDRY' THEN
			action := 'would migrate';
		WHEN OTHERS THEN
			GET STACKED DIAGNOSTICS why = MESSAGE_TEXT;
			timer := NULL;
			reason := 'jobflow refused the timer: ' OPERATOR(pg_catalog.||) why;
		END;
		RETURN NEXT;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION jobflow.import_pg_cron(boolean) FROM PUBLIC;

/* ---- end of section: importing pg_cron's HTTP jobs ---- */

/* ---- section: privileges exactly as jobflow grants them ---- */

/*
 * ALTER DEFAULT PRIVILEGES of the role that installs or updates (GRANT
 * SELECT ON TABLES TO reporting, say) applies to what the scripts make,
 * and pg_read_all_data reads every table: the secrets would be readable.
 * The tables of secrets get row-level security with no policy: their
 * owner (who does not force it) and superusers read them, nobody else,
 * whatever their grants.  And every privilege on the schema or on an
 * object in it that is held by a role other than the owner and jobflow's
 * roles is revoked, PUBLIC's included.  Each later update ends the same
 * way.
 */
ALTER TABLE jobflow.secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobflow.signing_secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobflow.client_certificates ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobflow.outcome_key ENABLE ROW LEVEL SECURITY;
DO $grants$
DECLARE
	o record;
	ours pg_catalog.oid[] := ARRAY(SELECT r.oid FROM pg_catalog.pg_roles r
									WHERE r.rolname OPERATOR(pg_catalog.=)
										  ANY ('{jobflow_user,jobflow_admin,jobflow_monitor}'::pg_catalog.name[]));
BEGIN
	FOR o IN
		SELECT DISTINCT x.kind, x.name, a.grantee
		  FROM (SELECT CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,
					   pg_catalog.format('jobflow.%I', c.relname) AS name, c.relacl AS acl, c.relowner AS owner
				  FROM pg_catalog.pg_class c
				 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.regnamespace
				   AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,v,S,m,p,f}'::"char"[])
				UNION ALL
				SELECT 'FUNCTION', pg_catalog.format('jobflow.%I(%s)', p.proname,
													   pg_catalog.pg_get_function_identity_arguments(p.oid)),
					   COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner)), p.proowner
				  FROM pg_catalog.pg_proc p
				 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.regnamespace
				UNION ALL
				SELECT 'SCHEMA', 'jobflow', n.nspacl, n.nspowner
				  FROM pg_catalog.pg_namespace n
				 WHERE n.nspname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name) x,
			   pg_catalog.aclexplode(x.acl) a
		 WHERE a.grantee OPERATOR(pg_catalog.<>) x.owner
		   AND a.grantee OPERATOR(pg_catalog.<>) ALL (ours)
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s', o.kind, o.name,
								  CASE WHEN o.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
									   ELSE pg_catalog.quote_ident(o.grantee::pg_catalog.regrole::pg_catalog.text) END);
	END LOOP;
	/*
	 * jobflow's roles keep what jobflow grants them, never with GRANT
	 * OPTION (a tenant could hand it on) and never TRUNCATE, TRIGGER or
	 * REFERENCES (or MAINTAIN) on a table: jobflow grants none of those.
	 */
	FOR o IN
		SELECT DISTINCT pg_catalog.format('jobflow.%I', c.relname) AS name, a.grantee,
			   a.privilege_type, a.is_grantable
		  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.regnamespace
		   AND a.grantee OPERATOR(pg_catalog.=) ANY (ours)
		   AND (a.is_grantable
				OR a.privilege_type OPERATOR(pg_catalog.=) ANY ('{TRUNCATE,TRIGGER,REFERENCES,MAINTAIN}'::pg_catalog.text[]))
	LOOP
		EXECUTE pg_catalog.format(CASE WHEN o.privilege_type OPERATOR(pg_catalog.=) ANY ('{TRUNCATE,TRIGGER,REFERENCES,MAINTAIN}'::pg_catalog.text[])
									   THEN 'REVOKE %s ON %s FROM %s'
									   ELSE 'REVOKE GRANT OPTION FOR %s ON %s FROM %s' END,
								  o.privilege_type, o.name,
								  pg_catalog.quote_ident(o.grantee::pg_catalog.regrole::pg_catalog.text));
	END LOOP;
END
$grants$;

/* ---- end of section: privileges ---- */


/* ---- section: comments of the objects 0.3.0 adds ---- */

COMMENT ON FUNCTION jobflow.outcome_channel(regrole) IS
	'the channel to LISTEN on for the outcomes of a role''s tasks scheduled with notify => true (the caller''s by default)';
COMMENT ON FUNCTION jobflow.listen_outcomes(regrole) IS
	'LISTEN on the channel of a role''s outcomes (the caller''s by default) without naming it in a statement; returns its name';
COMMENT ON FUNCTION jobflow._outcome_channel(regrole) IS
	'internal: the outcome channel of a role, for the worker';
COMMENT ON TABLE jobflow.outcome_key IS
	'internal: the key of the outcome channels; only the extension''s owner reads it';
COMMENT ON FUNCTION jobflow.set_secret(text, text, text[], regrole) IS
	'store or replace a secret that header values refer to as {"secret": "name"}, with the origins it may be sent to';
COMMENT ON FUNCTION jobflow._origin(text) IS
	'internal: the origin of a URL as the worker keys it (scheme://host:port, lower case)';

COMMENT ON VIEW jobflow.stats IS
	'the figures of jobflow.metrics() as rows (histograms as buckets, count, sum and p50/p99 bucket bounds)';
COMMENT ON COLUMN jobflow.stats.metric IS 'name of the figure, as in jobflow.metrics() without the jobflow_ prefix';
COMMENT ON COLUMN jobflow.stats.labels IS 'Prometheus labels of the figure, if any';
COMMENT ON COLUMN jobflow.stats.label_set IS 'the same labels as a JSON object ({} when none)';
COMMENT ON FUNCTION jobflow._figures() IS 'internal: the figures of metrics() as rows, for the view jobflow.stats';

COMMENT ON FUNCTION jobflow.explain(bigint) IS
	'why a task is where it is: one row per reason (a code and a sentence with the figures), the one that holds it first';
COMMENT ON FUNCTION jobflow.explain_cron(text) IS
	'why the caller''s cron timer of that name fires when it does: paused, held, its next occurrence, its last one''s outcome';

COMMENT ON FUNCTION jobflow.set_queue(text, integer, double precision, integer, interval, regrole, text,
		integer, double precision, boolean, text) IS
	'configure a queue: max_concurrent, max_per_second, priority, retention, log_attempts, limits per flow key, ordered delivery and its dead_letter policy (each left out goes back to its default); a pause is kept';
COMMENT ON TABLE jobflow.queues IS 'configured queues of each owner: pause, limits, priority, retention, which attempts are logged; a queue without a row has none (change with set_queue, pause_queue, resume_queue, drop_queue)';
COMMENT ON COLUMN jobflow.queues.log_attempts IS
	'all: every attempt goes to jobflow.task_log; failures: a success at a task''s first attempt writes no log row; NULL: jobflow.log_attempts';

COMMENT ON VIEW jobflow.endpoints IS
	'the circuits per (owner, origin) of the roles whose privileges the caller has: closed ones counting failures, open ones holding tasks';
COMMENT ON COLUMN jobflow.endpoints.state IS 'closed (counting failures), open (tasks held), half_open (a probe in flight)';
COMMENT ON COLUMN jobflow.endpoints.since IS 'when the circuit entered its state (closed: its first failure counted)';
COMMENT ON COLUMN jobflow.endpoints.failures IS 'consecutive failures counted';
COMMENT ON COLUMN jobflow.endpoints.held_tasks IS 'due tasks of the owner to the origin the open circuit holds';
COMMENT ON COLUMN jobflow.endpoints.next_probe IS 'open: when the next probe may go (a due task of the owner to the origin)';
COMMENT ON FUNCTION jobflow._endpoints() IS 'internal: the circuits the workers publish, filtered for the caller, for the view jobflow.endpoints';
COMMENT ON FUNCTION jobflow.reset_circuit(text, regrole) IS
	'close the circuits of an origin: the caller''s own (or owner''s); for members of jobflow_admin with no owner, every owner''s';

COMMENT ON FUNCTION jobflow.schedule_cron(text, text, text, jsonb, jsonb, text, text, integer, integer, text, text, text, boolean, text, text) IS
	'create or replace a recurring callback by name';
COMMENT ON FUNCTION jobflow.run_cron_now(text) IS
	'one extra occurrence of the caller''s cron timer of that name, now, under its overlap policy; returns the task id';
COMMENT ON FUNCTION jobflow.cron_preview(text, text, integer, timestamptz) IS
	'the next n (1 to 1000) occurrences of a cron schedule in a time zone after a time (now), with the local wall time of each, as the worker computes them';
COMMENT ON COLUMN jobflow.cron_timers.overlap IS
	'an occurrence due while an earlier one is still pending or running: allow (fire it), skip (cancel and count it) or queue (wait for it; one waits at most)';
COMMENT ON COLUMN jobflow.cron_timers.skipped IS 'occurrences skipped by the overlap policy, counted by the worker';
COMMENT ON COLUMN jobflow.cron_timers.last_skipped_at IS 'when the worker last skipped an occurrence by the overlap policy';
COMMENT ON COLUMN jobflow.cron.overlap IS 'the timer''s overlap policy: allow, skip or queue';
COMMENT ON COLUMN jobflow.cron.skipped IS 'occurrences skipped by the overlap policy';

COMMENT ON TABLE jobflow.client_certificates IS
	'client certificates and their private keys for mutual TLS, with the origins each may be presented to; readable by its owner only';
COMMENT ON VIEW jobflow.client_certificate_names IS
	'the client certificates a role has, with their origins, without certificate or key';
COMMENT ON COLUMN jobflow.queues.client_certificate IS
	'the client certificate (of the queue''s owner) its tasks present for mutual TLS, to the origins it is bound to; NULL: none';
COMMENT ON FUNCTION jobflow.set_client_certificate(text, text, text, text[], regrole) IS
	'store or replace a client certificate and its private key (PEM) for mutual TLS, with the https origins it may be presented to';
COMMENT ON FUNCTION jobflow.drop_client_certificate(text, regrole) IS
	'remove a client certificate; refused while a queue presents it';
COMMENT ON FUNCTION jobflow.set_queue_client_certificate(text, text, regrole) IS
	'the client certificate a queue''s tasks present for mutual TLS (NULL: none)';

COMMENT ON FUNCTION jobflow.schedule(text, timestamptz, jsonb, jsonb, text, integer, integer,
		text, text, text, text, text, bytea, boolean, text) IS
	'schedule an HTTP callback at run_at; returns the task id (flow_key: the key of its queue whose limits and order it follows)';
COMMENT ON COLUMN jobflow.tasks.flow_key IS
	'the flow key of the task (per owner and queue): the queue''s per-key limits and ordered delivery go by it; NULL: none';
COMMENT ON COLUMN jobflow.tasks.flow_at IS
	'a keyed task''s place in its key''s order: the run_at it was scheduled or rescheduled for (a retry does not move it)';
COMMENT ON COLUMN jobflow.queues.max_concurrent_per_key IS
	'requests of one flow key in flight at most; NULL: no limit per key';
COMMENT ON COLUMN jobflow.queues.max_per_second_per_key IS
	'requests of one flow key per second at most, smooth; NULL: no limit per key';
COMMENT ON COLUMN jobflow.queues.ordered IS
	'tasks of one flow key go one at a time in the order of flow_at, then id, the next after the previous finished (retries included)';
COMMENT ON COLUMN jobflow.queues.dead_letter IS
	'in an ordered queue, what a task that failed for good does to its key: block (its later tasks wait until it is redriven or cancelled) or skip';

COMMENT ON FUNCTION jobflow.import_pg_cron(boolean) IS
	'superuser: turn pg_cron jobs that are one net.http_get/post/delete call into jobflow cron timers of their roles, one row per job saying what it became or why it stays; dry_run => false also makes them and deactivates the jobs';
COMMENT ON FUNCTION jobflow._pg_net_call(text) IS
	'internal: the net.http_* call a command is (method, url, params, headers, body, timeout_ms, secrets) as JSON text, or why it is not one; parses, never runs';

/* ---- end of section: comments ---- */

/* the worker waits for this update: wake it */
SELECT pg_catalog.pg_notify('jobflow', '');
