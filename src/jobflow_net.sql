/*
 * src/jobflow_net.sql: extension jobflow_net, pg_net's SQL interface
 * backed by jobflow.
 *
 * The Makefile makes jobflow_net--0.3.0.sql of this file (on PostgreSQL
 * 14, which has no security_invoker views, net._http_response becomes a
 * security_barrier view; its WHERE clause filters rows as jobflow's
 * policies do, so both read the same).  The version is jobflow's: the two
 * ship together and this file uses objects jobflow 0.3.0 has (schedule()'s
 * arguments, queues per owner).
 *
 * net.http_get/http_post/http_delete keep pg_net 0.20's signatures,
 * defaults and return type.  Each schedules a jobflow task through
 * jobflow.schedule(), as the caller and in the caller's transaction, in
 * the caller's queue "net", due at once; the request id it returns is the
 * task's id.  net._http_response shows the caller's finished tasks of
 * that queue with pg_net's columns.  What differs, and why, is in
 * docs/pg-net.md.
 *
 * Every operator is qualified and every function's search_path pinned:
 * the functions run as their caller, whose search_path may hold anything.
 */

\echo Use "CREATE EXTENSION jobflow_net" to load this file. \quit

/*
 * CREATE EXTENSION makes schema net only when it does not exist: an
 * existing one is used as it is.  pg_net makes the same schema, with
 * tables and functions of the same names, so the two cannot live in one
 * database: say so rather than fail on the first name both define.  Any
 * other schema net is used only if it is what DROP EXTENSION jobflow_net
 * leaves (the schema is not a member of the extension): empty, a
 * superuser's, granting nothing but USAGE to jobflow's roles.  Objects
 * planted there, or its owner, could otherwise change what net.* run.
 * The objects and the owner are checked whoever made the schema and
 * whenever: a schema's row written in this transaction (ALTER SCHEMA net
 * OWNER TO, or REVOKE, just before) is no proof that CREATE EXTENSION made
 * it, and it may still hold what a tenant planted.  Only its grants are
 * let be when its row was written in this transaction: the installer's
 * default privileges give the schema CREATE EXTENSION makes, and the
 * privileges section below takes back, whatever that may be.
 */
DO $prelude$
DECLARE
	s record;
BEGIN
	SELECT n.oid, n.nspowner, n.nspacl,
		   (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner) AS owner_super,
		   n.xmin OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id()::pg_catalog.xid AS written_now
	  INTO s
	  FROM pg_catalog.pg_namespace n
	 WHERE n.nspname OPERATOR(pg_catalog.=) 'net'::pg_catalog.name;
	/* the control file cannot require a version: jobflow 0.3.0's objects */
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name
				  AND e.extversion OPERATOR(pg_catalog.=) ANY ('{0.1.0,0.2.0}'::pg_catalog.text[])) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'object_not_in_prerequisite_state',
			MESSAGE = 'jobflow_net needs jobflow 0.3.0 or later',
			DETAIL = pg_catalog.format('Extension jobflow is at version %s in this database.',
				(SELECT e.extversion FROM pg_catalog.pg_extension e
				  WHERE e.extname OPERATOR(pg_catalog.=) 'jobflow'::pg_catalog.name)),
			HINT = 'Update it first: ALTER EXTENSION jobflow UPDATE.';
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'pg_net'::pg_catalog.name) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'duplicate_schema',
			MESSAGE = 'extension "pg_net" is installed in this database: jobflow_net cannot be installed beside it',
			DETAIL = 'Both provide pg_net''s functions, types and tables in schema "net".',
			HINT = 'Use one of them: drop extension pg_net once its queued requests are done (DROP EXTENSION pg_net), then create jobflow_net.';
	END IF;
	IF EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
				WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_namespace'::pg_catalog.regclass
				  AND d.refobjid OPERATOR(pg_catalog.=) s.oid
				  AND d.deptype OPERATOR(pg_catalog.=) 'n'::"char"
				  /* the extension being created depends on its schema too */
				  AND d.classid OPERATOR(pg_catalog.<>) 'pg_catalog.pg_extension'::pg_catalog.regclass) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'duplicate_schema',
			MESSAGE = 'schema "net" already exists and contains objects',
			DETAIL = 'jobflow_net makes schema "net" itself, as pg_net does: objects made there before would be mixed with pg_net''s functions.',
			HINT = 'Drop the schema or the objects in it, or rename it, and try again.';
	END IF;
	IF NOT s.owner_super THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = pg_catalog.format('schema "net" belongs to role "%s", not to a superuser',
										s.nspowner::pg_catalog.regrole),
			DETAIL = 'CREATE EXTENSION jobflow_net uses an existing schema of that name, and its owner could change jobflow_net''s objects.',
			HINT = 'Drop the schema, or give it to a superuser with ALTER SCHEMA net OWNER TO, and try again.';
	END IF;
	IF NOT s.written_now AND s.nspacl IS NOT NULL AND EXISTS (
		SELECT 1 FROM pg_catalog.aclexplode(s.nspacl) a
		 WHERE a.grantee OPERATOR(pg_catalog.<>) s.nspowner
		   AND (a.privilege_type OPERATOR(pg_catalog.<>) 'USAGE'
				OR a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY(
					SELECT r.oid FROM pg_catalog.pg_roles r
					 WHERE r.rolname OPERATOR(pg_catalog.=) ANY ('{jobflow_user,jobflow_admin}'::pg_catalog.name[]))))) THEN
		RAISE EXCEPTION USING
			ERRCODE = 'insufficient_privilege',
			MESSAGE = 'schema "net" grants privileges to other roles',
			DETAIL = 'jobflow_net grants the privileges on its schema itself.',
			HINT = 'Revoke them (REVOKE ALL ON SCHEMA net FROM ...), or drop the schema, and try again.';
	END IF;
