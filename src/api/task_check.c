/*-------------------------------------------------------------------------
 *
 * task_check.c
 *	  Row trigger on jobflow.tasks: validates every task that enters the
 *	  table, and holds every update to the task state machine
 *	  (task_state.c).
 *
 * Validation lives in a BEFORE ROW trigger rather than in schedule() so
 * that schedule(), a set-based INSERT ... SELECT and COPY are held to the
 * same rules: nothing invalid is ever stored, and an error leaves nothing
 * half-written because it aborts the statement.
 *
 * Error messages never echo a URL: a URL may carry secrets in its query
 * string, and errors end up in the server log.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "api/task_check.h"
#include "api/commit_wake.h"
#include "api/secrets.h"
#include "api/task_columns.h"
#include "api/task_state.h"
#include "api/tenant_api.h"
#include "api/triggers.h"
#include "api/url_check.h"
#include "base/settings.h"
#include "launcher/prepared.h"
#include "launcher/slots.h"

#define QUEUE_MAX_LENGTH	63
#define HEADER_NAME_MAX		256
#define TIMEOUT_MAX_MS		3600000
#define ATTEMPTS_MAX		1000
#define FLOW_KEY_MAX		512

static const char *const http_methods[] = {
	"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", NULL
};

/* Headers the dispatcher owns or that would break the request framing. */
static const char *const reserved_headers[] = {
	"host", "content-length", "transfer-encoding", "connection", "expect",
	"te", "trailer", "upgrade", "keep-alive", "proxy-connection",
	"proxy-authorization", "webhook-id", "webhook-timestamp", "webhook-signature",
	NULL
};

static void lookup_columns(Relation rel, JfTaskColumns *cols);
static void check_queue(const char *queue);
static void check_run_at(HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols);
static char *check_method(const char *method);
static void check_header_value(const char *what, const char *value, int len);
static void check_headers(Jsonb *headers, const char *content_type,
						  char **same_content_type, List **secret_refs);
static void check_task(HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols,
					   bool is_insert, Datum *repl, bool *repl_null, bool *replace);

static int
column_number(TupleDesc desc, const char *name)
{
	int			attnum = SPI_fnumber(desc, name);

	if (attnum <= 0)
		elog(ERROR, "jobflow.tasks has no column \"%s\"", name);
	return attnum;
}

/*
 * The columns that describe a request.  jobflow.cron_timers has them too
 * (a timer is a template for tasks) but no run_at and no state: those are
 * left 0 when optional is true.
 */
static void
lookup_request_columns(TupleDesc desc, JfTaskColumns *cols, bool optional)
{
	cols->url = column_number(desc, "url");
	cols->method = column_number(desc, "method");
	cols->headers = column_number(desc, "headers");
	cols->body = column_number(desc, "body");
	cols->content_type = column_number(desc, "content_type");
	cols->body_bytes = Max(SPI_fnumber(desc, "body_bytes"), 0);
	cols->max_attempts = column_number(desc, "max_attempts");
	cols->timeout_ms = column_number(desc, "timeout_ms");
	cols->queue = column_number(desc, "queue");
	cols->owner = column_number(desc, "owner");
	cols->updated_at = column_number(desc, "updated_at");
	cols->run_at = optional ? Max(SPI_fnumber(desc, "run_at"), 0) :
		column_number(desc, "run_at");
	cols->state = optional ? Max(SPI_fnumber(desc, "state"), 0) :
		column_number(desc, "state");
	cols->active = optional ? Max(SPI_fnumber(desc, "active"), 0) : 0;
}

/*
 * The trigger runs for every row of a bulk INSERT: look the columns up once
 * per relation, not once per row.  A cached entry stays right as long as
 * the relation and its number of attributes are the same.
 */
