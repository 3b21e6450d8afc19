/*-------------------------------------------------------------------------
 *
 * explain.c
 *	  jobflow.explain(id) and jobflow.explain_cron(name): why a task or a
 *	  cron timer is where it is, in plain words with the figures.
 *
 * Each returns one row per reason that applies, (reason, explanation),
 * the one that holds the task first: reason is a short code a script can
 * test, explanation a sentence for a person.  Everything is read as the
 * caller, through SPI and row-level security: a task the caller cannot
 * see is explained exactly as one that does not exist.  Of other tenants
 * nothing is shown but the aggregate load of the origin the task's own
 * URL names, as the workers publish it (api/metrics.c), and the state of
 * the workers of this database; never their tasks, URLs, queues or
 * owners, and of the caller's own tasks only counts.
 *
 * What the worker's fair share does is not published per task; the
 * reasons for a due task that waits are read from what is: the queue's
 * row, the caller's own running and due tasks, the origin's load, and the
 * settings the fair share applies (core/fair.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "api/circuits.h"
#include "api/cron.h"
#include "api/metrics.h"
#include "base/compat.h"
#include "base/settings.h"
#include "core/fair.h"
#include "launcher/slots.h"

/* the caller's due tasks looked at to count those ahead of one */
#define AHEAD_MAX 100000
#define AHEAD_BATCH 1000

typedef struct Out
{
	Tuplestorestate *store;
	TupleDesc	desc;
	const char *prefix;			/* before each explanation, or "" */
} Out;

/* One task as the caller sees it. */
typedef struct Task
{
	int64		id;
	char	   *state;
	TimestampTz run_at;
	int32		attempts;
	int32		max_attempts;
	char	   *queue;
	Oid			owner;
	char	   *owner_name;		/* NULL when the role no longer exists */
	char	   *url;
	TimestampTz updated_at;
	bool		has_status;
	int32		last_status;
	char	   *last_error;
	bool		from_cron;
	int32		timeout_ms;
	char	   *flow_key;		/* NULL: none */
	TimestampTz flow_at;
	int64		route;			/* which worker fires it (worker/state.h) */
} Task;

static void
add_row(Out *out, const char *reason, const char *fmt,...) pg_attribute_printf(3, 4);

/* One row of the answer. */
static void
add_row(Out *out, const char *reason, const char *fmt,...)
{
	StringInfoData buf;
	Datum		values[2];
	bool		nulls[2] = {false, false};

	initStringInfo(&buf);
	appendStringInfoString(&buf, out->prefix);
	for (;;)
	{
		va_list		args;
		int			needed;

		va_start(args, fmt);
		needed = appendStringInfoVA(&buf, fmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&buf, needed);
	}
	values[0] = CStringGetTextDatum(reason);
	values[1] = CStringGetTextDatum(buf.data);
	tuplestore_putvalues(out->store, out->desc, values, nulls);
	pfree(buf.data);
}

/* A time to the second, as the session shows timestamps. */
static char *
fmt_ts(TimestampTz t)
{
	if (!TIMESTAMP_NOT_FINITE(t))
		t -= t % USECS_PER_SEC;
	return pstrdup(timestamptz_to_str(t));
}

/* A duration in the two largest units that matter: "29 min 12 s". */
static char *
fmt_dur(int64 us)
{
	int64		s;

	if (us < 0)
		us = -us;
	if (us < 10 * USECS_PER_SEC)
		return psprintf("%.1f s", (double) us / USECS_PER_SEC);
	s = us / USECS_PER_SEC;
	if (s < 60)
		return psprintf("%d s", (int) s);
	if (s < 3600)
		return psprintf("%d min %d s", (int) (s / 60), (int) (s % 60));
	if (s < 86400)
		return psprintf("%d h %d min", (int) (s / 3600), (int) (s % 3600 / 60));
	return psprintf("%lld d %d h", (long long) (s / 86400), (int) (s % 86400 / 3600));
}