END
$prelude$;

/* pg_net's types, as pg_net defines them */
CREATE TYPE net.request_status AS ENUM ('PENDING', 'SUCCESS', 'ERROR');

CREATE TYPE net.http_response AS (
	status_code integer,
	headers		jsonb,
	body		text
);

CREATE TYPE net.http_response_result AS (
	status		net.request_status,
	message		text,
	response	net.http_response
);

/*
 * A param's key or value as pg_net puts it in the query: every byte of
 * its UTF-8 form but A-Z a-z 0-9 - . _ ~ as %xx (curl_easy_escape() writes
 * upper-case hex digits, then curl's URL API, which pg_net appends the
 * params with, gives them back in lower case).  Character by character:
 * the time grows with the length (reading the whole string again for each
 * byte, as get_byte(convert_to(string), i) does, took minutes for a param
 * of 1 MB before the URL limit refused it).
 */
CREATE FUNCTION net._urlencode(string text)
RETURNS text
LANGUAGE sql
IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT COALESCE(pg_catalog.string_agg(
			 CASE WHEN c.v OPERATOR(pg_catalog.>=) 48 AND c.v OPERATOR(pg_catalog.<=) 57
					OR c.v OPERATOR(pg_catalog.>=) 65 AND c.v OPERATOR(pg_catalog.<=) 90
					OR c.v OPERATOR(pg_catalog.>=) 97 AND c.v OPERATOR(pg_catalog.<=) 122
					OR c.v OPERATOR(pg_catalog.=) ANY ('{45,46,95,126}'::integer[])
				  THEN c.ch
				  ELSE pg_catalog.regexp_replace(pg_catalog.encode(pg_catalog.convert_to(c.ch, 'UTF8'), 'hex'),
												 '(..)', E'%\\1', 'g')
			 END, '' ORDER BY c.n), '')
	  FROM (SELECT s.ch, s.n, pg_catalog.ascii(s.ch) AS v
			  FROM pg_catalog.regexp_split_to_table(string, '') WITH ORDINALITY AS s(ch, n)) AS c
$$;

/*
 * The jobflow task a pg_net call stands for, as a jsonb object with the
 * keys of jobflow.schedule()'s arguments: url (params appended to its
 * query, encoded as pg_net encodes them), method, headers, body (absent
 * for none) and timeout_ms.  A POST gets pg_net's checks and default:
 * Content-Type application/json, added when the headers have none,
 * refused when they name another.  net.http_* schedule what it returns;
 * it makes nothing itself, so a migration can use it to turn a pg_net
 * call into a task or a timer.
 */
