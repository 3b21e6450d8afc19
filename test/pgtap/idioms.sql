-- The idioms users bring (issue 11, item 5): pg_net's Content-Type header
-- with a jsonb body, pg_cron's interval schedules, binary bodies.
BEGIN;
SELECT plan(16);

-- a JSON content type given as a header: accepted, sent once
SELECT jobflow.schedule('http://127.0.0.1:9/j', run_at => now() + interval '1 hour', body => '{"a": 1}',
	headers => '{"Content-Type": "application/json"}') AS j1 \gset
SELECT is((SELECT (content_type, headers)::text FROM jobflow.tasks WHERE id = :j1),
	'(,"{""Content-Type"": ""application/json""}")', 'a JSON Content-Type header with a jsonb body is kept as given');
SELECT jobflow.schedule('http://127.0.0.1:9/j', run_at => now() + interval '1 hour', body => '{"a": 1}',
	headers => '{"content-type": "application/vnd.api+json; charset=utf-8"}') AS j2 \gset
SELECT is((SELECT content_type FROM jobflow.tasks WHERE id = :j2), NULL, 'so is a +json type with parameters');
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/j', body => '{}', headers => '{"Content-Type": "text/plain"}')$$,
	'22023', 'Content-Type header "text/plain" does not agree with a JSON body', 'a conflicting header is refused');
-- content_type and the same header: content_type alone is kept
SELECT jobflow.schedule('http://127.0.0.1:9/j', run_at => now() + interval '1 hour', body_text => 'a=1',
	content_type => 'application/x-www-form-urlencoded',
	headers => '{"Content-Type": "application/x-www-form-urlencoded", "X-A": "1"}') AS j3 \gset
SELECT is((SELECT (content_type, headers)::text FROM jobflow.tasks WHERE id = :j3),
	'(application/x-www-form-urlencoded,"{""X-A"": ""1""}")', 'the same content type twice is kept once');
SELECT throws_ok($$INSERT INTO jobflow.tasks (url, content_type, headers) VALUES ('http://127.0.0.1:9/j', 'text/plain', '{"Content-Type": "text/html"}')$$,
	'22023', 'content type is given both as content_type and as a header, and they differ', 'two different ones are refused');
SELECT lives_ok($$SELECT jobflow.schedule_cron('idiom-json', '0 * * * *', 'http://127.0.0.1:9/c', body => '{}',
	headers => '{"Content-Type": "application/json"}')$$, 'schedule_cron accepts the JSON header too');

-- pg_cron's interval schedules
SELECT lives_ok($$SELECT jobflow.schedule_cron('idiom-5s', '5 seconds', 'http://127.0.0.1:9/c')$$,
	'''5 seconds'' is a schedule');
SELECT is(jobflow.cron_next('10 minutes', 'UTC', '2026-01-01 00:03:00+00'),
	jobflow.cron_next('every 10 minutes', 'UTC', '2026-01-01 00:03:00+00'), '''10 minutes'' means every 10 minutes');
SELECT throws_ok($$SELECT jobflow.schedule_cron('idiom-bad', '5 fortnights', 'http://127.0.0.1:9/c')$$,
	'22023', NULL, 'an unknown unit is still refused');

-- binary bodies
SELECT jobflow.schedule('http://127.0.0.1:9/b', run_at => now() + interval '1 hour',
	body_bytes => '\x00ff10'::bytea, content_type => 'image/png') AS b1 \gset
SELECT is((SELECT (body, body_bytes, content_type)::text FROM jobflow.tasks WHERE id = :b1),
	'(,"\\x00ff10",image/png)', 'a bytea body is stored with its content type');
SELECT jobflow.schedule('http://127.0.0.1:9/b', run_at => now() + interval '1 hour',
	body_bytes => '\x01'::bytea) AS b2 \gset
SELECT is((SELECT content_type FROM jobflow.tasks WHERE id = :b2), 'application/octet-stream',
	'without one, application/octet-stream');
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/b', body => '{}', body_bytes => '\x01'::bytea)$$,
	'22023', 'only one of body, body_text and body_bytes can be given', 'body and body_bytes exclude each other');
SELECT throws_ok($$INSERT INTO jobflow.tasks (url, body, body_bytes) VALUES ('http://127.0.0.1:9/b', 'x', '\x01')$$,
	'23514', NULL, 'in a plain INSERT too');
SET LOCAL jobflow.max_body_size = 4;
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/b', body_bytes => '\x0102030405'::bytea)$$,
	'54000', 'request body is too large', 'the size limit applies to binary bodies');
RESET jobflow.max_body_size;
SELECT jobflow.schedule('http://127.0.0.1:9/b', run_at => now() + interval '1 hour', key => 'bin',
	body_bytes => '\x01'::bytea) AS b3 \gset
SELECT is(jobflow.schedule('http://127.0.0.1:9/b', key => 'bin', on_duplicate => 'replace',
	body_bytes => '\x0202'::bytea), :b3::bigint, 'replace takes a binary body too');
SELECT is((SELECT body_bytes FROM jobflow.tasks WHERE id = :b3), '\x0202'::bytea, 'and stores it');

SELECT * FROM finish();
ROLLBACK;
