-- Every validation error, with its SQLSTATE; nothing is written on error.
\pset null '(null)'

CREATE FUNCTION pg_temp.try(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	d text;
	h text;
BEGIN
	EXECUTE q;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
	RETURN SQLSTATE || ': ' || SQLERRM
		|| CASE WHEN d <> '' THEN ' | DETAIL: ' || d ELSE '' END
		|| CASE WHEN h <> '' THEN ' | HINT: ' || h ELSE '' END;
END
$$;

SELECT count(*) AS before FROM jobflow.tasks \gset

-- URLs
SELECT pg_temp.try($$SELECT jobflow.schedule(NULL)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('/relative/path')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('file:///etc/passwd')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('gopher://127.0.0.1:70/_GET')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('ftp://127.0.0.1/x')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('dict://127.0.0.1:11211/stat')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http:///path')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://user:s3cret@example.com/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com@evil.example/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com:0/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com:65536/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com:80x/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[::1/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://exa mple.com/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule(E'http://example.com/\r\nHost: evil')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://exämple.com/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com\@evil/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.com/' || repeat('a', 9000))$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('HTTPS://Example.COM:443/ok')$$);

-- methods
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', method => 'TRACE')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', method => 'CONNECT')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', method => E'GET / HTTP/1.1\r\n')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', method => NULL)$$);

-- headers
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '[]')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '"x"')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-A": 1}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-A": {"b": "c"}}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-A": "ok\r\nX-Injected: 1"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-A": "nul\u0001"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"Bad Name": "v"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-A\nB": "v"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"": "v"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"Host": "evil"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"content-length": "5"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"Transfer-Encoding": "chunked"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-Jobflow-Task-Id": "1"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body => '{}', headers => '{"Content-Type": "text/plain"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => jsonb_build_object('X-Big', repeat('v', 20000)))$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => NULL)$$);

-- body and content type
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body => '{}', body_text => 'x')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body_text => 'x', content_type => E'text/plain\r\nX-Injected: 1')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body_text => repeat('x', 2 * 1024 * 1024))$$);
SET jobflow.max_body_size = '10B';
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body_text => repeat('x', 11))$$);
RESET jobflow.max_body_size;

-- ranges, run_at, queue
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', timeout_ms => 0)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', timeout_ms => 3600001)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', timeout_ms => NULL)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', max_attempts => 1001)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', run_at => NULL)$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', run_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => '')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => repeat('q', 64))$$);

-- issue 9, item 17.  Accepted rows get negative ids and are deleted at the
-- end, and the sequence is put back, so later files see the same ids.
SELECT last_value AS seq_last, is_called AS seq_called FROM jobflow.tasks_id_seq \gset

-- header names that differ only in case
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', body_text => 'x', headers => '{"Content-Type": "text/plain", "content-type": "text/html"}')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', headers => '{"X-Api-Key": "a", "X-A": "b", "x-api-key": "c"}')$$);

-- impossible hosts (RFC 3986 host: IP-literal, dotted-decimal IPv4, or a name of DNS labels)
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[1.2.3.4.5::::]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[1::2::3]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[12345::1]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[::1.2.3]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[v1.abc]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://[fe80::1%25eth0]/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://.../')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://-/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://./')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://a..example/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://.example.com/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://-a.example/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://a-.example:8080/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://' || repeat('a', 64) || '.example/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://' || repeat('abcdefghi.', 25) || 'example/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://1.2.3.4.5/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://256.1.1.1/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.1/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://0:8080/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://2130706433/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://010.0.0.1/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://0x7f.0.0.0x1/')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://example.123/')$$);
-- and what stays accepted: IPv6 literals, dotted-decimal IPv4, names (with a final dot)
INSERT INTO jobflow.tasks (id, url) VALUES
	(-101, 'http://[::ffff:192.0.2.1]:8080/'),
	(-102, 'http://[2001:DB8::1]/'),
	(-103, 'http://192.0.2.1:8080/'),
	(-104, 'https://api-1.Example.com./x'),
	(-105, 'https://_srv.0x7f.example/x');

-- queue names: 1 to 63 bytes of printable characters
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => E'mail\nX-Forged: 1')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => E'q\x01')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => E'q\x7f')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => E'q\u0085')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => ' mail')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule('http://127.0.0.1/', queue => 'mail ')$$);
INSERT INTO jobflow.tasks (id, url, queue) VALUES (-106, 'http://127.0.0.1/', 'Mails für Kunden');

-- reschedule checks its arguments first, whether the id exists or not
SELECT pg_temp.try($$SELECT jobflow.reschedule(-1, NULL)$$);
SELECT pg_temp.try($$SELECT jobflow.reschedule(-1, 'infinity')$$);
SELECT pg_temp.try($$SELECT jobflow.reschedule(-1, '-infinity')$$);
INSERT INTO jobflow.tasks (id, url, run_at) VALUES (-110, 'http://127.0.0.1/r', '2100-01-01');
SELECT pg_temp.try($$SELECT jobflow.reschedule(-110, NULL)$$);
SELECT pg_temp.try($$SELECT jobflow.reschedule(-110, 'infinity')$$);
SELECT run_at FROM jobflow.tasks WHERE id = -110;
SELECT jobflow.reschedule(-1, now()) AS no_such_task;