CREATE FUNCTION net.jobflow_request(
	method text,
	url text,
	params jsonb DEFAULT '{}',
	headers jsonb DEFAULT '{}',
	body jsonb DEFAULT NULL,
	timeout_milliseconds integer DEFAULT 5000)
RETURNS jsonb
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	m text := pg_catalog.upper(jobflow_request.method);
	h jsonb := COALESCE(jobflow_request.headers, '{}'::jsonb);
	query text;
	u text;
	hash integer;
	fragment text := '';
	ct text;
	r jsonb;
BEGIN
	IF m IS NULL OR m OPERATOR(pg_catalog.<>) ALL ('{GET,POST,DELETE}'::text[]) THEN
		RAISE EXCEPTION 'method must be GET, POST or DELETE, not %',
			COALESCE(pg_catalog.quote_literal(jobflow_request.method), 'null')
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF pg_catalog.jsonb_typeof(h) OPERATOR(pg_catalog.<>) 'object' THEN
		RAISE EXCEPTION 'headers must be a JSON object'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF m OPERATOR(pg_catalog.=) 'POST' THEN
		SELECT e.value INTO ct
		  FROM pg_catalog.jsonb_each_text(h) AS e(key, value)
		 WHERE pg_catalog.lower(e.key) OPERATOR(pg_catalog.=) 'content-type'
		 LIMIT 1;
		IF ct IS NULL THEN
			h := h OPERATOR(pg_catalog.||) '{"Content-Type": "application/json"}'::jsonb;
		ELSIF ct OPERATOR(pg_catalog.<>) 'application/json' THEN
			RAISE EXCEPTION 'Content-Type header must be "application/json"'
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'net.http_post sends its body as JSON, as pg_net does; schedule other payloads with jobflow.schedule(body_text => ..., content_type => ...).';
		END IF;
	END IF;
	SELECT pg_catalog.string_agg(net._urlencode(e.key) OPERATOR(pg_catalog.||) '='
								 OPERATOR(pg_catalog.||) net._urlencode(e.value), '&')
	  INTO query
	  FROM pg_catalog.jsonb_each_text(COALESCE(jobflow_request.params, '{}'::jsonb)) AS e(key, value)
	 WHERE e.value IS NOT NULL;		/* pg_net leaves out a param whose value is null */
	/*
	 * As curl's URL API appends them for pg_net: to the query, before any
	 * fragment (a fragment is never sent: params after it would be lost),
	 * with "&" unless the query is empty or ends with one.
	 */
	u := jobflow_request.url;
	IF query IS NOT NULL AND u IS NOT NULL THEN
		hash := pg_catalog.strpos(u, '#');
		IF hash OPERATOR(pg_catalog.>) 0 THEN
			fragment := pg_catalog.substr(u, hash);
			u := pg_catalog.left(u, hash OPERATOR(pg_catalog.-) 1);
		END IF;
		u := u OPERATOR(pg_catalog.||)
			 CASE WHEN pg_catalog.strpos(u, '?') OPERATOR(pg_catalog.=) 0 THEN '?'
				  WHEN pg_catalog.right(u, 1) OPERATOR(pg_catalog.=) ANY ('{?,&}'::text[]) THEN ''
				  ELSE '&' END
			 OPERATOR(pg_catalog.||) query OPERATOR(pg_catalog.||) fragment;
	END IF;
	r := pg_catalog.jsonb_build_object(
		'url', u,
		'method', m,
		'headers', h,
		'timeout_ms', jobflow_request.timeout_milliseconds);
	IF jobflow_request.body IS NOT NULL THEN
		r := r OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('body', jobflow_request.body);
	END IF;
	RETURN r;
END
$$;

/*
 * Schedules what net.jobflow_request() says, in the caller's queue "net",
 * with jobflow.net_max_attempts attempts (1 unless a superuser set more for
 * the role, the database or the server).  jobflow.schedule() checks the task
 * and its owner.
 */
