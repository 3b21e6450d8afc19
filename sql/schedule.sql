-- schedule(): defaults, every parameter, set-based INSERT and COPY, rollback
\pset null '(null)'

SELECT jobflow.schedule('http://127.0.0.1:9/a') AS id;
SELECT id, url, method, headers, body, content_type, run_at <= now() AS due_now,
       state, attempts, max_attempts, timeout_ms, queue, owner
  FROM jobflow.tasks WHERE id = 1;

SELECT jobflow.schedule(url => 'https://example.com/orders/42/expire?x=1',
                        run_at => '2030-01-01 00:00:00+00',
                        body => '{"order": 42}',
                        headers => '{"Authorization": "Bearer t0k3n", "X-Trace": "abc"}',
                        method => 'put',
                        timeout_ms => 1500,
                        max_attempts => 3,
                        queue => 'orders') AS id;
SELECT url, method, headers, body, content_type, run_at AT TIME ZONE 'UTC' AS run_at_utc,
       max_attempts, timeout_ms, queue
  FROM jobflow.tasks WHERE id = 2;

-- a non-JSON body with its own content type
SELECT jobflow.schedule('http://[::1]:8080/form', body_text => 'a=1&b=2',
                        content_type => 'application/x-www-form-urlencoded') AS id;
SELECT body, content_type FROM jobflow.tasks WHERE id = 3;

-- set-based: a plain INSERT ... SELECT goes through the same checks
INSERT INTO jobflow.tasks (url, run_at, body, content_type)
SELECT 'http://127.0.0.1:9/bulk/' || g, now() + g * interval '1 second',
       '{"n": ' || g || '}', 'application/json'
  FROM generate_series(1, 1000) g;
SELECT count(*), min(method), min(state::text), bool_and(owner = current_user::regrole)
  FROM jobflow.tasks WHERE url LIKE '%/bulk/%';

-- COPY too
COPY jobflow.tasks (url, method) FROM stdin;
http://127.0.0.1:9/copied/1	get
http://127.0.0.1:9/copied/2	delete
\.
SELECT url, method FROM jobflow.tasks WHERE url LIKE '%/copied/%' ORDER BY url;

-- a task exists only if its transaction commits
SELECT count(*) AS before FROM jobflow.tasks \gset
BEGIN;
SELECT jobflow.schedule('http://127.0.0.1:9/rolled-back') IS NOT NULL AS scheduled;
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT jobflow.schedule('http://127.0.0.1:9/rolled-back-to-savepoint') IS NOT NULL AS scheduled;
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) - :before AS added, count(*) FILTER (WHERE url LIKE '%rolled-back%') AS rolled_back
  FROM jobflow.tasks;