static void
lookup_columns(Relation rel, JfTaskColumns *cols)
{
	static Oid	cached_relid = InvalidOid;
	static int	cached_natts = 0;
	static JfTaskColumns cached;
	TupleDesc	desc = RelationGetDescr(rel);

	if (cached_relid != RelationGetRelid(rel) || cached_natts != desc->natts)
	{
		cached_relid = InvalidOid;
		lookup_request_columns(desc, &cached, false);
		cached.id = column_number(desc, "id");
		cached.attempts = column_number(desc, "attempts");
		cached.attempts_base = Max(SPI_fnumber(desc, "attempts_base"), 0);
		cached.flow_key = Max(SPI_fnumber(desc, "flow_key"), 0);
		cached.flow_at = Max(SPI_fnumber(desc, "flow_at"), 0);
		cached_relid = RelationGetRelid(rel);
		cached_natts = desc->natts;
	}
	*cols = cached;
}

/*
 * Queue names are labels an operator reads in psql, in logs and in
 * Prometheus: printable characters only, no leading or trailing space.
 * Control characters (C0, DEL and, in UTF-8, C1) could rewrite a terminal
 * or forge log lines; in a SQL_ASCII database a byte over 0x7f is no
 * character at all, and one such name made the exporter fail every
 * tenant's queue figures of the database.
 */
static void
check_queue(const char *queue)
{
	const unsigned char *p = (const unsigned char *) queue;
	size_t		len = strlen(queue);

	for (; *p; p++)
	{
		if (*p < 0x20 || *p == 0x7f ||
			(GetDatabaseEncoding() == PG_UTF8 && p[0] == 0xc2 &&
			 p[1] >= 0x80 && p[1] <= 0x9f))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue name contains a control character at byte %d",
							(int) (p - (const unsigned char *) queue) + 1),
					 errdetail("A queue name has 1 to %d bytes of printable characters.",
							   QUEUE_MAX_LENGTH)));
		if (*p >= 0x80 && GetDatabaseEncoding() == PG_SQL_ASCII)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queue name contains a non-ASCII byte at byte %d",
							(int) (p - (const unsigned char *) queue) + 1),
					 errdetail("In a SQL_ASCII database a queue name has printable ASCII characters only.")));
	}
	if (queue[0] == ' ' || queue[len - 1] == ' ')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue name must not begin or end with a space")));
}

/* A task's queue name, or one naming a queue in jobflow.queues. */
void
jf_check_queue_name(text *name)
{
	if (name == NULL || VARSIZE_ANY_EXHDR(name) == 0 ||
		VARSIZE_ANY_EXHDR(name) > QUEUE_MAX_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queue name must have 1 to %d bytes", QUEUE_MAX_LENGTH)));
	check_queue(text_to_cstring(name));
}

/* RFC 9110 token characters, the only ones allowed in a header name. */
static bool
is_token_char(unsigned char c)
{
	return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Returns the method in upper case, the form sent on the wire. */
static char *
check_method(const char *method)
{
	int			i;

	for (i = 0; http_methods[i] != NULL; i++)
	{
		if (pg_strcasecmp(method, http_methods[i]) == 0)
			return pstrdup(http_methods[i]);
	}
	/* echo the method only when it cannot carry a line break into the log */
	for (i = 0; method[i] != '\0' && i <= 16; i++)
	{
		if (!is_token_char((unsigned char) method[i]))
			break;
	}
	if (method[i] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid HTTP method"),
				 errhint("Use one of GET, POST, PUT, PATCH, DELETE, HEAD or OPTIONS.")));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unsupported HTTP method \"%s\"", method),
			 errhint("Use one of GET, POST, PUT, PATCH, DELETE, HEAD or OPTIONS.")));
	return NULL;				/* keep compiler quiet */
}

/* A header value may hold visible characters, spaces and tabs only. */
static void
check_header_value(const char *what, const char *value, int len)
{
	int			i;

	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) value[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s contains a control character", what),
					 errdetail("Carriage returns, line feeds and other control characters could inject headers.")));
	}
}

/*
 * A Content-Type header beside content_type is accepted when both say the
 * same (pg_net's habit of giving it as a header): *same_content_type is
 * then the header's name, for the caller to drop the copy.
 */