CREATE FUNCTION net._schedule(request jsonb)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	RETURN jobflow.schedule(
		url => request OPERATOR(pg_catalog.->>) 'url',
		method => request OPERATOR(pg_catalog.->>) 'method',
		headers => request OPERATOR(pg_catalog.->) 'headers',
		body => request OPERATOR(pg_catalog.->) 'body',
		timeout_ms => (request OPERATOR(pg_catalog.->>) 'timeout_ms')::integer,
		max_attempts => COALESCE(NULLIF(pg_catalog.current_setting('jobflow.net_max_attempts', true), '')::integer, 1),
		queue => 'net');
END
$$;

/* pg_net's net.http_get: a GET, params appended to the url's query */
CREATE FUNCTION net.http_get(
	url text,
	params jsonb DEFAULT '{}'::jsonb,
	headers jsonb DEFAULT '{}'::jsonb,
	timeout_milliseconds integer DEFAULT 5000)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT net._schedule(net.jobflow_request('GET', url, params, headers, NULL, timeout_milliseconds))
$$;

/* pg_net's net.http_post: a POST of a JSON body */
CREATE FUNCTION net.http_post(
	url text,
	body jsonb DEFAULT '{}'::jsonb,
	params jsonb DEFAULT '{}'::jsonb,
	headers jsonb DEFAULT '{"Content-Type": "application/json"}'::jsonb,
	timeout_milliseconds integer DEFAULT 5000)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT net._schedule(net.jobflow_request('POST', url, params, headers, body, timeout_milliseconds))
$$;

/* pg_net's net.http_delete: a DELETE, with an optional JSON body */
CREATE FUNCTION net.http_delete(
	url text,
	params jsonb DEFAULT '{}'::jsonb,
	headers jsonb DEFAULT '{}'::jsonb,
	timeout_milliseconds integer DEFAULT 5000,
	body jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT net._schedule(net.jobflow_request('DELETE', url, params, headers, body, timeout_milliseconds))
$$;

/*
 * pg_net's response table, as a view of the caller's finished tasks of
 * queue "net" (pending and running ones have no response yet, as in
 * pg_net; a cancelled one has error_msg "cancelled", so that whoever
 * waits for it stops).  The last attempt's log row gives the answer; a task whose
 * success left no log row (quiet logging) gives its status from its own
 * row.  An HTTP answer of any status is a response (error_msg NULL), as
 * in pg_net; error_msg is set when there was none (timeout, refused
 * connection, address denied).  jobflow keeps neither the response's
 * headers nor its content type (NULL here), and only the first
 * jobflow.max_response_size bytes of its body.  The WHERE clause repeats
 * what jobflow's row-level security gives the caller (needed on 14, where
 * the view reads as its owner).
 */
CREATE VIEW net._http_response WITH (security_invoker = true) AS
SELECT t.id,
	   a.status_code,
	   NULL::text AS content_type,
	   NULL::jsonb AS headers,
	   CASE WHEN a.status_code IS NOT NULL THEN NULLIF(a.response, '') END AS content,
	   COALESCE(a.status_code IS NULL
				AND a.error OPERATOR(pg_catalog.~*) 'timed out|timeout', false) AS timed_out,
	   CASE WHEN a.status_code IS NULL THEN COALESCE(a.error, t.state::text) END AS error_msg,
	   a.finished_at AS created
  FROM jobflow.tasks t
 CROSS JOIN LATERAL (
	SELECT CASE WHEN l.task_id IS NULL THEN t.last_status ELSE l.http_status END AS status_code,
		   CASE WHEN l.task_id IS NULL THEN t.last_error ELSE l.error END AS error,
		   l.response,
		   COALESCE(l.finished_at, t.updated_at) AS finished_at
	  FROM (SELECT 1) AS one
	  LEFT JOIN LATERAL (
		SELECT g.task_id, g.http_status, g.error, g.response, g.finished_at
		  FROM jobflow.task_log g
		 WHERE g.task_id OPERATOR(pg_catalog.=) t.id
		 ORDER BY g.attempt DESC
		 LIMIT 1) AS l ON true) AS a
 WHERE t.queue OPERATOR(pg_catalog.=) 'net'
   AND t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,failed,cancelled}'::jobflow.task_state[])
   AND (pg_catalog.pg_has_role(t.owner::oid, 'USAGE')
		OR pg_catalog.pg_has_role('jobflow_admin', 'USAGE'));

