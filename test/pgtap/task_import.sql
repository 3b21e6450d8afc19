-- jobflow.task_import (issue 9, item 17g): the way application roles COPY tasks.
BEGIN;
SELECT plan(7);

CREATE ROLE tap_imp_app;
CREATE ROLE tap_imp_none;
GRANT jobflow_user TO tap_imp_app;

SET LOCAL ROLE tap_imp_app;
SELECT lives_ok($$INSERT INTO jobflow.task_import (url, run_at) VALUES ('http://127.0.0.1:9/imp', now() + interval '1 hour')$$,
	'an application role inserts through jobflow.task_import');
SELECT is((SELECT owner::text FROM jobflow.tasks WHERE url = 'http://127.0.0.1:9/imp'), 'tap_imp_app',
	'the task belongs to that role');
SELECT is((SELECT ROW(method, headers::text, queue, max_attempts, timeout_ms)::text
			 FROM jobflow.tasks WHERE url = 'http://127.0.0.1:9/imp'),
	'(POST,{},default,5,30000)', 'omitted columns take the table''s defaults');
SELECT throws_ok($$INSERT INTO jobflow.task_import (url) VALUES ('http://127.0.0.1:9/a'), ('http://-/')$$,
	'22023', NULL, 'every row is checked, and one bad row writes none');
SELECT is((SELECT count(*)::int FROM jobflow.tasks WHERE url = 'http://127.0.0.1:9/a'), 0, 'nothing written');
SELECT throws_ok($$SELECT * FROM jobflow.task_import$$, '42501', NULL, 'the view is for inserting only');

RESET ROLE;
SET LOCAL ROLE tap_imp_none;
SELECT throws_ok($$INSERT INTO jobflow.task_import (url) VALUES ('http://127.0.0.1:9/n')$$, '42501', NULL,
	'a role without jobflow_user cannot');

SELECT * FROM finish();
ROLLBACK;
