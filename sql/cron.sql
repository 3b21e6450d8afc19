-- cron timers: validation, next occurrences with time zones, replace /
-- pause / unschedule, materialisation and ownership.  No worker runs in
-- this database, so jobflow._materialize_cron is called directly.
\pset null '(null)'
SET timezone = 'UTC';

-- an error as one line: SQLSTATE, message and detail
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	st text;
	msg text;
	det text;
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
							det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || msg || COALESCE(' | ' || NULLIF(det, ''), '');
END
$$;

-- one error in full, with its hint
SELECT jobflow.schedule_cron('bad', '0 25 * * *', 'http://127.0.0.1:9/x');

-- schedule errors say what and where (character positions, not bytes)
SELECT s, pg_temp.err(format('SELECT jobflow.cron_next(%L)', s))
  FROM (VALUES ('61 * * * *'), ('* * * * * * *'), ('* *'), ('*/0 * * * *'),
			   ('0 0 30 2 *'), ('0 0 * * mon-fry'), ('0 0 * foo *'),
			   ('1-5/2,,3 * * * *'), ('@fortnightly'), ('@daily 0'),
			   ('every 0 seconds'), ('every 10 fortnights'), ('every'),
			   (''), ('   '), ('0 0 * * * ü'), ('ä ä ä ä ä ä ä')) v(s);

-- everything else is checked with the rules of tasks
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'ftp://example.com/')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://u:p@example.com/')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', method => 'BREW')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', headers => '{"Host": "a"}')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', timeout_ms => 0)$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', max_attempts => 0)$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', queue => '')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', body => '{}', body_text => 'a')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', timezone => 'Mars/Olympus')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', '* * * * *', 'http://example.com/', missed => 'twice')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('', '* * * * *', 'http://example.com/')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron(NULL, '* * * * *', 'http://example.com/')$$);
SELECT pg_temp.err($$SELECT jobflow.schedule_cron('x', NULL, 'http://example.com/')$$);
-- direct writes go through the same checks
SELECT pg_temp.err($$INSERT INTO jobflow.cron_timers (name, schedule, url) VALUES ('x', '* * 32 * *', 'http://example.com/')$$);
SELECT count(*) AS timers_after_errors FROM jobflow.cron_timers;

-- next occurrences: seconds, steps, names, macros, intervals
SELECT s, jobflow.cron_next(s, 'UTC', '2024-01-01 00:00:07.25+00') AS next
  FROM (VALUES ('*/1 * * * * *'), ('*/15 * * * * *'), ('0 0 * * *'),
			   ('30 9 * * mon-fri'), ('0 0 1 jan *'), ('@hourly'),
			   ('@weekly'), ('every 10 seconds'), ('every 90 minutes'),
			   ('0 0 13 * fri')) v(s);

-- Europe/Paris, spring forward on 2024-03-31 (02:00 CET -> 03:00 CEST):
-- a fixed-time job in the gap runs shifted by the gap, once
WITH RECURSIVE r(n, t) AS (
	SELECT 1, jobflow.cron_next('30 2 * * *', 'Europe/Paris', '2024-03-29 12:00+00')
	UNION ALL
	SELECT n + 1, jobflow.cron_next('30 2 * * *', 'Europe/Paris', t) FROM r WHERE n < 4)
SELECT n, t, t AT TIME ZONE 'Europe/Paris' AS paris FROM r;

-- fall back on 2024-10-27 (03:00 CEST -> 02:00 CET): a fixed-time job in
-- the repeated hour runs once, an elapsed-time one keeps its rhythm
WITH RECURSIVE r(n, t) AS (
	SELECT 1, jobflow.cron_next('30 2 * * *', 'Europe/Paris', '2024-10-25 12:00+00')
	UNION ALL
	SELECT n + 1, jobflow.cron_next('30 2 * * *', 'Europe/Paris', t) FROM r WHERE n < 3)
SELECT n, t, t AT TIME ZONE 'Europe/Paris' AS paris FROM r;
WITH RECURSIVE r(n, t) AS (
	SELECT 1, jobflow.cron_next('*/30 * * * *', 'Europe/Paris', '2024-10-26 23:50+00')
	UNION ALL
	SELECT n + 1, jobflow.cron_next('*/30 * * * *', 'Europe/Paris', t) FROM r WHERE n < 5)
SELECT n, t, t AT TIME ZONE 'Europe/Paris' AS paris FROM r;