/* pg_net's private wait: until request_id has a response */
CREATE FUNCTION net._await_response(request_id bigint)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	WHILE NOT EXISTS (SELECT 1 FROM net._http_response r
					   WHERE r.id OPERATOR(pg_catalog.=) _await_response.request_id) LOOP
		PERFORM pg_catalog.pg_sleep(0.05);
	END LOOP;
	RETURN true;
END
$$;

/*
 * pg_net's net._http_collect_response: SUCCESS with the response once
 * there is one; ERROR with error_msg when the request got no answer, or
 * with pg_net's "request matching request_id not found" while it has
 * none yet (or is not the caller's).  async => false waits for it.
 */
CREATE FUNCTION net._http_collect_response(
	request_id bigint,
	async boolean DEFAULT true)
RETURNS net.http_response_result
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	rec record;
BEGIN
	IF NOT _http_collect_response.async THEN
		PERFORM net._await_response(_http_collect_response.request_id);
	END IF;
	SELECT r.status_code, r.headers, r.content, r.error_msg INTO rec
	  FROM net._http_response r
	 WHERE r.id OPERATOR(pg_catalog.=) _http_collect_response.request_id;
	IF NOT FOUND OR rec.error_msg IS NOT NULL THEN
		RETURN ROW('ERROR', COALESCE(rec.error_msg, 'request matching request_id not found'),
				   NULL)::net.http_response_result;
	END IF;
	RETURN ROW('SUCCESS', 'ok',
			   ROW(rec.status_code, rec.headers, rec.content)::net.http_response)::net.http_response_result;
END
$$;

/* pg_net's deprecated name of net._http_collect_response() */
CREATE FUNCTION net.http_collect_response(
	request_id bigint,
	async boolean DEFAULT true)
RETURNS net.http_response_result
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	RAISE NOTICE 'The net.http_collect_response function is deprecated.';
	RETURN net._http_collect_response(http_collect_response.request_id, http_collect_response.async);
END
$$;

/*
 * Privileges.  pg_net grants its schema, tables and functions to PUBLIC;
 * here they go to jobflow's roles, as jobflow.schedule() and jobflow's
 * tables do: a role that may not schedule jobflow tasks could call the
 * functions only to be refused by jobflow.schedule().  Grant jobflow_user
 * to the roles that call net.http_*.
 */
REVOKE ALL ON SCHEMA net FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA net FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA net FROM PUBLIC;
REVOKE ALL ON TYPE net.request_status, net.http_response, net.http_response_result FROM PUBLIC;

/*
 * ALTER DEFAULT PRIVILEGES of the role that installs (GRANT SELECT ON
 * TABLES TO reporting, say) applies to what this script makes: as in
 * jobflow's own scripts, every privilege on schema net or an object in it
 * held by a role other than the owner is revoked, then jobflow's roles get
 * what is granted below, and nothing with GRANT OPTION.
 */
DO $grants$
DECLARE
	o record;
BEGIN
	FOR o IN
		SELECT DISTINCT x.kind, x.name, a.grantee
		  FROM (SELECT 'TABLE' AS kind, pg_catalog.format('net.%I', c.relname) AS name,
					   c.relacl AS acl, c.relowner AS owner
				  FROM pg_catalog.pg_class c
				 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'net'::pg_catalog.regnamespace
				   AND c.relkind OPERATOR(pg_catalog.<>) 'c'
				UNION ALL
				SELECT 'FUNCTION', pg_catalog.format('net.%I(%s)', p.proname,
													   pg_catalog.pg_get_function_identity_arguments(p.oid)),
					   p.proacl, p.proowner
				  FROM pg_catalog.pg_proc p
				 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'net'::pg_catalog.regnamespace
				UNION ALL
				SELECT 'TYPE', pg_catalog.format('net.%I', t.typname), t.typacl, t.typowner
				  FROM pg_catalog.pg_type t
				 WHERE t.typnamespace OPERATOR(pg_catalog.=) 'net'::pg_catalog.regnamespace
				   AND t.typcategory OPERATOR(pg_catalog.<>) 'A'
				   AND (t.typtype OPERATOR(pg_catalog.<>) 'c'
						OR t.typname OPERATOR(pg_catalog.<>) '_http_response')
				UNION ALL
				SELECT 'SCHEMA', 'net', n.nspacl, n.nspowner
				  FROM pg_catalog.pg_namespace n
				 WHERE n.nspname OPERATOR(pg_catalog.=) 'net'::pg_catalog.name) x,
			   pg_catalog.aclexplode(x.acl) a
		 WHERE a.grantee OPERATOR(pg_catalog.<>) x.owner
	LOOP
		EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s', o.kind, o.name,
								  CASE WHEN o.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
									   ELSE pg_catalog.quote_ident(o.grantee::pg_catalog.regrole::pg_catalog.text) END);
	END LOOP;
