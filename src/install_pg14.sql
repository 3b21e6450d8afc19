/*
 * src/install_pg14.sql: the end of a fresh install on PostgreSQL 14.
 *
 * PostgreSQL 14 has no security_invoker views, and a view reads its
 * tables with its owner's rights: here the installing superuser's, whom
 * row-level security does not restrict.  So on 14 the Makefile drops that
 * option from jobflow.cron and jobflow.failed_tasks (jobflow--0.1.0.sql
 * and jobflow--0.1.0--0.2.0.sql, whose files never change), and this file
 * makes them again as security_barrier views that filter every table they
 * read as the tables' policies do for the caller: an application role sees
 * its own rows and those of the roles it has, jobflow_admin sees every
 * row, as on 15 and later.  pg_has_role() is the caller's: a view does not
 * change the current user.  There is no earlier jobflow on 14 to update
 * from (0.1.0 and 0.2.0 need 15): a change to either view in a later
 * version is made here too.
 */
CREATE OR REPLACE VIEW jobflow.cron WITH (security_barrier = true) AS
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
	   AND t.state = 'pending' AND t.attempts = 0
	   AND (pg_catalog.pg_has_role(t.owner::oid, 'USAGE')
			OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'))) n ON true
  LEFT JOIN LATERAL (
	SELECT t.cron_at, t.id, t.state, t.last_status, t.last_error
	  FROM jobflow.tasks t
	 WHERE t.cron_id = c.id AND t.state <> 'cancelled' AND t.attempts > 0
	   AND (pg_catalog.pg_has_role(t.owner::oid, 'USAGE')
			OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'))
	 ORDER BY t.cron_at DESC
	 LIMIT 1) l ON true
 WHERE pg_catalog.pg_has_role(c.owner::oid, 'USAGE')
	OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE');

CREATE OR REPLACE VIEW jobflow.failed_tasks WITH (security_barrier = true) AS
SELECT t.id, t.queue, t.url, t.attempts, t.last_status, t.last_error,
	   t.updated_at AS failed_at
  FROM jobflow.tasks t
 WHERE t.state = 'failed'
   AND (pg_catalog.pg_has_role(t.owner::oid, 'USAGE')
		OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));