static void
check_headers(Jsonb *headers, const char *content_type, char **same_content_type,
			  List **secret_refs)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int64		total = 0;
	char	  **seen;
	int			nseen = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("headers must be a JSON object"),
				 errhint("Pass headers as {\"Name\": \"value\", ...}.")));

	/* every name, to refuse two that differ only in case */
	seen = palloc(Max(JB_ROOT_COUNT(headers), 1) * sizeof(char *));
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *name;
		int			i;

		if (tok != WJB_KEY)
			continue;
		name = pnstrdup(v.val.string.val, v.val.string.len);
		if (v.val.string.len == 0 || v.val.string.len > HEADER_NAME_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header name must have 1 to %d characters", HEADER_NAME_MAX)));
		for (i = 0; i < v.val.string.len; i++)
		{
			if (!is_token_char((unsigned char) name[i]))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid character in header name at position %d", i + 1),
						 errdetail("Header names may contain letters, digits and !#$%%&'*+-.^_`|~ only.")));
		}
		for (i = 0; reserved_headers[i] != NULL; i++)
		{
			if (pg_strcasecmp(name, reserved_headers[i]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header \"%s\" is set by jobflow and cannot be given", name)));
		}
		if (pg_strncasecmp(name, "x-jobflow-", 10) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("header \"%s\" is reserved for jobflow", name),
					 errdetail("Headers starting with X-Jobflow- identify the task and attempt to the receiver.")));
		for (i = 0; i < nseen; i++)
		{
			if (pg_strcasecmp(name, seen[i]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header \"%s\" is given more than once", name),
						 errdetail("Header names are case-insensitive: \"%s\" and \"%s\" name the same header.",
								   seen[i], name),
						 errhint("Give each header once; join several values with commas.")));
		}
		seen[nseen++] = name;
		total += v.val.string.len + 4;

		tok = JsonbIteratorNext(&it, &v, true);
		if (tok == WJB_VALUE && v.type == jbvBinary &&
			JsonContainerIsObject(v.val.binary.data))
		{
			/* {"secret": "<name>"}: the owner's secret, substituted when sent */
			JsonbValue *ref = getKeyJsonValueFromContainer(v.val.binary.data,
														   "secret", 6, NULL);

			if (ref == NULL || ref->type != jbvString ||
				JsonContainerSize(v.val.binary.data) != 1)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("value of header \"%s\" must be a JSON string or {\"secret\": \"name\"}",
								name)));
			*secret_refs = lappend(*secret_refs,
								   pnstrdup(ref->val.string.val, ref->val.string.len));
			total += ref->val.string.len;
			continue;
		}
		if (tok != WJB_VALUE || v.type != jbvString)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("value of header \"%s\" must be a JSON string", name),
					 errhint("A secret stored with jobflow.set_secret() is given as {\"secret\": \"name\"}.")));
		check_header_value(psprintf("value of header \"%s\"", name),
						   v.val.string.val, v.val.string.len);
		if (content_type != NULL && pg_strcasecmp(name, "content-type") == 0)
		{
			char	   *value = pnstrdup(v.val.string.val, v.val.string.len);

			if (pg_strcasecmp(value, content_type) != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("content type is given both as content_type and as a header, and they differ"),
						 errdetail("content_type is \"%s\"; the header says \"%s\".",
								   content_type, value),
						 errhint("Give it once.")));
			*same_content_type = name;
		}
		total += v.val.string.len;
	}

	if (total > jobflow_max_headers_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("headers are too large"),
				 errdetail("The headers take %lld bytes; jobflow.max_headers_size is %d bytes.",
						   (long long) total, jobflow_max_headers_size)));
}

static Datum
get_column(HeapTuple tuple, TupleDesc desc, int attnum, bool *isnull)
{
	return heap_getattr(tuple, attnum, desc, isnull);
}

