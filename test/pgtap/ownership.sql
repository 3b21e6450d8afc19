-- Ownership isolation between two application roles, and the admin role.
BEGIN;
SELECT plan(16);

CREATE ROLE tap_alice;
CREATE ROLE tap_bob;
CREATE ROLE tap_ops;
GRANT jobflow_user TO tap_alice, tap_bob;
GRANT jobflow_admin TO tap_ops;

SET LOCAL ROLE tap_alice;
SELECT jobflow.schedule('http://127.0.0.1:9/alice', run_at => now() + interval '1 hour') AS alice_task \gset
SET LOCAL ROLE tap_bob;
SELECT jobflow.schedule('http://127.0.0.1:9/bob', run_at => now() + interval '1 hour') AS bob_task \gset

-- bob sees only his own task
SELECT is((SELECT count(*)::int FROM jobflow.tasks), 1, 'bob sees one task');
SELECT is((SELECT owner::text FROM jobflow.tasks), 'tap_bob', 'it is his own');
SELECT is(jobflow.cancel(:alice_task), false, 'bob cannot cancel alice''s task');
SELECT is(jobflow.reschedule(:alice_task, now()), false, 'bob cannot reschedule alice''s task');
SELECT lives_ok($$UPDATE jobflow.tasks SET state = 'cancelled' WHERE id = $$ || :alice_task,
	'a direct update of another role''s task is silently empty');
SELECT throws_ok($$INSERT INTO jobflow.tasks (url, owner) VALUES ('http://127.0.0.1:9/x', 'tap_alice')$$,
	'42501', NULL, 'bob cannot schedule a task in alice''s name');
SELECT is((SELECT count(*)::int FROM jobflow.task_log WHERE task_id = :alice_task), 0,
	'bob sees none of alice''s log');

SET LOCAL ROLE tap_alice;
SELECT is((SELECT array_agg(id) FROM jobflow.tasks), ARRAY[:alice_task]::bigint[], 'alice sees only her task');
SELECT is((SELECT state::text FROM jobflow.tasks WHERE id = :alice_task), 'pending', 'bob''s attempts changed nothing');
SELECT is(jobflow.cancel(:bob_task), false, 'alice cannot cancel bob''s task');
SELECT is(jobflow.cancel(:alice_task), true, 'alice cancels her own task');

-- membership grants more: a role granted alice's role sees her tasks
RESET ROLE;
GRANT tap_alice TO tap_bob;
SET LOCAL ROLE tap_bob;
SELECT is((SELECT count(*)::int FROM jobflow.tasks), 2, 'a member of alice sees her tasks too');
RESET ROLE;
REVOKE tap_alice FROM tap_bob;

-- jobflow_admin sees and controls every task
SET LOCAL ROLE tap_ops;
SELECT is((SELECT count(*)::int FROM jobflow.tasks WHERE id IN (:alice_task, :bob_task)), 2, 'admin sees all tasks');
SELECT is(jobflow.reschedule(:bob_task, now() + interval '2 hours'), true, 'admin reschedules bob''s task');

-- PUBLIC gets nothing
RESET ROLE;
CREATE ROLE tap_nobody;
SET LOCAL ROLE tap_nobody;
SELECT throws_ok($$SELECT count(*) FROM jobflow.tasks$$, '42501', NULL, 'a role without jobflow_user cannot read tasks');
SELECT throws_ok($$SELECT jobflow.schedule('http://127.0.0.1:9/n')$$, '42501', NULL, 'nor schedule');

SELECT * FROM finish();
ROLLBACK;