/* A unix-milliseconds time (as the workers publish them) as timestamptz. */
static TimestampTz
jf_ms_ts(int64 ms)
{
	return ms * 1000 - (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

/* A string as a SQL literal, for the calls a hint suggests. */
static char *
lit(const char *s)
{
	return quote_literal_cstr(s);
}

static char *
get_text(int row, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static Datum
get_datum(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * Whether jobflow.tasks has flow keys (0.3.0): explain() of this library
 * may run over a schema not updated yet.
 */
static bool
has_flow_keys(void)
{
	Oid			nsp = get_namespace_oid("jobflow", true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid("tasks", nsp) : InvalidOid;

	return OidIsValid(rel) && get_attnum(rel, "flow_key") != InvalidAttrNumber;
}

/*
 * The task of that id, as the caller sees it (row-level security), or
 * false; in the SPI connection the caller made.
 */
static bool
read_task(int64 id, Task *t)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};
	bool		isnull;
	Datum		d;

	if (SPI_execute_with_args(psprintf("SELECT t.id, t.state::pg_catalog.text, t.run_at, t.attempts,"
									   "       t.max_attempts, t.queue, t.owner::pg_catalog.oid,"
									   "       (SELECT r.rolname::pg_catalog.text FROM pg_catalog.pg_roles r"
									   "         WHERE r.oid OPERATOR(pg_catalog.=) t.owner::pg_catalog.oid),"
									   "       t.url, t.updated_at, t.last_status, t.last_error,"
									   "       t.cron_id IS NOT NULL, t.timeout_ms, %s"
									   "  FROM jobflow.tasks t WHERE t.id OPERATOR(pg_catalog.=) $1",
									   has_flow_keys() ?
									   "t.flow_key, t.flow_at,"
									   " CASE WHEN t.flow_key IS NULL THEN t.id"
									   "      ELSE pg_catalog.hashtext(t.flow_key)::pg_catalog.int8 END" :
									   "NULL::pg_catalog.text, NULL::pg_catalog.timestamptz, t.id"),
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the task");
	if (SPI_processed == 0)
		return false;
	t->id = DatumGetInt64(get_datum(0, 1, &isnull));
	t->state = get_text(0, 2);
	t->run_at = DatumGetTimestampTz(get_datum(0, 3, &isnull));
	t->attempts = DatumGetInt32(get_datum(0, 4, &isnull));
	t->max_attempts = DatumGetInt32(get_datum(0, 5, &isnull));
	t->queue = get_text(0, 6);
	t->owner = DatumGetObjectId(get_datum(0, 7, &isnull));
	t->owner_name = get_text(0, 8);
	t->url = get_text(0, 9);
	t->updated_at = DatumGetTimestampTz(get_datum(0, 10, &isnull));
	d = get_datum(0, 11, &isnull);
	t->has_status = !isnull;
	t->last_status = isnull ? 0 : DatumGetInt32(d);
	t->last_error = get_text(0, 12);
	t->from_cron = DatumGetBool(get_datum(0, 13, &isnull));
	t->timeout_ms = DatumGetInt32(get_datum(0, 14, &isnull));
	t->flow_key = get_text(0, 15);
	d = get_datum(0, 16, &isnull);
	t->flow_at = isnull ? 0 : DatumGetTimestampTz(d);
	t->route = DatumGetInt64(get_datum(0, 17, &isnull));
	return true;
}

/* "HTTP 503" or the error, or both, of an outcome. */
static char *
fmt_outcome(bool has_status, int32 status, const char *error)
{
	/* the worker's error for a status that is not 2xx says no more */
	if (has_status && error != NULL &&
		strcmp(error, psprintf("HTTP status %d", status)) != 0)
		return psprintf("HTTP %d (%s)", status, error);
	if (has_status)
		return psprintf("HTTP %d", status);
	if (error != NULL)
		return pstrdup(error);
	return pstrdup("no answer recorded");
}

/* ", owner => 'role'" when the caller acts on another role's queue */
static char *
owner_arg(const Task *t)
{
	if (t->owner_name == NULL || t->owner == GetUserId())
		return "";
	return psprintf(", owner => %s", lit(quote_identifier(t->owner_name)));
}

/* Why a held worker claims nothing, by JfHeldReason: reason code, sentence. */
static const struct
{
	const char *code;
	const char *explanation;
}			held_explained[JF_HELD_REASONS] = {
	[JF_HELD_SWITCH] = {"dispatch_off",
		"jobflow.dispatch is off on this server: no worker claims anything until a superuser sets it to auto or on (ALTER SYSTEM SET jobflow.dispatch = auto; SELECT pg_reload_conf())"},
	[JF_HELD_SUBSCRIPTION] = {"subscription",
		"the worker of this database is held: the database receives jobflow's tables by logical replication and jobflow.dispatch is auto, so the publisher's worker fires them (set jobflow.dispatch = on to fire them here)"},
	[JF_HELD_RESTORE] = {"restore",
		"the worker of this database is held: a restore of jobflow's tables is in progress (it ends with the restoring session, or at its DISCARD ALL)"},
	[JF_HELD_SEQUENCE] = {"sequence",
		"the worker of this database is held: a sequence of jobflow is behind its table's ids (as after a restore that left the sequences out); setval() it past the largest id"},
	[JF_HELD_UPDATE] = {"update",
		"the worker of this database is held: it waits for ALTER EXTENSION jobflow UPDATE (the library installed is newer than this database's schema)"},
};

/*
 * The worker(s) of this database, for a pending task: none at all, or the
 * one that owns this task not running (which of a database's workers owns
 * a task is worker/state.h's rule: a cron occurrence the first, any other
 * by its id, or the hash of its flow key, modulo their number), or held,
 * and why.  True if something holds it.
 */
static bool
explain_workers(Out *out, const Task *t, JfSlot **slot)
{
	JfSlot	   *slots[JF_MAX_WORKERS_PER_DB];
	int			n = jobflow_workers_per_database;
	int			part = t->from_cron || n <= 1 ? 0 : (int) (((t->route % n) + n) % n);
	JfSlot	   *s;
	pid_t		pid = 0;
	uint64		held;
	const char *name;

	(void) jf_db_slots(MyDatabaseId, slots);
	s = slots[part];
	*slot = NULL;
	if (s != NULL)
	{
		SpinLockAcquire(&s->mutex);
		pid = s->dboid == MyDatabaseId ? s->worker_pid : 0;
		SpinLockRelease(&s->mutex);
	}
	if (pid == 0)
	{
		bool		launcher_up;
		int			served = jf_databases_served(&launcher_up);
		bool		isnull;
		bool		servable = true;

		if (SPI_execute("SELECT d.datallowconn AND NOT d.datistemplate"
						"  FROM pg_catalog.pg_database d"
						" WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()",
						true, 1) == SPI_OK_SELECT && SPI_processed == 1)
			servable = DatumGetBool(get_datum(0, 1, &isnull));

		if (!servable)
			add_row(out, "no_worker",
					"no worker serves this database: it is a template or does not allow connections, and jobflow serves no such database");
		else if (!launcher_up)
			add_row(out, "no_worker",
					"no worker serves this database: jobflow's launcher is not running (see the server log)");
		else if (s == NULL && served >= jobflow_max_databases)
			add_row(out, "no_worker",
					"no worker serves this database: %d databases have one already, the limit (jobflow.max_databases) is %d",
					served, jobflow_max_databases);
		else if (s == NULL)
			add_row(out, "no_worker",
					"no worker serves this database yet: the launcher gives one to each database with jobflow within a few seconds");
		else if (n > 1)
			add_row(out, "no_worker",
					"worker %d of the %d of this database, the one that fires this task, is not running: it is starting, or it stopped (see the server log; the launcher starts it again)",
					part + 1, n);
		else
			add_row(out, "no_worker",
					"the worker of this database is not running: it is starting, or it stopped (see the server log; the launcher starts it again)");
		return true;
	}

	*slot = s;
	held = pg_atomic_read_u64(&s->held);
	if (held == JF_HELD_NO || held >= JF_HELD_REASONS || jf_held_names[held] == NULL)
		return false;
	name = jf_held_names[held];
	if (held_explained[held].code != NULL)
		add_row(out, held_explained[held].code, "%s", held_explained[held].explanation);
	else
	{
		/* a reason added later: its name, as worker_status() shows it */
		char	   *code = pstrdup(name);
		char	   *c;

		for (c = code; *c; c++)
			if (*c == ' ')
				*c = '_';
		add_row(out, code, "the worker of this database is held: %s", name);
	}
	return true;
}

/*
 * The caller's figures for a due task: of the task's owner, the due
 * tasks ahead of it (of its queue, and to its origin) and the running
 * ones (of its queue).  All are rows the caller sees.
 */
typedef struct Load
{
	int64		ahead_queue;
	int64		ahead_origin;
	bool		ahead_capped;	/* more than AHEAD_MAX due tasks looked at */
	int64		running;
	int64		running_queue;
	int64		recent_queue;	/* of its queue, claimed within the window */
} Load;

static void
read_load(const Task *t, const char *origin, TimestampTz now, double rate_window_s, Load *l)
{
	Oid			types[5] = {REGROLEOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TEXTOID};
	Datum		values[5];
	bool		isnull;
	SPIPlanPtr	plan;
	Portal		cursor;
	int64		seen = 0;

	memset(l, 0, sizeof(Load));
	values[0] = ObjectIdGetDatum(t->owner);
	values[1] = TimestampTzGetDatum(now);
	values[2] = TimestampTzGetDatum(t->run_at);
	values[3] = Int64GetDatum(t->id);
	values[4] = CStringGetTextDatum(t->queue);

	/*
	 * The owner's due tasks ahead of this one, by due time (then id), at
	 * most AHEAD_MAX of them, read through a cursor a batch at a time: a
	 * URL has up to 8 kB, and 100,000 of them at once would be 800 MB.
	 */
	plan = SPI_prepare("SELECT t.queue OPERATOR(pg_catalog.=) $5, t.url"
					   "  FROM jobflow.tasks t"
					   " WHERE t.state OPERATOR(pg_catalog.=) 'pending'"
					   "   AND t.run_at OPERATOR(pg_catalog.<=) $2"
					   "   AND t.owner OPERATOR(pg_catalog.=) $1"
					   "   AND (t.run_at OPERATOR(pg_catalog.<) $3"
					   "        OR (t.run_at OPERATOR(pg_catalog.=) $3"
					   "            AND t.id OPERATOR(pg_catalog.<) $4))"
					   " LIMIT " CppAsString2(AHEAD_MAX) " + 1",
					   5, types);
	if (plan == NULL)
		elog(ERROR, "could not count the due tasks: %s", SPI_result_code_string(SPI_result));
	cursor = SPI_cursor_open(NULL, plan, values, NULL, true);
	for (;;)
	{
		uint64		i;

		SPI_cursor_fetch(cursor, true, AHEAD_BATCH);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
		{
			char		key[JF_FAIR_ORIGIN_MAX];
			char	   *url;

			if (++seen > AHEAD_MAX)
			{
				l->ahead_capped = true;
				break;
			}
			if (DatumGetBool(get_datum(i, 1, &isnull)))
				l->ahead_queue++;
			url = get_text(i, 2);
			if (origin != NULL && url != NULL &&
				jf_fair_origin(url, key, sizeof(key)) && strcmp(key, origin) == 0)
				l->ahead_origin++;
			if (url != NULL)
				pfree(url);
		}
		SPI_freetuptable(SPI_tuptable);
		if (l->ahead_capped)
			break;
	}
	SPI_cursor_close(cursor);
	SPI_freeplan(plan);

	/*
	 * Its running tasks, and those of its queue that went within the rate's
	 * window (claimed then: still running, or finished since).
	 */
	values[1] = TimestampTzGetDatum(now - (int64) (rate_window_s * USECS_PER_SEC));
	types[1] = TIMESTAMPTZOID;
	if (SPI_execute_with_args("SELECT pg_catalog.count(*),"
							  "       pg_catalog.count(*) FILTER (WHERE t.queue OPERATOR(pg_catalog.=) $5)"
							  "  FROM jobflow.tasks t"
							  " WHERE t.state OPERATOR(pg_catalog.=) 'running'"
							  "   AND t.owner OPERATOR(pg_catalog.=) $1",
							  5, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not count the running tasks");
	l->running = DatumGetInt64(get_datum(0, 1, &isnull));
	l->running_queue = DatumGetInt64(get_datum(0, 2, &isnull));
	if (rate_window_s > 0)
	{
		if (SPI_execute_with_args("SELECT pg_catalog.count(*) FROM jobflow.tasks t"
								  " WHERE t.owner OPERATOR(pg_catalog.=) $1"
								  "   AND t.queue OPERATOR(pg_catalog.=) $5"
								  "   AND t.state OPERATOR(pg_catalog.=) ANY ('{succeeded,failed}')"
								  "   AND t.updated_at OPERATOR(pg_catalog.>=) $2",
								  5, types, values, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not count the recent tasks");
		/* finished ones through tasks_finished_queue, running ones above */
		l->recent_queue = DatumGetInt64(get_datum(0, 1, &isnull)) + l->running_queue;
	}
}

/*
 * What the task's flow key holds, for a due pending task with a key: the
 * order of an ordered queue (the earliest earlier task of its key not
 * finished, or failed while dead letters block), the key's cap and rate.
 * The caller's own tasks only: a key is its owner's.  True when one holds.
 */
static bool
explain_key(Out *out, const Task *t, TimestampTz now, bool ordered, bool block,
			int32 cap, double rate)
{
	Oid			types[6] = {REGROLEOID, TEXTOID, TEXTOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID};
	Datum		values[6];
	bool		isnull;
	bool		holds = false;
	double		window = rate > 0 ? Max(1.0, 1.0 / rate) : 1.0;

	values[0] = ObjectIdGetDatum(t->owner);
	values[1] = CStringGetTextDatum(t->queue);
	values[2] = CStringGetTextDatum(t->flow_key);
	values[3] = TimestampTzGetDatum(t->flow_at);
	values[4] = Int64GetDatum(t->id);
	values[5] = TimestampTzGetDatum(now - (int64) (window * USECS_PER_SEC));
	if (ordered)
	{
		if (SPI_execute_with_args("SELECT p.id, p.state::pg_catalog.text FROM jobflow.tasks p"
								  " WHERE p.owner OPERATOR(pg_catalog.=) $1"
								  "   AND p.queue OPERATOR(pg_catalog.=) $2"
								  "   AND p.flow_key OPERATOR(pg_catalog.=) $3"
								  "   AND p.flow_key IS NOT NULL"
								  "   AND p.state OPERATOR(pg_catalog.=) ANY ('{pending,running,failed}')"
								  "   AND (p.flow_at, p.id) OPERATOR(pg_catalog.<) ($4, $5)"
								  "   AND (p.state OPERATOR(pg_catalog.<>) 'failed' OR $6 IS NULL)"
								  " ORDER BY p.flow_at, p.id LIMIT 1",
								  6, types, values, block ? "     n" : "      ", true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the task's flow key");
		if (SPI_processed == 1)
		{
			int64		before = DatumGetInt64(get_datum(0, 1, &isnull));
			char	   *state = get_text(0, 2);

			if (strcmp(state, "failed") == 0)
				add_row(out, "key_order",
						"waiting for task %lld, the earliest earlier task of its flow key \"%s\": it failed for good, and queue \"%s\" is ordered with dead_letter block; jobflow.retry(%lld) sends it again (then this key goes on)",
						(long long) before, t->flow_key, t->queue, (long long) before);
			else
				add_row(out, "key_order",
						"waiting for task %lld (%s), the earliest earlier task of its flow key \"%s\": queue \"%s\" is ordered, one task of a key at a time",
						(long long) before, state, t->flow_key, t->queue);
			holds = true;
		}
	}
	if (cap > 0 || rate > 0)
	{
		int64		running;
		int64		recent;

		if (SPI_execute_with_args("SELECT pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.=) 'running'),"
								  "       pg_catalog.count(*) FILTER (WHERE t.state OPERATOR(pg_catalog.<>) 'running'"
								  "                                    AND t.updated_at OPERATOR(pg_catalog.>=) $6)"
								  "  FROM jobflow.tasks t"
								  " WHERE t.owner OPERATOR(pg_catalog.=) $1"
								  "   AND t.queue OPERATOR(pg_catalog.=) $2"
								  "   AND t.flow_key OPERATOR(pg_catalog.=) $3"
								  "   AND t.flow_key IS NOT NULL"
								  "   AND t.state OPERATOR(pg_catalog.=) ANY ('{running,succeeded,failed}')"
								  "   AND t.id OPERATOR(pg_catalog.<>) $5",
								  6, types, values, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not count the flow key's requests");
		running = DatumGetInt64(get_datum(0, 1, &isnull));
		recent = DatumGetInt64(get_datum(0, 2, &isnull)) + running;
		if (cap > 0 && running >= cap)
		{
			add_row(out, "key_cap",
					"flow key \"%s\" has %lld request(s) in flight, its limit (max_concurrent_per_key of queue \"%s\") is %d",
					t->flow_key, (long long) running, t->queue, cap);
			holds = true;
		}
		if (rate > 0 && recent >= rate * window)
		{
			add_row(out, "key_rate",
					"flow key \"%s\" sends at most %g request(s) per second (max_per_second_per_key of queue \"%s\"), %lld went in the last %s",
					t->flow_key, rate, t->queue, (long long) recent,
					fmt_dur((int64) (window * USECS_PER_SEC)));
			holds = true;
		}
	}
	return holds;
}

/* " (more than N looked at)" when the count stopped short */
static const char *
capped(const Load *l)
{
	return l->ahead_capped ? psprintf(" (at least: the first %d were counted)", AHEAD_MAX) : "";
}

/*
 * Every reason of one task, into out; the task as the caller read it.
 */
static void
explain_task(Out *out, const Task *t)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		due = t->run_at <= now;
	Oid			types[2] = {REGROLEOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	bool		q_found = false;
	bool		q_paused = false;
	int32		q_max_concurrent = 0;
	double		q_max_per_second = 0;
	TimestampTz q_updated_at = 0;
	int32		q_key_cap = 0;
	double		q_key_rate = 0;
	bool		q_ordered = false;
	bool		q_block = true;
	char		origin_buf[JF_FAIR_ORIGIN_MAX];
	const char *origin = NULL;
	bool		held = false;
	JfSlot	   *worker = NULL;

	if (t->url != NULL && jf_fair_origin(t->url, origin_buf, sizeof(origin_buf)))
		origin = origin_buf;

	/* the owner is gone: nothing of it fires again */
	if (t->owner_name == NULL)
		add_row(out, "owner_dropped",
				"its owner (the role of OID %u) was dropped: its tasks never fire, and the worker cancels those still pending",
				t->owner);

	if (strcmp(t->state, "succeeded") == 0)
	{
		add_row(out, "succeeded", "succeeded at %s with %s, after %d attempt(s)",
				fmt_ts(t->updated_at),
				fmt_outcome(t->has_status, t->last_status, NULL), t->attempts);
		return;
	}
	if (strcmp(t->state, "failed") == 0)
	{
		add_row(out, "failed",
				"failed for good at %s after %d attempt(s) of %d: last %s; jobflow.retry(%lld) runs it again",
				fmt_ts(t->updated_at), t->attempts, t->max_attempts,
				fmt_outcome(t->has_status, t->last_status, t->last_error),
				(long long) t->id);
		return;
	}
	if (strcmp(t->state, "cancelled") == 0)
	{
		if (t->last_error != NULL)
			add_row(out, "cancelled", "cancelled at %s (%s); jobflow.retry(%lld) runs it again",
					fmt_ts(t->updated_at), t->last_error, (long long) t->id);
		else
			add_row(out, "cancelled", "cancelled at %s; jobflow.retry(%lld) runs it again",
					fmt_ts(t->updated_at), (long long) t->id);
		return;
	}
	if (strcmp(t->state, "running") == 0)
	{
		add_row(out, "running",
				"running since %s, for %s (attempt %d of %d); its request times out %s after it started",
				fmt_ts(t->updated_at), fmt_dur(now - t->updated_at), t->attempts, t->max_attempts,
				fmt_dur((int64) t->timeout_ms * 1000));
		return;
	}

	/* pending: when it is due first */
	if (!due && t->attempts > 0)
	{
		Oid			ltypes[1] = {INT8OID};
		Datum		lvalues[1] = {Int64GetDatum(t->id)};
		char	   *what = NULL;

		if (SPI_execute_with_args("SELECT l.attempt, l.finished_at, l.http_status, l.error"
								  "  FROM jobflow.task_log l"
								  " WHERE l.task_id OPERATOR(pg_catalog.=) $1"
								  " ORDER BY l.attempt DESC, l.finished_at DESC NULLS LAST LIMIT 1",
								  1, ltypes, lvalues, NULL, true, 1) == SPI_OK_SELECT &&
			SPI_processed == 1)
		{
			Datum		d = get_datum(0, 3, &isnull);
			bool		has_status = !isnull;
			int32		status = isnull ? 0 : DatumGetInt32(d);
			Datum		fin = get_datum(0, 2, &isnull);

			what = psprintf("attempt %d of %d failed%s%s with %s",
							DatumGetInt32(get_datum(0, 1, &isnull)), t->max_attempts,
							isnull ? "" : " at ",
							isnull ? "" : fmt_ts(DatumGetTimestampTz(fin)),
							fmt_outcome(has_status, status, get_text(0, 4)));
		}
		else
			what = psprintf("attempt %d of %d failed with %s", t->attempts, t->max_attempts,
							fmt_outcome(t->has_status, t->last_status, t->last_error));
		add_row(out, "retry_wait", "%s; the next attempt is at %s, in %s",
				what, fmt_ts(t->run_at), fmt_dur(t->run_at - now));
	}
	else if (!due)
		add_row(out, "not_due", "due in %s (at %s)", fmt_dur(t->run_at - now), fmt_ts(t->run_at));

	/* what holds every task of the database */
	held = explain_workers(out, t, &worker);

	/* its queue (the owner's row of jobflow.queues, if configured) */
	values[0] = ObjectIdGetDatum(t->owner);
	values[1] = CStringGetTextDatum(t->queue);
	if (SPI_execute_with_args(psprintf("SELECT q.paused, q.max_concurrent, q.max_per_second, q.updated_at,"
									   "       %s"
									   "  FROM jobflow.queues q"
									   " WHERE q.owner OPERATOR(pg_catalog.=) $1"
									   "   AND q.name OPERATOR(pg_catalog.=) $2",
									   t->flow_key != NULL ?
									   "q.max_concurrent_per_key, q.max_per_second_per_key, q.ordered,"
									   " q.dead_letter OPERATOR(pg_catalog.=) 'block'" :
									   "NULL::pg_catalog.int4, NULL::pg_catalog.float8, false, true"),
							  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the queue");
	if (SPI_processed == 1)
	{
		Datum		d;

		q_found = true;
		q_paused = DatumGetBool(get_datum(0, 1, &isnull));
		d = get_datum(0, 2, &isnull);
		q_max_concurrent = isnull ? 0 : DatumGetInt32(d);
		d = get_datum(0, 3, &isnull);
		q_max_per_second = isnull ? 0 : DatumGetFloat8(d);
		q_updated_at = DatumGetTimestampTz(get_datum(0, 4, &isnull));
		d = get_datum(0, 5, &isnull);
		q_key_cap = isnull ? 0 : DatumGetInt32(d);
		d = get_datum(0, 6, &isnull);
		q_key_rate = isnull ? 0 : DatumGetFloat8(d);
		q_ordered = DatumGetBool(get_datum(0, 7, &isnull));
		q_block = DatumGetBool(get_datum(0, 8, &isnull));
	}
	if (q_found && q_paused)
		add_row(out, "queue_paused",
				"queue \"%s\" is paused since %s; resume it with jobflow.resume_queue(%s%s)",
				t->queue, fmt_ts(q_updated_at), lit(t->queue), owner_arg(t));

	if (due && !held && !(q_found && q_paused))
	{
		Load		l;
		double		window = 0;
		JfHostShared hosts[JF_METRICS_TOP];
		int			nhosts = jf_busiest_origins(hosts);
		JfHostShared *host = NULL;
		int			i;
		bool		holds = false;
		JfCircuitShared circuit;
		uint64		in_flight = worker != NULL ? pg_atomic_read_u64(&worker->in_flight) : 0;

		if (q_max_per_second > 0)
			window = Max(1.0, 1.0 / q_max_per_second);
		read_load(t, origin, now, window, &l);
		for (i = 0; i < nhosts && origin != NULL; i++)
			if (strcmp(hosts[i].origin, origin) == 0)
				host = &hosts[i];

		/*
		 * An open circuit of (owner, origin) holds the task first, whatever
		 * the caps below say: an origin that keeps failing for this owner
		 * is left alone but for a probe (api/circuits.c).  Only the task's
		 * own owner's circuit: the caller may see this task, so its
		 * owner's.
		 */
		if (origin != NULL && jf_circuit_of(t->owner, origin, &circuit) &&
			circuit.state != 0)
		{
			add_row(out, "circuit_open",
					"the circuit of this owner to %s is %s since %s after %d consecutive failures (jobflow.circuit_failures is %d); its %lld due task(s) there are held, %s; jobflow.reset_circuit(%s%s) closes it",
					origin, jf_circuit_state_name(circuit.state),
					fmt_ts(jf_ms_ts(circuit.since_ms)), circuit.failures,
					jobflow_circuit_failures, (long long) circuit.held,
					circuit.state == 2 ? "a probe is in flight" :
					psprintf("the next probe goes at %s or when the next task falls due after it",
							 fmt_ts(jf_ms_ts(circuit.next_probe_ms))),
					lit(origin), owner_arg(t));
			holds = true;
		}

		/* its flow key: its order, its cap, its rate */
		if (t->flow_key != NULL &&
			explain_key(out, t, now, q_ordered, q_block, q_key_cap, q_key_rate))
			holds = true;

		if (q_max_concurrent > 0 && l.running_queue >= q_max_concurrent)
		{
			add_row(out, "queue_cap",
					"queue \"%s\" has %lld request(s) in flight, its limit (max_concurrent) is %d; %lld of its due tasks are ahead of this one%s",
					t->queue, (long long) l.running_queue, q_max_concurrent,
					(long long) l.ahead_queue, capped(&l));
			holds = true;
		}
		if (q_max_per_second > 0 &&
			(l.ahead_queue > 0 || l.recent_queue >= q_max_per_second * window))
		{
			add_row(out, "queue_rate",
					"queue \"%s\" sends at most %g request(s) per second (max_per_second), %lld went in the last %s; %lld of its due tasks are ahead of this one, about %s of sending%s",
					t->queue, q_max_per_second, (long long) l.recent_queue,
					fmt_dur((int64) (window * USECS_PER_SEC)), (long long) l.ahead_queue,
					fmt_dur((int64) ((double) (l.ahead_queue + 1) / q_max_per_second * USECS_PER_SEC)),
					capped(&l));
			holds = true;
		}
		if (l.running >= jobflow_max_per_owner)
		{
			add_row(out, "owner_cap",
					"%lld request(s) of this task's owner are in flight, the limit per owner (jobflow.max_requests_per_owner) is %d",
					(long long) l.running, jobflow_max_per_owner);
			holds = true;
		}
		if (host != NULL && host->in_flight >= jobflow_max_per_host)
		{
			add_row(out, "origin_cap",
					"%d request(s) in flight to %s, the limit per origin (jobflow.max_requests_per_host) is %d; %d due task(s) wait for it in all, %lld of this owner's are ahead of this one%s",
					host->in_flight, origin, jobflow_max_per_host, host->queued,
					(long long) l.ahead_origin, capped(&l));
			holds = true;
		}
		if (jobflow_max_rate_per_host > 0 && origin != NULL &&
			(l.ahead_origin > 0 || (host != NULL && host->queued > 0)))
		{
			add_row(out, "origin_rate",
					"at most %g request(s) per second go to %s (jobflow.max_requests_per_second_per_host); %d due task(s) wait for it in all, %lld of this owner's are ahead of this one, about %s of sending%s",
					jobflow_max_rate_per_host, origin, host != NULL ? host->queued : 0,
					(long long) l.ahead_origin,
					fmt_dur((int64) ((double) (l.ahead_origin + 1) / jobflow_max_rate_per_host * USECS_PER_SEC)),
					capped(&l));
			holds = true;
		}


		if (in_flight >= (uint64) jobflow_max_concurrent)
		{
			add_row(out, "global_cap",
					"%llu request(s) are in flight on the worker that fires this task, the limit (jobflow.max_concurrent_requests) is %d",
					(unsigned long long) in_flight, jobflow_max_concurrent);
			holds = true;
		}

		add_row(out, "due",
				"due since %s (at %s)%s%s",
				fmt_dur(now - t->run_at), fmt_ts(t->run_at),
				holds ? "" : "; nothing above holds it: the worker claims it at its next turn",
				origin == NULL || host != NULL ? "" :
				psprintf("; its origin %s is not among the %d busiest origins the workers publish, so no figure of its load is known",
						 origin, JF_METRICS_TOP));
	}
	else if (due)
		add_row(out, "due", "due since %s (at %s)", fmt_dur(now - t->run_at), fmt_ts(t->run_at));
}

/*
 * jobflow.explain(id bigint) RETURNS TABLE (reason text, explanation
 * text): why the task is where it is.  The caller's row-level security
 * decides which tasks it may see; one it may not is explained as one
 * that does not exist.
 */
PG_FUNCTION_INFO_V1(jobflow_explain);
Datum
jobflow_explain(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Out			out;
	Task		t;
	int64		id;

	jf_init_materialized_srf(fcinfo);
	if (PG_ARGISNULL(0))
		PG_RETURN_VOID();
	id = PG_GETARG_INT64(0);
	out.store = rsinfo->setResult;
	out.desc = rsinfo->setDesc;
	out.prefix = "";

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (!read_task(id, &t))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("task %lld does not exist", (long long) id),
				 errhint("jobflow.explain() explains the tasks you can see: your own, and those of roles whose privileges you have.")));
	explain_task(&out, &t);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * jobflow.explain_cron(name text) RETURNS TABLE (reason text, explanation
 * text): why the caller's timer of that name fires when it does, or not:
 * paused, held with every task of the database, its next occurrence (and
 * the task made for it, if made yet), its last occurrence's outcome.
 */
PG_FUNCTION_INFO_V1(jobflow_explain_cron);
Datum
jobflow_explain_cron(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Out			out;
	char	   *name;
	Oid			types[2] = {TEXTOID, REGROLEOID};
	Datum		values[2];
	Oid			itypes[1] = {INT8OID};
	Datum		ivalues[1];
	bool		isnull;
	int64		timer_id;
	bool		active;
	char	   *schedule;
	char	   *timezone;
	char	   *queue;
	char	   *url;
	TimestampTz updated_at;
	Datum		next_at;
	bool		next_null;
	char	   *overlap;
	TimestampTz now = GetCurrentTimestamp();
	Task		t;

	jf_init_materialized_srf(fcinfo);
	if (PG_ARGISNULL(0))
		PG_RETURN_VOID();
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	/* a name no timer can have is refused as such, never quoted back */
	jf_check_cron_name(name);
	out.store = rsinfo->setResult;
	out.desc = rsinfo->setDesc;
	out.prefix = "";

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(GetUserId());
	/* the caller's own timer, as row-level security lets it see it */
	if (SPI_execute_with_args("SELECT c.id, c.active, c.schedule, c.timezone, c.queue, c.url,"
							  "       c.updated_at, c.next_at, c.overlap"
							  "  FROM jobflow.cron_timers c"
							  " WHERE c.owner OPERATOR(pg_catalog.=) $2"
							  "   AND c.name OPERATOR(pg_catalog.=) $1",
							  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the timer");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("cron timer \"%s\" does not exist", name),
				 errhint("jobflow.explain_cron() explains the timers of the current role (see jobflow.cron).")));
	timer_id = DatumGetInt64(get_datum(0, 1, &isnull));
	active = DatumGetBool(get_datum(0, 2, &isnull));
	schedule = get_text(0, 3);
	timezone = get_text(0, 4);
	queue = get_text(0, 5);
	url = get_text(0, 6);
	updated_at = DatumGetTimestampTz(get_datum(0, 7, &isnull));
	next_at = get_datum(0, 8, &next_null);
	overlap = get_text(0, 9);

	if (!active)
		add_row(&out, "inactive",
				"timer \"%s\" is paused (inactive) since %s: no occurrence is made; resume it with jobflow.set_cron_active(%s, true)",
				name, fmt_ts(updated_at), lit(name));
	else
	{
		/* what holds the worker holds the timer: a task of it stands in */
		memset(&t, 0, sizeof(t));
		t.id = 0;
		t.from_cron = true;
		t.owner = GetUserId();
		t.owner_name = GetUserNameFromId(GetUserId(), false);
		t.queue = queue;
		t.url = url;
		{
			JfSlot	   *worker;

			(void) explain_workers(&out, &t, &worker);
		}
		{
			Oid			qtypes[2] = {REGROLEOID, TEXTOID};
			Datum		qvalues[2];

			qvalues[0] = ObjectIdGetDatum(GetUserId());
			qvalues[1] = CStringGetTextDatum(queue);
			if (SPI_execute_with_args("SELECT q.updated_at FROM jobflow.queues q"
									  " WHERE q.owner OPERATOR(pg_catalog.=) $1"
									  "   AND q.name OPERATOR(pg_catalog.=) $2 AND q.paused",
									  2, qtypes, qvalues, NULL, true, 1) == SPI_OK_SELECT &&
				SPI_processed == 1)
				add_row(&out, "queue_paused",
						"its queue \"%s\" is paused since %s: its occurrences wait; resume it with jobflow.resume_queue(%s)",
						queue,
						fmt_ts(DatumGetTimestampTz(get_datum(0, 1, &isnull))), lit(queue));
		}

		/* the next occurrence: made into a task already, or still to come */
		ivalues[0] = Int64GetDatum(timer_id);
		if (SPI_execute_with_args("SELECT t.id, t.cron_at FROM jobflow.tasks t"
								  " WHERE t.cron_id OPERATOR(pg_catalog.=) $1"
								  "   AND t.state OPERATOR(pg_catalog.<>) 'cancelled'"
								  "   AND t.state OPERATOR(pg_catalog.=) 'pending'"
								  "   AND t.attempts OPERATOR(pg_catalog.=) 0"
								  " ORDER BY t.cron_at LIMIT 1",
								  1, itypes, ivalues, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read the timer's occurrences");
		if (SPI_processed == 1)
		{
			int64		task_id = DatumGetInt64(get_datum(0, 1, &isnull));
			TimestampTz at = DatumGetTimestampTz(get_datum(0, 2, &isnull));

			add_row(&out, "next",
					"next occurrence at %s, %s %s (schedule '%s' in %s); it is task %lld: jobflow.explain(%lld) tells more",
					fmt_ts(at), at >= now ? "in" : "due since", fmt_dur(at - now),
					schedule, timezone, (long long) task_id, (long long) task_id);
		}
		else if (!next_null)
		{
			TimestampTz at = DatumGetTimestampTz(next_at);

			add_row(&out, "next",
					"next occurrence at %s, %s %s (schedule '%s' in %s)",
					fmt_ts(at), at >= now ? "in" : "due since", fmt_dur(at - now),
					schedule, timezone);
		}

		/*
		 * The overlap policy holds the occurrences that fall due while an
		 * earlier one is still in flight (worker/dispatch.c): say which one.
		 */
		if (strcmp(overlap, "allow") != 0)
		{
			if (SPI_execute_with_args("SELECT t.id, t.state::pg_catalog.text FROM jobflow.tasks t"
									  " WHERE t.cron_id OPERATOR(pg_catalog.=) $1"
									  "   AND (t.state OPERATOR(pg_catalog.=) 'running'"
									  "        OR (t.state OPERATOR(pg_catalog.=) 'pending'"
									  "            AND t.attempts OPERATOR(pg_catalog.>) 0))"
									  " ORDER BY t.cron_at LIMIT 1",
									  1, itypes, ivalues, NULL, true, 1) != SPI_OK_SELECT)
				elog(ERROR, "could not read the timer's occurrences");
			if (SPI_processed == 1)
			{
				int64		busy = DatumGetInt64(get_datum(0, 1, &isnull));
				char	   *state = get_text(0, 2);

				add_row(&out, "overlap",
						"an earlier occurrence, task %lld, is still %s: with overlap '%s' %s",
						(long long) busy,
						strcmp(state, "running") == 0 ? "running" : "waiting for a retry",
						overlap,
						strcmp(overlap, "skip") == 0 ?
						"the occurrences falling due until it has finished are skipped" :
						"the next occurrence waits until it has finished, and those falling due meanwhile are skipped");
			}
		}
	}

	/* the last occurrence that was tried, and how it went */
	ivalues[0] = Int64GetDatum(timer_id);
	if (SPI_execute_with_args("SELECT t.id FROM jobflow.tasks t"
							  " WHERE t.cron_id OPERATOR(pg_catalog.=) $1"
							  "   AND t.state OPERATOR(pg_catalog.<>) 'cancelled'"
							  "   AND t.attempts OPERATOR(pg_catalog.>) 0"
							  " ORDER BY t.cron_at DESC LIMIT 1",
							  1, itypes, ivalues, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the timer's occurrences");
	if (SPI_processed == 1)
	{
		int64		last_id = DatumGetInt64(get_datum(0, 1, &isnull));
		Tuplestorestate *store = tuplestore_begin_heap(false, false, work_mem);
		Out			last = {store, out.desc, ""};
		TupleTableSlot *slot = MakeSingleTupleTableSlot(out.desc, &TTSOpsMinimalTuple);

		if (read_task(last_id, &t))
		{
			explain_task(&last, &t);
			/* its first reason, as "last_<reason>" */
			if (tuplestore_gettupleslot(store, true, false, slot))
			{
				Datum		e = slot_getattr(slot, 2, &isnull);

				add_row(&out, psprintf("last_%s", strcmp(t.state, "pending") == 0 ?
									   "retry_wait" : t.state),
						"last occurrence: task %lld, %s", (long long) last_id,
						TextDatumGetCString(e));
			}
		}
		ExecDropSingleTupleTableSlot(slot);
		tuplestore_end(store);
	}
	else
		add_row(&out, "never_fired", "no occurrence of timer \"%s\" has fired yet",
				name);

	SPI_finish();
	PG_RETURN_VOID();
}