/* Whether a task row is pending, or a timer row active. */
static bool
will_fire(HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols)
{
	bool		isnull;
	Datum		d;

	if (cols->state > 0)
	{
		d = get_column(tuple, desc, cols->state, &isnull);
		return !isnull && strcmp(DatumGetCString(DirectFunctionCall1(enum_out, d)), "pending") == 0;
	}
	if (cols->active > 0)
	{
		d = get_column(tuple, desc, cols->active, &isnull);
		return !isnull && DatumGetBool(d);
	}
	return false;
}

/*
 * Validate a task row; fill repl/replace with the normalised values
 * (method in upper case, headers defaulting to {}, owner defaulting to the
 * current role).  Who may insert a row for another role, or update a
 * row, is decided on insert and by row-level security (only a superuser
 * may change an owner); whether the owner may own tasks at all, whenever
 * the row is to go out (jf_check_owner_role).
 */
static void
check_task(HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols,
		   bool is_insert, Datum *repl, bool *repl_null, bool *replace)
{
	bool		isnull;
	Datum		d;
	bool		has_content_type;
	char	   *ct = NULL;
	List	   *secret_refs = NIL;
	Oid			owner;
	int32		i;

	d = get_column(tuple, desc, cols->url, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("callback URL must not be null")));
	jf_check_url(TextDatumGetCString(d));

	d = get_column(tuple, desc, cols->method, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("HTTP method must not be null")));
	{
		char	   *given = TextDatumGetCString(d);
		char	   *method = check_method(given);

		if (strcmp(method, given) != 0)
		{
			repl[cols->method - 1] = CStringGetTextDatum(method);
			replace[cols->method - 1] = true;
		}
	}

	if (cols->run_at > 0)
		check_run_at(tuple, desc, cols);

	d = get_column(tuple, desc, cols->content_type, &isnull);
	has_content_type = !isnull;
	if (!isnull)
	{
		ct = TextDatumGetCString(d);

		if (strlen(ct) == 0 || strlen(ct) > HEADER_NAME_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("content_type must have 1 to %d characters", HEADER_NAME_MAX)));
		check_header_value("content_type", ct, strlen(ct));
	}

	d = get_column(tuple, desc, cols->headers, &isnull);
	if (isnull)
	{
		repl[cols->headers - 1] = DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
		replace[cols->headers - 1] = true;
	}
	else
	{
		char	   *same = NULL;

		check_headers(DatumGetJsonbP(d), has_content_type ? ct : NULL, &same, &secret_refs);
		/* the same content type twice: content_type alone carries it */
		if (same != NULL)
		{
			repl[cols->headers - 1] = DirectFunctionCall2(jsonb_delete, d,
														  CStringGetTextDatum(same));
			replace[cols->headers - 1] = true;
		}
	}

	d = get_column(tuple, desc, cols->body, &isnull);
	if (!isnull)
	{
		Size		size = toast_raw_datum_size(d) - VARHDRSZ;

		if (size > (Size) jobflow_max_body_size)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("request body is too large"),
					 errdetail("The body has %zu bytes; jobflow.max_body_size is %d bytes.",
							   size, jobflow_max_body_size)));
	}

	if (cols->body_bytes > 0)
	{
		d = get_column(tuple, desc, cols->body_bytes, &isnull);
		if (!isnull)
		{
			Size		size = toast_raw_datum_size(d) - VARHDRSZ;

			if (size > (Size) jobflow_max_body_size)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("request body is too large"),
						 errdetail("The body has %zu bytes; jobflow.max_body_size is %d bytes.",
								   size, jobflow_max_body_size)));
		}
	}

	d = get_column(tuple, desc, cols->timeout_ms, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", "timeout_ms")));
	i = DatumGetInt32(d);
	if (i < 1 || i > TIMEOUT_MAX_MS)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("timeout_ms must be between 1 and %d", TIMEOUT_MAX_MS)));

	d = get_column(tuple, desc, cols->max_attempts, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", "max_attempts")));
	i = DatumGetInt32(d);
	if (i < 1 || i > ATTEMPTS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("max_attempts must be between 1 and %d", ATTEMPTS_MAX)));

	d = get_column(tuple, desc, cols->queue, &isnull);
	jf_check_queue_name(isnull ? NULL : DatumGetTextPP(d));

	d = get_column(tuple, desc, cols->owner, &isnull);
	owner = isnull ? GetUserId() : DatumGetObjectId(d);
	if (secret_refs != NIL)
	{
		bool		url_null;

		jf_check_secret_refs(secret_refs, owner,
							 TextDatumGetCString(get_column(tuple, desc, cols->url, &url_null)));
	}
	/*
	 * An owner every tenant holds is refused whenever the row is to go
	 * out: inserted, or left pending (a redrive, a reschedule) or, for a
	 * timer, active by an update; cancelling or pausing such a row stays
	 * possible.  The worker writes only rows checked before.
	 */
	if (!jf_am_worker && (is_insert || will_fire(tuple, desc, cols)))
		jf_check_owner_role(owner);
	if (!is_insert)
		return;
	if (isnull)
	{
		repl[cols->owner - 1] = ObjectIdGetDatum(GetUserId());
		replace[cols->owner - 1] = true;
	}
	else if (!has_privs_of_role(GetUserId(), DatumGetObjectId(d)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to schedule a task for role \"%s\"",
						GetUserNameFromId(DatumGetObjectId(d), true) ?
						GetUserNameFromId(DatumGetObjectId(d), true) : "?")));
}

