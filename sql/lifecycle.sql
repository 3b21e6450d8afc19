-- cancel(), reschedule() and the state machine, as an application role
\pset null '(null)'

CREATE ROLE regress_jobflow_app;
GRANT jobflow_user TO regress_jobflow_app;
SET ROLE regress_jobflow_app;

SELECT jobflow.schedule('http://127.0.0.1:9/a', run_at => now() + interval '1 hour') AS a \gset
SELECT jobflow.schedule('http://127.0.0.1:9/b', run_at => now() + interval '1 hour') AS b \gset

-- reschedule a pending task: true, and run_at moves
SELECT jobflow.reschedule(:a, '2031-05-05 05:05:05+00') AS rescheduled;
SELECT run_at AT TIME ZONE 'UTC' AS run_at_utc, state FROM jobflow.tasks WHERE id = :a;
-- reschedule to NULL is refused
SELECT jobflow.reschedule(:a, NULL);

-- cancel: true once, then false; a cancelled task cannot be rescheduled
SELECT jobflow.cancel(:a) AS first_cancel, jobflow.cancel(:a) AS second_cancel;
SELECT jobflow.reschedule(:a, now()) AS rescheduled_cancelled;
SELECT state FROM jobflow.tasks WHERE id = :a;

-- unknown ids: false, not an error
SELECT jobflow.cancel(-1) AS cancel_unknown, jobflow.reschedule(-1, now()) AS reschedule_unknown;

-- an application cannot drive the worker's transitions itself
UPDATE jobflow.tasks SET state = 'running' WHERE id = :b;
UPDATE jobflow.tasks SET state = 'succeeded' WHERE id = :b;
-- finished tasks are outside the update policy: nothing changes
UPDATE jobflow.tasks SET state = 'pending' WHERE id = :a;
SELECT state FROM jobflow.tasks WHERE id = :a;
-- nor touch columns it was not granted
UPDATE jobflow.tasks SET attempts = 0 WHERE id = :b;
UPDATE jobflow.tasks SET url = 'http://127.0.0.1:9/other' WHERE id = :b;
INSERT INTO jobflow.tasks (url, state) VALUES ('http://127.0.0.1:9/c', 'succeeded');
-- a reschedule is validated like a new task
UPDATE jobflow.tasks SET run_at = 'infinity' WHERE id = :b;

RESET ROLE;

-- the worker's transitions, as a superuser stands in for it
UPDATE jobflow.tasks SET state = 'running', attempts = attempts + 1 WHERE id = :b;
SELECT jobflow.cancel(:b) AS cancel_running, jobflow.reschedule(:b, now()) AS reschedule_running;
-- an application sees its running task but cannot lock it against the worker
SET ROLE regress_jobflow_app;
SELECT count(*) AS visible FROM jobflow.tasks WHERE id = :b;
SELECT count(*) AS locked FROM (SELECT id FROM jobflow.tasks WHERE id = :b FOR UPDATE) l;
RESET ROLE;
UPDATE jobflow.tasks SET state = 'cancelled' WHERE id = :b;
UPDATE jobflow.tasks SET state = 'succeeded', last_status = 200 WHERE id = :b;
SELECT state, attempts, last_status, updated_at >= created_at AS touched FROM jobflow.tasks WHERE id = :b;
UPDATE jobflow.tasks SET state = 'pending' WHERE id = :b;

DELETE FROM jobflow.tasks WHERE owner = 'regress_jobflow_app'::regrole;
DROP ROLE regress_jobflow_app;
