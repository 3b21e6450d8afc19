/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *	  From due wheel entries to HTTP requests, and from responses to
 *	  outcomes: claim, submit, classify, retry.
 *
 * Due tasks are claimed in batches by one UPDATE that only takes tasks
 * still pending and due, so a cancelled or rescheduled task never fires;
 * claiming marks them running and counts the attempt.  Requests then go to
 * the libcurl dispatcher (http.c), which runs them all at once within its
 * caps and never blocks the worker.  Each result becomes an outcome row for
 * the log writer; a retry goes straight back into the wheel.
 *
 * Claims commit asynchronously (the worker runs with synchronous_commit
 * off): a claim lost in a crash leaves the task pending, so it fires again,
 * which at-least-once delivery allows, and no fsync stands between a
 * deadline and its request.
 *
 *-------------------------------------------------------------------------
 */
#include "worker.h"

#include "guard.h"

#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "lib/ilist.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

/* what the worker keeps per request in flight: the result's user pointer */
typedef struct InFlightEntry
{
	InFlight	task;
	bool		unsent;			/* still queued when the worker stopped */
	dlist_node	node;
} InFlightEntry;

static dlist_head in_flight = DLIST_STATIC_INIT(in_flight);
static SPIPlanPtr claim_plan = NULL;
static MemoryContext claim_cxt = NULL;	/* requests between claim and submit */

static JfHttpConfig
http_config(void)
{
	JfHttpConfig cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.max_concurrent = jobflow_max_concurrent;
	cfg.max_per_host = jobflow_max_per_host;
	cfg.max_response_bytes = (size_t) jobflow_max_response_size;
	cfg.max_redirects = jobflow_max_redirects;
	cfg.user_agent = "jobflow/" JOBFLOW_VERSION;
	cfg.proxy = NULL;
	cfg.deny_networks = jobflow_deny_networks;
	return cfg;
}

void
dispatch_init(WorkerState *ws)
{
	char		errbuf[256];
	JfHttpConfig cfg = http_config();

	if (!jf_http_global_init(errbuf, sizeof(errbuf)))
		ereport(ERROR,
				(errmsg("could not initialise libcurl: %s", errbuf)));
	claim_cxt = AllocSetContextCreate(ws->cxt, "jobflow claims", ALLOCSET_DEFAULT_SIZES);
	ws->http = jf_http_create(&cfg, errbuf, sizeof(errbuf));
	if (ws->http == NULL)
		ereport(ERROR,
				(errmsg("could not create the jobflow HTTP dispatcher: %s", errbuf)));
}

/* Settings changed on SIGHUP: new caps apply at once. */
void
dispatch_reconfigure(WorkerState *ws)
{
	JfHttpConfig cfg = http_config();

	if (!jf_http_set_config(ws->http, &cfg))
		ereport(WARNING,
				(errmsg("out of memory applying new jobflow HTTP settings; the old ones stay")));
}

/*
 * How many more tasks the worker may claim now.  Claimed tasks wait in the
 * dispatcher's queues; bounding that backlog bounds the worker's memory
 * when a large batch falls due at once.  The rest stay due in the wheel.
 */
static int
claim_capacity(WorkerState *ws)
{
	int			backlog = jf_http_in_flight(ws->http) + jf_http_queued(ws->http);
	int			limit = Max(10000, 20 * jobflow_max_concurrent);

	return Max(0, limit - backlog);
}

/*
 * jsonb headers and content type as "Name: value" lines for libcurl.  With
 * no content type given either way, "Content-Type:" stops libcurl from
 * sending its form-encoded default for a POST body: a task without a
 * content type gets none.
 */
static const char **
build_headers(Jsonb *headers, const char *content_type, int *n)
{
	int			cap = JB_ROOT_COUNT(headers) + 1;
	const char **lines = palloc(sizeof(char *) * cap);
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *name = NULL;
	bool		has_content_type = false;

	*n = 0;
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			name = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE && name != NULL && v.type == jbvString)
		{
			if (pg_strcasecmp(name, "Content-Type") == 0)
				has_content_type = true;
			lines[(*n)++] = psprintf("%s: %.*s", name, v.val.string.len, v.val.string.val);
			name = NULL;
		}
	}
	if (content_type != NULL)
		lines[(*n)++] = psprintf("Content-Type: %s", content_type);
	else if (!has_content_type)
		lines[(*n)++] = "Content-Type:";
	return lines;
}

/*
 * Build the request for one claimed row (columns as in the claim
 * statement), copying everything into the current memory context: the
 * request is only handed to libcurl once the claim has committed.
 */
