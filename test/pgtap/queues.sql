-- Queues as objects (issue 10, item 3): who may configure which queue,
-- what each role sees of jobflow.queues, and the checks of the arguments.
BEGIN;
SELECT plan(34);

CREATE ROLE tap_q_alice;
CREATE ROLE tap_q_bob;
CREATE ROLE tap_q_ops;
GRANT jobflow_user TO tap_q_alice, tap_q_bob;
GRANT jobflow_admin TO tap_q_ops;

-- a role configures its own queues
SET LOCAL ROLE tap_q_alice;
SELECT is(jobflow.pause_queue('mail'), true, 'alice pauses her queue mail (a new row)');
SELECT is(jobflow.pause_queue('mail'), false, 'pausing it again changes nothing');
SELECT lives_ok($$SELECT jobflow.set_queue('mail', max_concurrent => 5, max_per_second => 2.5,
	priority => 3, retention => interval '2 days')$$, 'alice sets its limits');
SELECT is((SELECT row(owner::text, paused, max_concurrent, max_per_second, priority, retention)::text
		     FROM jobflow.queues WHERE name = 'mail'),
	row('tap_q_alice', true, 5, 2.5::float8, 3, interval '2 days')::text,
	'set_queue keeps the pause and stores every setting');
SELECT lives_ok($$SELECT jobflow.set_queue('mail', max_per_second => 10)$$, 'set_queue again');
SELECT is((SELECT row(paused, max_concurrent, max_per_second, priority, retention)::text
		     FROM jobflow.queues WHERE name = 'mail'),
	row(true, NULL::int, 10::float8, 0, NULL::interval)::text,
	'each setting left out goes back to its default');
SELECT is(jobflow.resume_queue('mail'), true, 'alice resumes it');
SELECT is(jobflow.resume_queue('mail'), false, 'resuming a running queue changes nothing');
SELECT is(jobflow.resume_queue('never-configured'), false, 'nor does resuming a queue without a row');
SELECT is(jobflow.pause_queue('mail', 'tap_q_alice'), true, 'naming herself as the owner is fine');
SELECT throws_ok($$INSERT INTO jobflow.queues (owner, name, paused) VALUES ('tap_q_alice', 'x', true)$$,
	'42501', NULL, 'no direct writes: only through the functions');
SELECT throws_ok($$UPDATE jobflow.queues SET paused = false$$,
	'42501', NULL, 'no direct updates either');

-- another tenant can neither change nor see it, and has queues of its own
SET LOCAL ROLE tap_q_bob;
SELECT is((SELECT count(*)::int FROM jobflow.queues WHERE owner = 'tap_q_alice'::regrole), 0,
	'bob does not see alice''s queues');
SELECT throws_ok($$SELECT jobflow.resume_queue('mail', 'tap_q_alice')$$, '42501',
	'permission denied to configure the queues of role "tap_q_alice"', 'bob cannot resume alice''s queue');
SELECT throws_ok($$SELECT jobflow.pause_queue('mail', 'tap_q_alice')$$, '42501', NULL,
	'nor pause it');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_concurrent => 1, owner => 'tap_q_alice')$$,
	'42501', NULL, 'nor limit it');
SELECT throws_ok($$SELECT jobflow.drop_queue('mail', 'tap_q_alice')$$, '42501', NULL,
	'nor drop it');
SELECT is(jobflow.pause_queue('mail'), true, 'bob''s own queue mail is another queue');
SELECT is((SELECT count(*)::int FROM jobflow.queues), 1, 'bob sees his row only');

-- the admin configures any owner's queues and sees them all
SET LOCAL ROLE tap_q_ops;
SELECT is((SELECT count(*)::int FROM jobflow.queues WHERE owner IN ('tap_q_alice'::regrole, 'tap_q_bob'::regrole)),
	2, 'the admin sees both');
SELECT is(jobflow.resume_queue('mail', 'tap_q_alice'), true, 'the admin resumes alice''s queue');
SELECT lives_ok($$SELECT jobflow.set_queue('mail', max_concurrent => 2, owner => 'tap_q_bob')$$,
	'the admin limits bob''s queue');
SELECT is(jobflow.drop_queue('mail', 'tap_q_bob'), true, 'and drops it');
SELECT throws_ok($$SELECT jobflow.pause_queue('x', 999999::oid::regrole)$$, '42704', NULL,
	'an owner that is no role');

-- arguments
SET LOCAL ROLE tap_q_alice;
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_concurrent => 0)$$, '22003',
	'max_concurrent must be between 1 and 1000000', 'zero concurrency');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_concurrent => 2000000)$$, '22003', NULL,
	'absurd concurrency');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_per_second => -1)$$, '22003',
	'max_per_second must be between 0.001 and 1e+06', 'a negative rate');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_per_second => 'NaN')$$, '22003', NULL,
	'a rate that is not a number');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', max_per_second => 1e9)$$, '22003', NULL,
	'an absurd rate');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', priority => 5000)$$, '22003',
	'priority must be between -1000 and 1000', 'an absurd priority');
SELECT throws_ok($$SELECT jobflow.set_queue('mail', retention => interval '-1 day')$$, '22003', NULL,
	'a negative retention');
SELECT throws_ok($$SELECT jobflow.pause_queue('')$$, '22023', NULL, 'an empty queue name');
SELECT throws_ok($$SELECT jobflow.pause_queue(E'a\nb')$$, '22023', NULL,
	'a queue name with a control character');
SELECT throws_ok($$SELECT jobflow.pause_queue(NULL)$$, '22004', NULL, 'no queue name');

SELECT * FROM finish();
ROLLBACK;