-- the timer's zone counts, not the session's
SET timezone = 'Asia/Tokyo';
SELECT jobflow.cron_next('0 9 * * *', 'America/New_York', '2024-07-01 00:00+00') AT TIME ZONE 'UTC' AS utc;
SET timezone = 'UTC';
SELECT jobflow.cron_next('0 9 * * *', 'America/New_York', '2024-07-01 00:00+00') AS utc;
SELECT jobflow.cron_next('* * * * *', 'UTC', 'infinity') AS none;

-- create: defaults, canonical zone name, next_at from now
SELECT jobflow.schedule_cron('every-second', '*/1 * * * * *', 'http://127.0.0.1:9/a',
							 body => '{"n": 1}', timezone => 'europe/paris') AS id \gset
SELECT name, owner, schedule, timezone, method, headers, body, content_type,
	   active, missed, next_at > now() AND next_at <= now() + interval '2 s' AS next_soon
  FROM jobflow.cron_timers WHERE id = :id;

-- materialise [next_at, next_at + 10 s): ten tasks, then nothing more
SELECT next_at AS t0 FROM jobflow.cron_timers WHERE id = :id \gset
SELECT count(*) AS created, min(run_at) = :'t0' AS from_next_at
  FROM jobflow._materialize_cron(:'t0'::timestamptz + interval '10 s');
SELECT count(*) AS created_again FROM jobflow._materialize_cron(:'t0'::timestamptz + interval '10 s');
SELECT count(*) AS created_later FROM jobflow._materialize_cron(:'t0'::timestamptz + interval '15 s');
SELECT count(*) AS tasks, count(DISTINCT cron_at) AS occurrences,
	   bool_and(run_at = cron_at) AS on_time, min(cron_at) = :'t0' AS first,
	   max(cron_at) = :'t0'::timestamptz + interval '14 s' AS last,
	   min(url) AS url, min(method) AS method, min(body) AS body,
	   min(content_type) AS content_type, bool_and(state = 'pending') AS pending
  FROM jobflow.tasks WHERE cron_id = :id;
SELECT next_at = :'t0'::timestamptz + interval '15 s' AS advanced
  FROM jobflow.cron_timers WHERE id = :id;
-- an occurrence is never created twice, even if next_at goes back
UPDATE jobflow.cron_timers SET next_at = :'t0' WHERE id = :id;
SELECT count(*) AS duplicates FROM jobflow._materialize_cron(:'t0'::timestamptz + interval '15 s');
SELECT split_part(pg_temp.err(format($$INSERT INTO jobflow.tasks (url, cron_id, cron_at) VALUES ('http://127.0.0.1:9/a', %s, %L)$$, :id, :'t0')), ' | ', 1) AS err;

-- the view: next occurrence is the earliest one waiting as a task
SELECT name, active, next_at = :'t0' AS next_is_first, last_at, last_state
  FROM jobflow.cron;

-- replace: same id, new definition, pending occurrences cancelled
SELECT jobflow.schedule_cron('every-second', '0 12 * * *', 'http://127.0.0.1:9/b',
							 timezone => 'UTC', missed => 'once') = :id AS same_id;
SELECT schedule, url, body, missed, next_at = jobflow.cron_next('0 12 * * *', 'UTC', now()) AS next_ok
  FROM jobflow.cron_timers WHERE id = :id;
SELECT state, count(*) FROM jobflow.tasks WHERE cron_id = :id GROUP BY state;
-- the cancelled occurrences may be created again by the new definition
SELECT count(*) AS recreated
  FROM jobflow._materialize_cron((SELECT next_at + interval '1 s' FROM jobflow.cron_timers WHERE id = :id));

-- pause: occurrences cancelled, no next_at, nothing materialised
SELECT jobflow.set_cron_active('every-second', false) AS paused;
SELECT active, next_at FROM jobflow.cron_timers WHERE id = :id;
SELECT count(*) AS pending FROM jobflow.tasks WHERE cron_id = :id AND state = 'pending';
SELECT count(*) AS created_while_paused FROM jobflow._materialize_cron(now() + interval '2 days');
SELECT name, active, next_at FROM jobflow.cron;
-- resume: the schedule restarts from now
SELECT jobflow.set_cron_active('every-second', true) AS resumed;
SELECT next_at = jobflow.cron_next('0 12 * * *', 'UTC', now()) AS next_ok
  FROM jobflow.cron_timers WHERE id = :id;
SELECT jobflow.set_cron_active('no-such-timer', true) AS unknown;

-- created inactive, activated later
SELECT jobflow.schedule_cron('later', '@daily', 'http://127.0.0.1:9/c', active => false) AS later_id \gset
SELECT active, next_at FROM jobflow.cron_timers WHERE id = :later_id;
SELECT jobflow.set_cron_active('later', true);
SELECT next_at = jobflow.cron_next('@daily', 'UTC', now()) AS next_ok
  FROM jobflow.cron_timers WHERE id = :later_id;