static void
build_request(WorkerState *ws, HeapTuple tup, TupleDesc desc, JfHttpRequest *req)
{
	bool		isnull;
	InFlightEntry *e;
	Datum		d;
	int			nheaders;
	char	   *content_type = NULL;

	e = MemoryContextAllocZero(ws->cxt, sizeof(InFlightEntry));
	e->task.id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	e->task.attempt = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	e->task.max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	e->task.owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
	e->task.scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 5, &isnull));
	e->task.generation = jf_guard_generation();

	memset(req, 0, sizeof(*req));
	req->task_id = e->task.id;
	req->attempt = e->task.attempt;
	req->user = e;
	req->url = TextDatumGetCString(SPI_getbinval(tup, desc, 6, &isnull));
	req->method = TextDatumGetCString(SPI_getbinval(tup, desc, 7, &isnull));
	d = SPI_getbinval(tup, desc, 10, &isnull);
	if (!isnull)
		content_type = TextDatumGetCString(d);
	req->headers = build_headers(DatumGetJsonbP(SPI_getbinval(tup, desc, 8, &isnull)),
								 content_type, &nheaders);
	req->nheaders = nheaders;
	d = SPI_getbinval(tup, desc, 9, &isnull);
	if (!isnull)
	{
		text	   *body = DatumGetTextPP(d);

		req->body_len = VARSIZE_ANY_EXHDR(body);
		req->body = pnstrdup(VARDATA_ANY(body), req->body_len);
	}
	req->timeout_ms = DatumGetInt32(SPI_getbinval(tup, desc, 11, &isnull));
}

/*
 * Hand committed claims to libcurl.  A request libcurl cannot take (out of
 * memory) is handed back like an unsent one at shutdown: claim undone.
 */
static void
submit_requests(JfHttp *http, JfHttpRequest *reqs, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		InFlightEntry *e = (InFlightEntry *) reqs[i].user;

		if (jf_http_submit(http, &reqs[i]))
		{
			dlist_push_tail(&in_flight, &e->node);
			continue;
		}
		{
			OutcomeRow	row;

			memset(&row, 0, sizeof(row));
			row.id = e->task.id;
			row.attempt = e->task.attempt;
			row.owner = e->task.owner;
			row.scheduled_at = e->task.scheduled_at;
			row.finished_at = GetCurrentTimestamp();
			row.outcome = OUTCOME_UNSENT;
			row.state = "pending";
			log_writer_add(&row);
			pfree(e);
		}
	}
}

static int
compare_int64(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return (x > y) - (x < y);
}

/*
 * A retry falls due before its outcome row is written when the loop was
 * held up for longer than the flush interval: its claim finds the task
 * still running.  Put such tasks back in the wheel for just after the
 * next flush instead of leaving them to the rescan.
 */
static void
requeue_unwritten_retries(WorkerState *ws, Datum *ids, int n,
						  SPITupleTable *claimed, int64 now_ms)
{
	uint64		nclaimed = SPI_processed;
	int64	   *got = palloc(sizeof(int64) * Max(nclaimed, 1));
	uint64		i;
	int			k;

	for (i = 0; i < nclaimed; i++)
	{
		bool		isnull;

		got[i] = DatumGetInt64(SPI_getbinval(claimed->vals[i], claimed->tupdesc, 1, &isnull));
	}
	qsort(got, nclaimed, sizeof(int64), compare_int64);
	for (k = 0; k < n; k++)
	{
		int64		id = DatumGetInt64(ids[k]);

		if (bsearch(&id, got, nclaimed, sizeof(int64), compare_int64) == NULL &&
			log_writer_has_retry(id))
			feed_upsert(ws, id, now_ms + jobflow_log_flush_ms);
	}
	pfree(got);
}

/*
 * Claim the given due tasks and submit those that are still pending and
 * due.  Everything the requests need is copied by jf_http_submit, so the
 * transaction's memory can go when it commits.
 */