/* The run_at rules of check_task, for updates that leave the request alone. */
static void
check_run_at(HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols)
{
	bool		isnull;
	Datum		d = get_column(tuple, desc, cols->run_at, &isnull);

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("run_at must not be null"),
				 errhint("Omit run_at to run the task now.")));
	if (TIMESTAMP_NOT_FINITE(DatumGetTimestampTz(d)))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("run_at must be a finite timestamp")));
}

/*
 * The request checks of tasks, for any row that carries the same columns
 * (jobflow.cron_timers): one set of rules for a task and for the timer
 * that will create tasks, so a timer never produces a task the table would
 * refuse.  Normalised values go to repl/replace, as in the trigger below.
 */
void
jf_check_request_row(HeapTuple tuple, TupleDesc desc, bool is_insert,
						  Datum *repl, bool *repl_null, bool *replace)
{
	JfTaskColumns cols;

	lookup_request_columns(desc, &cols, true);
	check_task(tuple, desc, &cols, is_insert, repl, repl_null, replace);
}

/*
 * A task's flow key (FLOW_KEY_MAX bytes at most, like a key) and its place
 * in the key's order, flow_at: the run_at it was scheduled for, moved by a
 * tenant's reschedule or replace of the pending task, never by the
 * worker's retry (running to pending) nor by a redrive (failed to
 * pending), so that a retried or redriven task keeps its place before the
 * key's later tasks.  An insert that gives flow_at keeps it (a restore);
 * one that does not takes run_at.  NULL for a task without a key.
 */