-- missed occurrences: 'skip' resumes after now, 'once' fires one task now
-- (the tasks a statement creates are visible to the next statement only;
-- made_at keeps the now of the statement that made them: the next one's
-- is later, by up to seconds on a busy machine)
CREATE TEMP TABLE made (id bigint, run_at timestamptz, made_at timestamptz DEFAULT now());
SELECT jobflow.schedule_cron('skipper', '*/1 * * * * *', 'http://127.0.0.1:9/d') AS skip_id \gset
UPDATE jobflow.cron_timers SET next_at = now() - interval '1 hour' WHERE id = :skip_id;
INSERT INTO made SELECT * FROM jobflow._materialize_cron(now() + interval '3 s');
SELECT count(*) BETWEEN 2 AND 4 AS a_few, min(t.run_at) >= min(m.made_at) AS none_in_the_past,
	   bool_and(t.run_at = t.cron_at) AS on_schedule
  FROM made m JOIN jobflow.tasks t USING (id) WHERE t.cron_id = :skip_id;
SELECT jobflow.schedule_cron('oncer', '0 * * * *', 'http://127.0.0.1:9/e', missed => 'once') AS once_id \gset
UPDATE jobflow.cron_timers SET next_at = '2024-01-01 10:00+00' WHERE id = :once_id;
TRUNCATE made;
INSERT INTO made SELECT * FROM jobflow._materialize_cron(now() + interval '1 s');
SELECT t.cron_at, t.run_at > now() - interval '1 min' AND t.run_at <= now() AS runs_now
  FROM made m JOIN jobflow.tasks t USING (id) WHERE t.cron_id = :once_id;
SELECT next_at = jobflow.cron_next('0 * * * *', 'UTC', now()) AS resumed_after_now
  FROM jobflow.cron_timers WHERE id = :once_id;
-- at worker start (catch_up), stale pending occurrences count as missed
UPDATE jobflow.tasks SET run_at = now() - interval '1 min'
 WHERE cron_id = :once_id AND state = 'pending';
UPDATE jobflow.cron_timers SET next_at = now() + interval '1 hour' WHERE id = :once_id;
TRUNCATE made;
INSERT INTO made SELECT * FROM jobflow._materialize_cron(now(), true);
SELECT t.cron_at AS once_more_for FROM made m JOIN jobflow.tasks t USING (id)
 WHERE t.cron_id = :once_id;
SELECT state, last_error, count(*) FROM jobflow.tasks
 WHERE cron_id = :once_id GROUP BY 1, 2 ORDER BY 1;

-- unschedule: the timer goes, its history stays
SELECT jobflow.unschedule_cron('every-second') AS removed;
SELECT jobflow.unschedule_cron('every-second') AS removed_again;
SELECT count(*) AS timers FROM jobflow.cron_timers WHERE id = :id;
SELECT state, count(*) FROM jobflow.tasks WHERE cron_id = :id GROUP BY state;

-- ownership: names are per owner; a role sees and changes its own timers
CREATE ROLE regress_cron_alice;
CREATE ROLE regress_cron_bob;
GRANT jobflow_user TO regress_cron_alice, regress_cron_bob;
SET ROLE regress_cron_alice;
SELECT jobflow.schedule_cron('job', '@hourly', 'http://127.0.0.1:9/alice') > 0 AS alice_job;
SET ROLE regress_cron_bob;
SELECT jobflow.schedule_cron('job', '@daily', 'http://127.0.0.1:9/bob') > 0 AS bob_job;
SELECT name, owner, url FROM jobflow.cron;
SELECT name, owner FROM jobflow.cron_timers;
SELECT jobflow.set_cron_active('job', false) AS bob_paused;
UPDATE jobflow.cron_timers SET url = 'http://127.0.0.1:9/evil' WHERE owner = 'regress_cron_alice'::regrole;
SELECT pg_temp.err($$UPDATE jobflow.cron_timers SET next_at = now()$$);
SELECT pg_temp.err($$SELECT * FROM jobflow._materialize_cron(now())$$);
SET ROLE regress_cron_alice;
SELECT name, owner, url, active FROM jobflow.cron;
SELECT jobflow.unschedule_cron('job') AS alice_removed;
RESET ROLE;
SELECT owner, name, active FROM jobflow.cron_timers WHERE name = 'job';
DELETE FROM jobflow.cron_timers WHERE name = 'job';
DROP ROLE regress_cron_alice, regress_cron_bob;