static void
claim_and_submit(WorkerState *ws, Datum *ids, int n, int64 now_ms)
{
	Datum		values[2];
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	int			ret;
	uint64		i;
	int			nclaimed;
	JfHttpRequest *reqs;
	MemoryContext old;

	jf_xact_begin("jobflow: claim due tasks");
	if (claim_plan == NULL)
	{
		/*
		 * A generic plan: planned for the actual values, a burst makes the
		 * run_at index look cheaper than the primary key, and each claim
		 * then filters every due task instead of fetching its ids.  SKIP
		 * LOCKED: a task some transaction holds (a cancel in progress, a
		 * SELECT ... FOR UPDATE) must not stall every other task; it stays
		 * pending and the next rescan puts it back in the wheel.
		 */
		SPIPlanPtr	plan = SPI_prepare_cursor(
			"UPDATE jobflow.tasks t"
			"   SET state = 'running', attempts = t.attempts + 1,"
			"       updated_at = pg_catalog.now()"
			"  FROM (SELECT d.id FROM jobflow.tasks d"
			"         WHERE d.id = ANY($1) AND d.state = 'pending' AND d.run_at <= $2"
			"           AND EXISTS (SELECT 1 FROM pg_catalog.pg_authid a WHERE a.oid = d.owner)"
			"         FOR UPDATE SKIP LOCKED) c"
			" WHERE t.id = c.id"
			" RETURNING t.id, t.attempts, t.max_attempts, t.owner, t.run_at,"
			"           t.url, t.method, t.headers, t.body, t.content_type, t.timeout_ms",
			2, types, CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "could not prepare the claim statement: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		claim_plan = plan;
	}
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = TimestampTzGetDatum(jf_ms_to_ts(now_ms));
	ret = SPI_execute_plan(claim_plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "claim statement failed: %s", SPI_result_code_string(ret));
	worker_count_statement(1);
	nclaimed = (int) SPI_processed;
	reqs = MemoryContextAlloc(claim_cxt, sizeof(JfHttpRequest) * Max(nclaimed, 1));
	old = MemoryContextSwitchTo(claim_cxt);
	for (i = 0; i < SPI_processed; i++)
		build_request(ws, SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &reqs[i]);
	MemoryContextSwitchTo(old);
	if (SPI_processed < (uint64) n)
		requeue_unwritten_retries(ws, ids, n, SPI_tuptable, now_ms);
	jf_xact_commit();

	/* only now: a claim that failed to commit must send nothing */
	submit_requests(ws->http, reqs, nclaimed);
	pg_atomic_fetch_add_u64(&jobflow_shared->fired, nclaimed);
	MemoryContextReset(claim_cxt);
}

/*
 * Fire what the wheel says is due.  Returns true when due tasks had to
 * stay in the wheel because the dispatcher's backlog is full; the loop
 * then waits for results instead of the (past) wheel deadline.
 */
bool
dispatch_due(WorkerState *ws, int64 now_ms)
{
	static JfWheelExpired *expired = NULL;
	static Datum *ids = NULL;
	static int	allocated = 0;
	int			batch = jobflow_claim_batch_size;

	if (ws->stopping)
		return false;
	/* kept across turns (and errors): a turn allocates nothing here */
	if (allocated < batch)
	{
		if (expired != NULL)
		{
			pfree(expired);
			pfree(ids);
		}
		expired = MemoryContextAlloc(ws->cxt, sizeof(JfWheelExpired) * batch);
		ids = MemoryContextAlloc(ws->cxt, sizeof(Datum) * batch);
		allocated = batch;
	}
	for (;;)
	{
		int			room = Min(batch, claim_capacity(ws));
		size_t		n;
		size_t		i;

		if (room == 0)
		{
			/* still move the clock, so the horizon keeps up */
			(void) jf_wheel_advance(ws->wheel, now_ms, expired, 0);
			return jf_wheel_next_deadline(ws->wheel) <= now_ms;
		}
		n = jf_wheel_advance(ws->wheel, now_ms, expired, room);
		if (n == 0)
			break;
		for (i = 0; i < n; i++)
		{
			feed_forget(ws, (int64) expired[i].id);
			ids[i] = Int64GetDatum((int64) expired[i].id);
		}
		claim_and_submit(ws, ids, (int) n, now_ms);
		/* start these requests before claiming the next batch */
		dispatch_collect(ws);
		if ((int) n < room)
			break;
	}
	return false;
}

/* Full jitter on the upper half: spreads retries of a failed burst. */
static int64
retry_delay_ms(int attempt, int64 retry_after_ms)
{
	int64		delay = jobflow_retry_base_ms;
	int			i;

	if (retry_after_ms >= 0)
		delay = Min(retry_after_ms, (int64) jobflow_retry_max_ms);
	else
	{
		for (i = 1; i < attempt && delay < jobflow_retry_max_ms; i++)
			delay *= 2;
		delay = Min(delay, (int64) jobflow_retry_max_ms);
		delay = delay / 2 + (int64) pg_prng_uint64_range(&pg_global_prng_state, 0, delay / 2);
	}
	/* the retry's pending state must be written before it falls due */
	return Max(delay, 2 * (int64) jobflow_log_flush_ms);
}

static bool
retryable(const JfHttpResult *r)
{
	if (r->error_kind == JF_HTTP_OK)
		return r->http_status == 408 || r->http_status == 429 ||
			(r->http_status >= 500 && r->http_status <= 599);
	return r->error_kind != JF_HTTP_INVALID;
}

/* Turn one finished request into an outcome row (and maybe a retry). */
static void
record_result(WorkerState *ws, JfHttpResult *r)
{
	InFlightEntry *e = (InFlightEntry *) r->user;
	OutcomeRow	row;
	char		status_error[64];

	/* claimed from a dropped extension: its outcome belongs to no task */
	if (e->task.generation != jf_guard_generation())
	{
		dlist_delete(&e->node);
		pfree(e);
		return;
	}
	memset(&row, 0, sizeof(row));
	row.id = e->task.id;
	row.attempt = e->task.attempt;
	row.owner = e->task.owner;
	row.scheduled_at = e->task.scheduled_at;
	row.started_at = jf_ms_to_ts(r->started_at_ms);
	row.finished_at = jf_ms_to_ts(r->finished_at_ms);
	row.http_status = r->http_status;
	row.response = r->body;
	row.response_len = r->body_len;
	if (r->error_kind != JF_HTTP_OK)
		row.error = r->error;
	else if (r->http_status < 200 || r->http_status > 299)
	{
		snprintf(status_error, sizeof(status_error), "HTTP status %d", r->http_status);
		row.error = status_error;
	}

	if (r->error_kind == JF_HTTP_OK && r->http_status >= 200 && r->http_status <= 299)
	{
		row.outcome = OUTCOME_SUCCEEDED;
		row.state = "succeeded";
		pg_atomic_fetch_add_u64(&jobflow_shared->succeeded, 1);
	}
	else if (retryable(r) && e->task.attempt < e->task.max_attempts)
	{
		int64		next_ms = r->finished_at_ms + retry_delay_ms(e->task.attempt, r->retry_after_ms);

		row.outcome = OUTCOME_RETRY;
		row.state = "pending";
		row.next_run_at = jf_ms_to_ts(next_ms);
		if (next_ms < ws->loaded_until_ms)
			feed_upsert(ws, e->task.id, next_ms);
		pg_atomic_fetch_add_u64(&jobflow_shared->retried, 1);
	}
	else
	{
		row.outcome = OUTCOME_FAILED;
		row.state = "failed";
		pg_atomic_fetch_add_u64(&jobflow_shared->failed, 1);
	}
	log_writer_add(&row);
	dlist_delete(&e->node);
	pfree(e);
}

/* Drive libcurl and record every finished request. */
void
dispatch_collect(WorkerState *ws)
{
	JfHttpResult r;

	jf_http_perform(ws->http);
	while (jf_http_next_result(ws->http, &r))
	{
		record_result(ws, &r);
		jf_http_result_free(&r);
	}
}

static void
mark_unsent(void *user, void *arg)
{
	((InFlightEntry *) user)->unsent = true;
}

/*
 * Stopping: requests never sent (still queued behind the caps) are handed
 * back: their claim is undone and nothing is logged.  Requests still in
 * flight after the grace period are dropped: their tasks go back to
 * pending with the attempt logged as interrupted.  It may or may not have
 * been delivered, so it is not held against the task as a failure; only a
 * task interrupted beyond max_attempts (one spare attempt, against a task
 * that kills every worker that sends it) fails.
 */
void
dispatch_abandon(WorkerState *ws)
{
	dlist_mutable_iter it;
	TimestampTz now = GetCurrentTimestamp();

	jf_http_foreach_queued(ws->http, mark_unsent, NULL);
	dlist_foreach_modify(it, &in_flight)
	{
		InFlightEntry *e = dlist_container(InFlightEntry, node, it.cur);
		OutcomeRow	row;

		if (e->task.generation != jf_guard_generation())
		{
			dlist_delete(&e->node);
			pfree(e);
			continue;
		}
		memset(&row, 0, sizeof(row));
		row.id = e->task.id;
		row.attempt = e->task.attempt;
		row.owner = e->task.owner;
		row.scheduled_at = e->task.scheduled_at;
		row.finished_at = now;
		if (e->unsent)
		{
			/* never left the queue: as if it had not been claimed */
			row.outcome = OUTCOME_UNSENT;
			row.state = "pending";
		}
		else
		{
			row.outcome = OUTCOME_INTERRUPTED;
			row.state = e->task.attempt <= e->task.max_attempts ? "pending" : "failed";
			row.error = "the worker stopped during this attempt; it may have been delivered";
		}
		log_writer_add(&row);
		dlist_delete(&e->node);
		pfree(e);
	}
	jf_http_destroy(ws->http);
	ws->http = NULL;
}