-- a time zone that parses but no wall clock of which can fire
SELECT pg_temp.try($$SELECT jobflow.schedule_cron('tz99', '0 9 * * *', 'http://127.0.0.1/', timezone => '<+99>-99')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule_cron('tz99', '0 9 * * *', 'http://127.0.0.1/', timezone => '<-25>25', active => false)$$);
SELECT pg_temp.try($$SELECT jobflow.cron_next('0 9 * * *', '<+99>-99')$$);
SELECT pg_temp.try($$SELECT jobflow.schedule_cron('tz14', '0 9 * * *', 'http://127.0.0.1/', timezone => '<+14>-14', active => false)$$);
SELECT count(*) AS timers FROM jobflow.cron_timers WHERE name LIKE 'tz%';
SELECT jobflow.unschedule_cron('tz14');

-- the internal trigger functions: not callable, not attachable, not executable by tenants
SELECT pg_temp.try($$SELECT jobflow._task_check()$$);
CREATE TABLE pg_temp.not_tasks (id bigint, url text);
CREATE TRIGGER misuse BEFORE INSERT ON pg_temp.not_tasks FOR EACH ROW EXECUTE FUNCTION jobflow._task_check();
SELECT pg_temp.try($$INSERT INTO pg_temp.not_tasks VALUES (1, 'http://127.0.0.1/')$$);
DROP TRIGGER misuse ON pg_temp.not_tasks;
CREATE TRIGGER misuse AFTER INSERT ON pg_temp.not_tasks FOR EACH ROW EXECUTE FUNCTION jobflow._cron_check();
SELECT pg_temp.try($$INSERT INTO pg_temp.not_tasks VALUES (1, 'http://127.0.0.1/')$$);
DROP TRIGGER misuse ON pg_temp.not_tasks;
CREATE TRIGGER misuse AFTER INSERT ON pg_temp.not_tasks FOR EACH STATEMENT EXECUTE FUNCTION jobflow._notify_worker();
SELECT pg_temp.try($$INSERT INTO pg_temp.not_tasks VALUES (1, 'http://127.0.0.1/')$$);
DROP TABLE pg_temp.not_tasks;
SELECT p.proname, pg_catalog.has_function_privilege('jobflow_user', p.oid, 'EXECUTE') AS user_exec,
       pg_catalog.has_function_privilege('jobflow_admin', p.oid, 'EXECUTE') AS admin_exec
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'jobflow'::regnamespace
   AND (p.prorettype = 'trigger'::regtype OR p.proname = '_wake_horizon')
 ORDER BY 1;
CREATE ROLE validation_tenant;
GRANT jobflow_user TO validation_tenant;
SET ROLE validation_tenant;
CREATE TEMP TABLE tenant_table (url text);
SELECT pg_temp.try($$CREATE TRIGGER t BEFORE INSERT ON tenant_table FOR EACH ROW EXECUTE FUNCTION jobflow._task_check()$$);
SELECT pg_temp.try($$CREATE TRIGGER t AFTER INSERT ON tenant_table FOR EACH STATEMENT EXECUTE FUNCTION jobflow._cron_notify()$$);
SELECT pg_temp.try($$SELECT jobflow._wake_horizon()$$);
-- the triggers still fire for the tenant's own rows
SELECT pg_temp.try($$SELECT jobflow.schedule('ftp://127.0.0.1/tenant')$$);
DROP TABLE tenant_table;
RESET ROLE;

-- rules apply to what enters or changes: a task stored by 0.1.0 under its
-- looser rules can still be rescheduled, retried or rescued, but not edited
SET session_replication_role = replica;
INSERT INTO jobflow.tasks (id, url, headers, queue, owner)
VALUES (-120, 'http://127.1/', '{"X-A": "1", "x-a": "2"}', E'old\tqueue', current_user::regrole);
RESET session_replication_role;
SELECT pg_temp.try($$SELECT jobflow.reschedule(-120, '2100-01-01')$$);
SELECT pg_temp.try($$UPDATE jobflow.tasks SET state = 'running' WHERE id = -120$$);
SELECT pg_temp.try($$UPDATE jobflow.tasks SET state = 'pending', run_at = '2100-01-02' WHERE id = -120$$);
SELECT pg_temp.try($$UPDATE jobflow.tasks SET run_at = NULL WHERE id = -120$$);
SELECT pg_temp.try($$UPDATE jobflow.tasks SET queue = 'new' WHERE id = -120$$);
SELECT pg_temp.try($$UPDATE jobflow.tasks SET url = 'http://127.0.0.1/', headers = '{}', queue = 'new' WHERE id = -120$$);

SELECT id, url, queue FROM jobflow.tasks WHERE id < 0 ORDER BY id DESC;
DELETE FROM jobflow.tasks WHERE id < 0;
DROP ROLE validation_tenant;
SELECT pg_catalog.setval('jobflow.tasks_id_seq', :seq_last, :'seq_called') IS NOT NULL AS sequence_restored;

-- one bad row in a set-based insert writes none of them
SELECT pg_temp.try($$INSERT INTO jobflow.tasks (url) VALUES ('http://127.0.0.1/1'), ('ftp://127.0.0.1/2'), ('http://127.0.0.1/3')$$);

-- accepted above: the upper-case https URL, and NULL headers (taken as none)

SELECT count(*) - :before AS written FROM jobflow.tasks;