static void
check_flow(HeapTuple oldtup, HeapTuple tuple, TupleDesc desc, JfTaskColumns *cols,
		   Datum *repl, bool *repl_null, bool *replace)
{
	bool		key_null;
	bool		at_null;
	bool		isnull;
	Datum		key;
	Datum		run_at;
	bool		set;

	if (cols->flow_key == 0 || cols->flow_at == 0)
		return;
	key = get_column(tuple, desc, cols->flow_key, &key_null);
	(void) get_column(tuple, desc, cols->flow_at, &at_null);
	if (key_null)
	{
		if (!at_null)
		{
			repl_null[cols->flow_at - 1] = true;
			replace[cols->flow_at - 1] = true;
		}
		return;
	}
	if (oldtup == NULL)
	{
		int			len = VARSIZE_ANY_EXHDR(DatumGetPointer(key));

		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("flow_key must not be empty"),
					 errhint("NULL means no flow key.")));
		if (len > FLOW_KEY_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("flow_key is too long"),
					 errdetail("It has %d bytes; the limit is %d.", len, FLOW_KEY_MAX)));
		/*
		 * Kept when given: only a restore's COPY can give it (no tenant
		 * may insert the column), and a task that waited for its retry
		 * must come back before its key's later tasks.
		 */
		set = at_null;
	}
	else
	{
		bool		old_null;
		Datum		old_key = get_column(oldtup, desc, cols->flow_key, &old_null);
		Datum		old_run_at = get_column(oldtup, desc, cols->run_at, &isnull);
		bool		was_pending = strcmp(jf_task_state_name(get_column(oldtup, desc, cols->state, &isnull)),
										 "pending") == 0;
		bool		is_pending = strcmp(jf_task_state_name(get_column(tuple, desc, cols->state, &isnull)),
										"pending") == 0;

		run_at = get_column(tuple, desc, cols->run_at, &isnull);
		set = at_null || old_null ||
			!datumIsEqual(old_key, key, false, -1) ||
			(!jf_am_worker && was_pending && is_pending &&
			 DatumGetTimestampTz(old_run_at) != DatumGetTimestampTz(run_at));
	}
	if (!set)
		return;
	run_at = replace[cols->run_at - 1] ? repl[cols->run_at - 1] :
		get_column(tuple, desc, cols->run_at, &isnull);
	repl[cols->flow_at - 1] = run_at;
	repl_null[cols->flow_at - 1] = false;
	replace[cols->flow_at - 1] = true;
}

PG_FUNCTION_INFO_V1(jobflow_task_check);
Datum
jobflow_task_check(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	TupleDesc	desc;
	HeapTuple	tuple;
	HeapTuple	result;
	JfTaskColumns cols;
	Datum	   *repl;
	bool	   *repl_null;
	bool	   *replace;
	bool		is_insert;
	bool		pending;
	bool		isnull;
	int			i;

	jf_require_trigger(fcinfo, "jobflow._task_check", true, true, "tasks");

	desc = trigdata->tg_relation->rd_att;
	lookup_columns(trigdata->tg_relation, &cols);
	is_insert = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event);
	tuple = is_insert ? trigdata->tg_trigtuple : trigdata->tg_newtuple;

	repl = palloc0(desc->natts * sizeof(Datum));
	repl_null = palloc0(desc->natts * sizeof(bool));
	replace = palloc0(desc->natts * sizeof(bool));

	if (!is_insert)
	{
		if (jf_task_check_transition(trigdata->tg_trigtuple, tuple, desc, &cols))
			jf_task_redrive(trigdata->tg_trigtuple, desc, &cols, repl, replace);
		repl[cols.updated_at - 1] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		replace[cols.updated_at - 1] = true;
	}

	/* a pending task is about to be fired: hold it to the rules again */
	pending = strcmp(jf_task_state_name(get_column(tuple, desc, cols.state, &isnull)), "pending") == 0;
	if (is_insert ||
		(pending && jf_task_request_changed(trigdata->tg_trigtuple, tuple, desc, &cols)))
		check_task(tuple, desc, &cols, is_insert, repl, repl_null, replace);
	else if (pending)
	{
		check_run_at(tuple, desc, &cols);
		/* a redrive or a reschedule sends it: its owner too is checked */
		if (!jf_am_worker)
			jf_check_owner_role(DatumGetObjectId(get_column(tuple, desc, cols.owner, &isnull)));
	}

	check_flow(is_insert ? NULL : trigdata->tg_trigtuple, tuple, desc, &cols,
			   repl, repl_null, replace);

	result = tuple;
	for (i = 0; i < desc->natts; i++)
	{
		if (replace[i])
		{
			result = heap_modify_tuple(tuple, desc, repl, repl_null, replace);
			break;
		}
	}
	if (pending)
		jf_announce_task(DatumGetInt64(get_column(result, desc, cols.id, &isnull)),
						 DatumGetTimestampTz(get_column(result, desc, cols.run_at, &isnull)));
	return PointerGetDatum(result);
}
