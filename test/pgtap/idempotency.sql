-- Idempotency keys (issue 11, item 1): one unfinished task per owner and key.
BEGIN;
SELECT plan(20);

CREATE ROLE tap_key_alice;
CREATE ROLE tap_key_bob;
GRANT jobflow_user TO tap_key_alice, tap_key_bob;

SET LOCAL ROLE tap_key_alice;
SELECT jobflow.schedule('http://127.0.0.1:9/a', run_at => now() + interval '1 hour',
	body => '{"n": 1}', key => 'order-1') AS first \gset

-- ignore (the default): the existing task's id, nothing changed
SELECT is(jobflow.schedule('http://127.0.0.1:9/b', run_at => now() + interval '2 hours',
	body => '{"n": 2}', key => 'order-1'), :first::bigint, 'ignore returns the existing task');
SELECT is((SELECT count(*)::int FROM jobflow.tasks WHERE key = 'order-1'), 1, 'ignore adds no task');
SELECT is((SELECT body FROM jobflow.tasks WHERE id = :first), '{"n": 1}', 'ignore changes nothing');

-- replace: the pending task takes the new request, keeps its id
SELECT is(jobflow.schedule('http://127.0.0.1:9/c', run_at => now() + interval '3 hours',
	body => '{"n": 3}', headers => '{"X-A": "1"}', key => 'order-1', on_duplicate => 'replace'),
	:first::bigint, 'replace returns the existing task');
SELECT is((SELECT (url, body, headers)::text FROM jobflow.tasks WHERE id = :first),
	'(http://127.0.0.1:9/c,"{""n"": 3}","{""X-A"": ""1""}")', 'replace updates url, body and headers');
SELECT ok((SELECT run_at > now() + interval '150 minutes' FROM jobflow.tasks WHERE id = :first),
	'replace updates run_at');
SELECT throws_ok($$SELECT jobflow.schedule('ftp://x/', key => 'order-1', on_duplicate => 'replace')$$,
	'22023', NULL, 'replace checks the new request like an insert');

-- error: unique_violation, nothing written
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/d', key => 'order-1', on_duplicate => 'error')$$,
	'23505', NULL, 'error raises unique_violation');
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/d', key => 'order-1', on_duplicate => 'sometimes')$$,
	'22023', NULL, 'an unknown on_duplicate is refused');

-- set-based: plain INSERT ... SELECT means error, ON CONFLICT DO NOTHING means ignore
SELECT throws_ok($$INSERT INTO jobflow.tasks (url, key)
	SELECT 'http://127.0.0.1:9/e', k FROM (VALUES ('batch-1'), ('batch-1')) v(k)$$,
	'23505', NULL, 'INSERT ... SELECT with a duplicate key raises unique_violation');
SELECT is((SELECT count(*)::int FROM jobflow.tasks WHERE key = 'batch-1'), 0, 'and writes nothing');
INSERT INTO jobflow.tasks (url, run_at, key)
	SELECT 'http://127.0.0.1:9/e', now() + interval '1 hour', k
	  FROM (VALUES ('batch-1'), ('batch-1'), ('batch-2'), ('order-1')) v(k)
	ON CONFLICT DO NOTHING;
SELECT is((SELECT array_agg(key ORDER BY key) FROM jobflow.tasks),
	ARRAY['batch-1', 'batch-2', 'order-1'], 'INSERT ... SELECT ... ON CONFLICT DO NOTHING keeps one per key');

-- keys are per owner
SET LOCAL ROLE tap_key_bob;
SELECT is(jobflow._replace_task(:first, 'http://127.0.0.1:9/bob', now(), NULL, NULL, '{}', 'POST', 1000, 1, 'default', NULL),
	false, 'another role cannot replace the task through the internal function');
SELECT throws_ok($$UPDATE jobflow.tasks SET key = 'x'$$, '42501', NULL, 'a key is never updated by a tenant');
SELECT throws_ok($$UPDATE jobflow.tasks SET url = 'http://127.0.0.1:9/x'$$, '42501', NULL,
	'nor is the request (replace goes through schedule())');
SELECT isnt(jobflow.schedule('http://127.0.0.1:9/f', run_at => now() + interval '1 hour', key => 'order-1'),
	:first::bigint, 'another role has keys of its own');

-- a finished task frees its key
SET LOCAL ROLE tap_key_alice;
SELECT ok(jobflow.cancel(:first), 'the keyed task is cancelled');
SELECT isnt(jobflow.schedule('http://127.0.0.1:9/g', run_at => now() + interval '1 hour', key => 'order-1'),
	:first::bigint, 'after it finished, the key schedules a new task');
RESET ROLE;
UPDATE jobflow.tasks SET state = 'running' WHERE key = 'batch-2';
SET LOCAL ROLE tap_key_alice;
SELECT is(jobflow.schedule('http://127.0.0.1:9/h', key => 'batch-2', on_duplicate => 'replace'),
	(SELECT id FROM jobflow.tasks WHERE key = 'batch-2'), 'a running task is not replaced: its id comes back');
SELECT is((SELECT url FROM jobflow.tasks WHERE key = 'batch-2'), 'http://127.0.0.1:9/e',
	'and it is unchanged');

SELECT * FROM finish();
ROLLBACK;