END
$grants$;

GRANT USAGE ON SCHEMA net TO jobflow_user, jobflow_admin;
GRANT USAGE ON TYPE net.request_status, net.http_response, net.http_response_result
	TO jobflow_user, jobflow_admin;
GRANT SELECT ON net._http_response TO jobflow_user, jobflow_admin;
GRANT EXECUTE ON FUNCTION
	net._urlencode(text),
	net.jobflow_request(text, text, jsonb, jsonb, jsonb, integer),
	net._schedule(jsonb),
	net.http_get(text, jsonb, jsonb, integer),
	net.http_post(text, jsonb, jsonb, jsonb, integer),
	net.http_delete(text, jsonb, jsonb, integer, jsonb),
	net._await_response(bigint),
	net._http_collect_response(bigint, boolean),
	net.http_collect_response(bigint, boolean)
	TO jobflow_user, jobflow_admin;

COMMENT ON TYPE net.request_status IS 'pg_net''s state of a collected request: SUCCESS (a response), ERROR (none, or not yet); PENDING is never returned, as in pg_net';
COMMENT ON TYPE net.http_response IS 'pg_net''s response: status code, headers (NULL: jobflow does not keep them), body';
COMMENT ON TYPE net.http_response_result IS 'what net._http_collect_response() returns: status, message and response';
COMMENT ON FUNCTION net._urlencode(text) IS 'percent-encodes a param''s key or value as pg_net does in the query it sends';
COMMENT ON FUNCTION net.jobflow_request(text, text, jsonb, jsonb, jsonb, integer) IS 'the jobflow task a pg_net call (method, url, params, headers, body, timeout_milliseconds) stands for, as jobflow.schedule()''s arguments in a jsonb object; makes nothing';
COMMENT ON FUNCTION net._schedule(jsonb) IS 'schedules a net.jobflow_request() in the caller''s queue "net" with jobflow.net_max_attempts attempts; returns the task id';
COMMENT ON FUNCTION net.http_get(text, jsonb, jsonb, integer) IS 'pg_net''s GET: schedules a jobflow task, due at once, in the caller''s transaction; returns its id';
COMMENT ON FUNCTION net.http_post(text, jsonb, jsonb, jsonb, integer) IS 'pg_net''s POST of a JSON body: schedules a jobflow task, due at once, in the caller''s transaction; returns its id';
COMMENT ON FUNCTION net.http_delete(text, jsonb, jsonb, integer, jsonb) IS 'pg_net''s DELETE: schedules a jobflow task, due at once, in the caller''s transaction; returns its id';
COMMENT ON VIEW net._http_response IS 'pg_net''s responses: the caller''s finished tasks of queue "net", one row each (headers and content_type NULL, content cut at jobflow.max_response_size)';
COMMENT ON COLUMN net._http_response.id IS 'the request id net.http_* returned: the jobflow task id';
COMMENT ON COLUMN net._http_response.timed_out IS 'true when the last attempt timed out without an answer';
COMMENT ON COLUMN net._http_response.error_msg IS 'why there is no response (NULL when the receiver answered, with any status)';
COMMENT ON COLUMN net._http_response.created IS 'when the last attempt finished';
COMMENT ON FUNCTION net._await_response(bigint) IS 'waits until the request has a response (pg_net''s private wait)';
COMMENT ON FUNCTION net._http_collect_response(bigint, boolean) IS 'pg_net''s result of a request: SUCCESS with the response, or ERROR with why not (async => false waits)';
COMMENT ON FUNCTION net.http_collect_response(bigint, boolean) IS 'pg_net''s deprecated name of net._http_collect_response()';
