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

-- one bad row in a set-based insert writes none of them
SELECT pg_temp.try($$INSERT INTO jobflow.tasks (url) VALUES ('http://127.0.0.1/1'), ('ftp://127.0.0.1/2'), ('http://127.0.0.1/3')$$);

-- accepted above: the upper-case https URL, and NULL headers (taken as none)
SELECT count(*) - :before AS written FROM jobflow.tasks;

-- settings are reserved to jobflow
SET jobflow.no_such_setting = 1;
