/*-------------------------------------------------------------------------
 *
 * log_writer.c
 *	  Buffers attempt outcomes and writes them in batches: one statement
 *	  per batch updates jobflow.tasks and inserts into jobflow.task_log.
 *
 * The transaction that writes a batch also notifies the tasks of the
 * batch that asked for it (notify => true) and have finished, on their
 * owner's channel (outcome_channel.c): one notification per owner and
 * batch (per 200 such tasks), delivered at its commit.  Never at the cost
 * of the outcomes: a commit with a notification fails when the server's
 * notification queue is full (any role may LISTEN, never read, and flood),
 * so a batch sends none while the queue is more than half full, nor right
 * after a commit that failed for a full queue; those skipped are counted
 * and logged.
 *
 * Quiet logging (jobflow.log_attempts, or the queue's log_attempts, set
 * to failures): a success at a task's first attempt updates the task and
 * writes no log row, the bulk of the writes when all is well.  Every other
 * attempt is logged: retries, failures, the success that ends a task with
 * earlier attempts, and interrupted attempts (which may have been
 * delivered; feed.c's rescue writes those).
 *
 * A batch is written when jobflow.log_batch_size rows are buffered or the
 * oldest has waited jobflow.log_flush_ms.  Each statement reads its rows
 * from unnest() over arrays, so the cost per callback falls as load rises.
 * If a batch fails, it is rolled back to a subtransaction and its rows are
 * written one by one, so one bad row cannot take the others with it.
 *
 * The worker never waits for a row lock that another transaction holds on
 * a task (no grant lets a tenant lock a running task, but its UPDATE that
 * met the task while pending keeps a lock on it once running, until the
 * tenant's transaction ends): the batch statement first locks the rows it
 * writes, skipping those locked elsewhere, and the outcomes of those wait
 * in the buffer and are tried again LOCKED_RETRY_MS later, while the loop
 * goes on for everyone.
 *
 * Response excerpts are arbitrary bytes; they are made valid text in the
 * database encoding (NUL and invalid sequences become '?') before writing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "worker/log_writer.h"
#include "base/fault.h"
#include "worker/state.h"
#include "worker/xact.h"

static const char *const outcome_names[] = {
	"succeeded", "retry", "failed", "interrupted", "unsent"
};

/* finished tasks announced per notification */
#define OUTCOMES_PER_NOTIFY 200
/* no notification while the server's notification queue is fuller */
#define NOTIFY_QUEUE_MAX_USAGE 0.5
/* notifications skipped are logged at most this often */
#define NOTIFY_SKIP_LOG_MS 60000

/* the ids a flush held back, as its statements report them */
typedef struct HeldIds
{
	int64	   *ids;
	int			n;
	int			max;
} HeldIds;

/* outcomes held back by others' row locks are tried again after this */
#define LOCKED_RETRY_MS 500

/* The log writer's state: the buffer, its plan, held rows and orphans. */
struct JfLogWriter
{
	MemoryContext buffer_cxt;	/* the rows and what they point to */
	JfOutcomeRow *rows;
	int			nrows;
	int			maxrows;
	int64		first_buffered_ms;
	SPIPlanPtr	write_plan;
	/* outcomes held back by others' row locks: rows[0 .. nheld) after a flush */
	int			nheld;
	int64		held_retry_ms;
	/* tasks whose outcome row could not be written, for the next rescue */
	int64	   *orphans;
	int			norphans;
	int			maxorphans;
	/* outcome notifications: whether this flush sends them, and skips */
	bool		announce;
	bool		queue_was_full; /* the last commit failed for a full queue */
	uint64		skipping;		/* notifications this flush skips */
	uint64		skipped;		/* notifications skipped, not logged yet */
	int64		skip_logged_ms;
};

JfLogWriter *
jf_log_writer_create(void)
{
	JfLogWriter *lw = MemoryContextAllocZero(TopMemoryContext, sizeof(JfLogWriter));

	lw->buffer_cxt = AllocSetContextCreate(TopMemoryContext, "jobflow log buffer",
										   ALLOCSET_DEFAULT_SIZES);
	return lw;
}

/* Valid text in the database encoding, whatever the receiver sent. */
static char *
sanitize_text(const char *s, size_t len)
{
	char	   *out = palloc(len + 1);
	int			enc = GetDatabaseEncoding();
	size_t		i = 0;

	while (i < len)
	{
		int			l;

		if (s[i] == '\0')
			l = -1;
		else if (IS_HIGHBIT_SET(s[i]))
			l = pg_encoding_verifymbchar(enc, s + i, (int) (len - i));
		else
			l = 1;
		if (l <= 0)
		{
			out[i++] = '?';
			continue;
		}
		memcpy(out + i, s + i, l);
		i += l;
	}
	out[len] = '\0';
	return out;
}

/* Copy an outcome into the buffer; it is written by a later flush. */
void
jf_log_writer_add(JfLogWriter *lw, const JfOutcomeRow *row)
{
	MemoryContext old = MemoryContextSwitchTo(lw->buffer_cxt);
	JfOutcomeRow *r;

	if (lw->nrows == lw->maxrows)
	{
		lw->maxrows = Max(64, lw->maxrows * 2);
		lw->rows = lw->rows ? repalloc(lw->rows, sizeof(JfOutcomeRow) * lw->maxrows)
			: palloc(sizeof(JfOutcomeRow) * lw->maxrows);
	}
	r = &lw->rows[lw->nrows++];
	*r = *row;
	r->error = row->error ? sanitize_text(row->error, strlen(row->error)) : NULL;
	r->response = row->response ? sanitize_text(row->response, row->response_len) : NULL;
	if (lw->nrows == lw->nheld + 1)
		lw->first_buffered_ms = jf_now_ms();
	MemoryContextSwitchTo(old);
	pg_atomic_write_u64(&jf_my_slot->buffered_rows, lw->nrows);
}

/*
 * Whether a retry of task id waits in the buffer: its row still says
 * running, so a claim made now would miss it.
 */
bool
jf_log_writer_has_retry(JfLogWriter *lw, int64 id)
{
	int			i;

	for (i = 0; i < lw->nrows; i++)
	{
		if (lw->rows[i].id == id && lw->rows[i].outcome == OUTCOME_RETRY)
			return true;
	}
	return false;
}

/* Whether task id has an outcome waiting in the buffer. */
bool
jf_log_writer_holds(JfLogWriter *lw, int64 id)
{
	int			i;

	for (i = 0; i < lw->nrows; i++)
	{
		if (lw->rows[i].id == id)
			return true;
	}
	return false;
}

int
jf_log_writer_buffered(JfLogWriter *lw)
{
	return lw->nrows;
}

/* When the oldest buffered row must be written; INT64_MAX when none. */
int64
jf_log_writer_deadline(JfLogWriter *lw)
{
	if (lw->nrows == 0)
		return PG_INT64_MAX;
	if (lw->nrows == lw->nheld)
		return lw->held_retry_ms;
	if (lw->nrows - lw->nheld >= jobflow_log_batch_size)
		return 0;
	if (lw->nheld > 0)
		return Min(lw->first_buffered_ms + jobflow_log_flush_ms, lw->held_retry_ms);
	return lw->first_buffered_ms + jobflow_log_flush_ms;
}

static ArrayType *
make_array(Datum *elems, bool *nulls, int n, Oid type)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return construct_md_array(elems, nulls, 1, dims, lbs, type, typlen, typbyval, typalign);
}

static void
prepare_plans(JfLogWriter *lw)
{
	Oid			types[15] = {INT8ARRAYOID, INT4ARRAYOID, OIDARRAYOID, TIMESTAMPTZARRAYOID,
		TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID,
		TEXTARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID, BOOLOID, BOOLARRAYOID};

	/*
	 * held: the batch's tasks another transaction holds locked (deleted
	 * tasks are not held: their attempts are logged); the others are
	 * locked here, before anything is written.  Tasks that asked for it
	 * are announced on their owner's channel, at most OUTCOMES_PER_NOTIFY per
	 * notification (each "<id>:<state>" takes at most 30 bytes, far below
	 * the 8000-byte limit of a payload), unless $14 is false.  A row whose
	 * $15 is false updates its task and writes no log row (a success left
	 * out by jobflow.log_attempts), unless its task was no longer running
	 * (deleted while in flight): then no task row records the request
	 * that went out, and the log does.  Unsent ones write none.  Returns the
	 * held ids, and how many tasks were (or would have been) announced.
	 *
	 * A generic plan, made once: every row is found through the primary
	 * key whatever the batch's size, so nothing is gained by planning again
	 * for each flush's arrays, and the plan cache could otherwise go on
	 * choosing custom plans (a few milliseconds of planning per flush).
	 */
	lw->write_plan = SPI_prepare_cursor(
		"WITH held AS MATERIALIZED ("
		"  SELECT h.id FROM pg_catalog.unnest($1) AS h(id)"
		"   WHERE NOT EXISTS (SELECT FROM jobflow.tasks t WHERE t.id = h.id"
		"                     FOR NO KEY UPDATE SKIP LOCKED)"
		"     AND EXISTS (SELECT FROM jobflow.tasks t WHERE t.id = h.id)),"
		" u AS MATERIALIZED ("
		"  SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
		"                pg_catalog.unnest($3), pg_catalog.unnest($4), pg_catalog.unnest($5),"
		"                pg_catalog.unnest($6), pg_catalog.unnest($7), pg_catalog.unnest($8),"
		"                pg_catalog.unnest($9), pg_catalog.unnest($10), pg_catalog.unnest($11),"
		"                pg_catalog.unnest($12), pg_catalog.unnest($13), pg_catalog.unnest($15))"
		"    AS u(id, attempt, owner, scheduled_at, started_at, finished_at, outcome,"
		"         status, error, response, state, next_run_at, unclaim, logged)"
		"   WHERE u.id NOT IN (SELECT held.id FROM held)),"
		" w AS ("
		"  UPDATE jobflow.tasks t"
		"     SET state = u.state::jobflow.task_state,"
		"         run_at = COALESCE(u.next_run_at, t.run_at),"
		"         attempts = t.attempts - u.unclaim,"
		"         last_status = CASE WHEN u.unclaim = 1 THEN t.last_status ELSE u.status END,"
		"         last_error = CASE WHEN u.unclaim = 1 THEN t.last_error ELSE u.error END,"
		"         updated_at = pg_catalog.now()"
		"    FROM u"
		"   WHERE t.id = u.id AND t.attempts = u.attempt AND t.state = 'running'"
		"  RETURNING t.id, t.state, t.notify, t.owner),"
		" l AS ("
		"  INSERT INTO jobflow.task_log (task_id, attempt, owner, scheduled_at, started_at,"
		"         finished_at, outcome, http_status, error, response)"
		"  SELECT u.id, u.attempt, u.owner::regrole, u.scheduled_at, u.started_at,"
		"         u.finished_at, u.outcome, u.status, u.error, u.response"
		"    FROM u WHERE u.outcome <> 'unsent'"
		"     AND (u.logged OR NOT EXISTS (SELECT FROM w WHERE w.id = u.id))"
		"  RETURNING 1),"
		" n AS ("
		"  SELECT pg_catalog.pg_notify(jobflow._outcome_channel(f.owner),"
		"                              pg_catalog.string_agg(f.id || ':' || f.state, ' ' ORDER BY f.id))"
		"    FROM (SELECT w.id, w.state, w.owner,"
		"                 (pg_catalog.row_number() OVER (PARTITION BY w.owner ORDER BY w.id) - 1) / "
		CppAsString2(OUTCOMES_PER_NOTIFY) " AS chunk"
		"            FROM w WHERE $14 AND w.notify AND w.state IN ('succeeded', 'failed')) f"
		"   GROUP BY f.owner, f.chunk)"
		" SELECT (SELECT pg_catalog.count(*) FROM l), (SELECT pg_catalog.count(*) FROM n),"
		"        ARRAY(SELECT held.id FROM held),"
		"        (SELECT pg_catalog.count(*) FROM w"
		"          WHERE w.notify AND w.state IN ('succeeded', 'failed'))", 15, types,
		CURSOR_OPT_GENERIC_PLAN);
	if (lw->write_plan == NULL)
		elog(ERROR, "could not prepare the outcome write: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(lw->write_plan);
}

static inline Datum
text_or_null(const char *s, bool *isnull)
{
	*isnull = (s == NULL);
	return s ? CStringGetTextDatum(s) : (Datum) 0;
}

static inline Datum
ts_or_null(TimestampTz ts, bool present, bool *isnull)
{
	*isnull = !present;
	return TimestampTzGetDatum(ts);
}

/*
 * Write rows[from .. from+n) with the batch statement; the ids of those
 * it held back are added to held.
 */
static void
write_rows(JfLogWriter *lw, int from, int n, HeldIds *held)
{
	static const Oid elemtypes[14] = {INT8OID, INT4OID, OIDOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT4OID, TEXTOID, TEXTOID, TEXTOID,
		TIMESTAMPTZOID, INT4OID, BOOLOID};
	Datum		v[15];
	Datum	   *e[14];
	bool	   *nl[14];
	Datum	   *ids;
	bool		isnull;
	int			nids;
	int			c;
	int			i;
	int			ret;

	for (c = 0; c < 14; c++)
	{
		e[c] = palloc(sizeof(Datum) * n);
		nl[c] = palloc0(sizeof(bool) * n);
	}
	for (i = 0; i < n; i++)
	{
		JfOutcomeRow *r = &lw->rows[from + i];

		e[0][i] = Int64GetDatum(r->id);
		e[1][i] = Int32GetDatum(r->attempt);
		e[2][i] = ObjectIdGetDatum(r->owner);
		e[3][i] = ts_or_null(r->scheduled_at, true, &nl[3][i]);
		e[4][i] = ts_or_null(r->started_at, r->outcome < OUTCOME_INTERRUPTED, &nl[4][i]);
		e[5][i] = ts_or_null(r->finished_at, true, &nl[5][i]);
		e[6][i] = CStringGetTextDatum(outcome_names[r->outcome]);
		e[7][i] = Int32GetDatum(r->http_status);
		nl[7][i] = (r->http_status == 0);
		e[8][i] = text_or_null(r->error, &nl[8][i]);
		e[9][i] = text_or_null(r->response, &nl[9][i]);
		e[10][i] = CStringGetTextDatum(r->state);
		/* only a retry sets the next run; an unsent attempt is given back */
		e[11][i] = ts_or_null(r->next_run_at, r->outcome == OUTCOME_RETRY, &nl[11][i]);
		e[12][i] = Int32GetDatum(r->outcome == OUTCOME_UNSENT ? 1 : 0);
		/* only a success may go unlogged: every other outcome is a failure */
		e[13][i] = BoolGetDatum(!(r->unlogged && r->outcome == OUTCOME_SUCCEEDED));
	}
	for (c = 0; c < 13; c++)
		v[c] = PointerGetDatum(make_array(e[c], nl[c], n, elemtypes[c]));
	v[13] = BoolGetDatum(lw->announce);
	v[14] = PointerGetDatum(make_array(e[13], nl[13], n, elemtypes[13]));

	ret = SPI_execute_plan(lw->write_plan, v, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "outcome write failed: %s", SPI_result_code_string(ret));
	jf_xact_count_statements(1);
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 3, &isnull)),
					  INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &ids, NULL, &nids);
	if (!lw->announce)
	{
		int64		tasks = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
														SPI_tuptable->tupdesc, 4, &isnull));

		/* as many notifications as would have gone */
		lw->skipping += (tasks + OUTCOMES_PER_NOTIFY - 1) / OUTCOMES_PER_NOTIFY;
	}
	for (i = 0; i < nids; i++)
	{
		if (held->n == held->max)
		{
			held->max = Max(16, held->max * 2);
			held->ids = held->ids ? repalloc(held->ids, sizeof(int64) * held->max)
				: palloc(sizeof(int64) * held->max);
		}
		held->ids[held->n++] = DatumGetInt64(ids[i]);
	}
}

/*
 * Run write_rows in a subtransaction; on error, roll it back and report
 * false, leaving the outer transaction usable.
 */
static bool
try_write_rows(JfLogWriter *lw, int from, int n, HeldIds *held)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;
	uint64		skipping = lw->skipping;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		write_rows(lw, from, n, held);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		/* what the rolled back statement skipped, it did not */
		lw->skipping = skipping;
		ereport(WARNING,
				(errmsg("jobflow could not write %d outcome row(s) starting with task %lld: %s",
						n, (long long) lw->rows[from].id, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

static void
add_orphan(JfLogWriter *lw, int64 id)
{
	if (lw->norphans == lw->maxorphans)
	{
		lw->maxorphans = Max(16, lw->maxorphans * 2);
		lw->orphans = lw->orphans ? repalloc(lw->orphans, sizeof(int64) * lw->maxorphans)
			: MemoryContextAlloc(TopMemoryContext, sizeof(int64) * lw->maxorphans);
	}
	lw->orphans[lw->norphans++] = id;
}

/* The tasks whose outcome could not be written, oldest first. */
int
jf_log_writer_orphans(JfLogWriter *lw, int64 **ids)
{
	*ids = lw->orphans;
	return lw->norphans;
}

/* The first n orphans were rescued. */
void
jf_log_writer_forget_orphans(JfLogWriter *lw, int n)
{
	memmove(lw->orphans, lw->orphans + n, sizeof(int64) * (lw->norphans - n));
	lw->norphans -= n;
}

/*
 * The outcomes held back, copied into a new buffer context made a child of
 * the current one: an error before the flush has forgotten what it wrote
 * deletes it with its parent.  Sets *n to their number.
 */
static JfOutcomeRow *
copy_held(JfLogWriter *lw, HeldIds *held, MemoryContext *cxt, int *n)
{
	JfOutcomeRow *copy;
	int			i;

	qsort(held->ids, held->n, sizeof(int64), jf_compare_int64);
	*cxt = AllocSetContextCreate(lw->buffer_cxt, "jobflow log buffer", ALLOCSET_DEFAULT_SIZES);
	copy = MemoryContextAlloc(*cxt, sizeof(JfOutcomeRow) * Max(64, held->n));
	*n = 0;
	for (i = 0; i < lw->nrows; i++)
	{
		JfOutcomeRow *r;

		if (!bsearch(&lw->rows[i].id, held->ids, held->n, sizeof(int64), jf_compare_int64))
			continue;
		r = &copy[(*n)++];
		*r = lw->rows[i];
		if (r->error)
			r->error = MemoryContextStrdup(*cxt, r->error);
		if (r->response)
			r->response = MemoryContextStrdup(*cxt, r->response);
	}
	return copy;
}

/*
 * Whether this flush may send outcome notifications: not right after a
 * commit that failed for a full notification queue, nor while the queue is
 * more than half full (others fill what is left at their own pace; the
 * worker's commit must not be the one that meets it full).
 */
static bool
notify_queue_has_room(JfLogWriter *lw)
{
	LOCAL_FCINFO(fcinfo, 0);

	if (lw->queue_was_full)
	{
		lw->queue_was_full = false;
		return false;
	}
	InitFunctionCallInfoData(*fcinfo, NULL, 0, InvalidOid, NULL, NULL);
	return DatumGetFloat8(pg_notification_queue_usage(fcinfo)) <= NOTIFY_QUEUE_MAX_USAGE;
}

/*
 * Commit the flush; a commit that fails because its notifications found
 * the queue full has the next try go without them.
 */
static void
commit_flush(JfLogWriter *lw)
{
	PG_TRY();
	{
		jf_xact_commit();
	}
	PG_CATCH();
	{
		if (lw->announce && geterrcode() == ERRCODE_PROGRAM_LIMIT_EXCEEDED)
			lw->queue_was_full = true;
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* Count and log (once a minute at most) the notifications skipped. */
static void
report_skipped(JfLogWriter *lw)
{
	int64		now = jf_now_ms();

	if (lw->skipping > 0)
	{
		jf_metrics_count(JF_COUNT_NOTIFY_SKIPPED, lw->skipping);
		lw->skipped += lw->skipping;
		lw->skipping = 0;
	}
	if (lw->skipped == 0 || now < lw->skip_logged_ms + NOTIFY_SKIP_LOG_MS)
		return;
	ereport(WARNING,
			(errmsg("jobflow skipped %llu outcome notification(s): the server's notification queue is more than half full",
					(unsigned long long) lw->skipped),
			 errdetail("The outcomes are written; listeners learn of them from jobflow.tasks."),
			 errhint("A session that LISTENs and never reads holds the queue back: see pg_notification_queue_usage() and pg_stat_activity.")));
	lw->skip_logged_ms = now;
	lw->skipped = 0;
}

/*
 * Write every buffered outcome in one transaction, but for those of tasks
 * another transaction holds locked (see the file header).
 */
void
jf_log_writer_flush(JfLogWriter *lw)
{
	TimestampTz flush_start;
	int			i;
	uint64		written = lw->nrows;
	int64	   *failed;
	int			nfailed = 0;
	HeldIds		held = {NULL, 0, 0};
	MemoryContext held_cxt = NULL;
	JfOutcomeRow *kept = NULL;
	int			nkept = 0;

	if (lw->nrows == 0)
		return;
	flush_start = GetCurrentTimestamp();
	jf_xact_begin("jobflow: write outcomes");
	jf_xact_by_id_only();
	if (lw->write_plan == NULL)
		prepare_plans(lw);
	lw->announce = notify_queue_has_room(lw);
	lw->skipping = 0;
	/* outlives the transaction; goes with the buffer below */
	failed = MemoryContextAlloc(lw->buffer_cxt, sizeof(int64) * lw->nrows);
	if (!try_write_rows(lw, 0, lw->nrows, &held))
	{
		/*
		 * One by one: a row that still fails is reported and its task,
		 * still running, is handed to the next housekeeping's rescue once
		 * the others are committed.
		 */
		written = 0;
		held.n = 0;
		for (i = 0; i < lw->nrows; i++)
		{
			if (try_write_rows(lw, i, 1, &held))
				written++;
			else
				failed[nfailed++] = lw->rows[i].id;
		}
	}
	if (held.n > 0)
	{
		kept = copy_held(lw, &held, &held_cxt, &nkept);
		written -= nkept;
	}
	jf_fault("flush");
	commit_flush(lw);
	jf_metrics_observe(JF_HIST_FLUSH, GetCurrentTimestamp() - flush_start);

	/*
	 * Written: forget the rows before anything else can fail, or an ERROR
	 * from here on would have the next flush write them again.  Their
	 * memory goes with the buffer's context below (or at the next flush).
	 */
	lw->nheld = nkept;
	lw->nrows = nkept;
	lw->maxrows = nkept > 0 ? Max(64, nkept) : 0;
	lw->rows = kept;
	pg_atomic_write_u64(&jf_my_slot->buffered_rows, lw->nrows);
	jf_fault("after_flush");
	for (i = 0; i < nfailed; i++)
		add_orphan(lw, failed[i]);

	report_skipped(lw);
	pg_atomic_fetch_add_u64(&jf_figures->flushes, 1);
	pg_atomic_fetch_add_u64(&jf_figures->flushed_rows, written);
	pg_atomic_write_u64(&jf_figures->last_flush_ms, (uint64) jf_now_ms());
	if (held_cxt != NULL)
	{
		MemoryContextSetParent(held_cxt, TopMemoryContext);
		MemoryContextDelete(lw->buffer_cxt);
		lw->buffer_cxt = held_cxt;
		lw->held_retry_ms = jf_now_ms() + LOCKED_RETRY_MS;
	}
	else
		MemoryContextReset(lw->buffer_cxt);
}

/*
 * The extension was dropped: buffered outcomes and orphans belong to tasks
 * that no longer exist, and their ids may already name new tasks.
 */
void
jf_log_writer_discard(JfLogWriter *lw)
{
	lw->nrows = 0;
	lw->nheld = 0;
	lw->maxrows = 0;
	lw->rows = NULL;
	MemoryContextReset(lw->buffer_cxt);
	lw->norphans = 0;
	pg_atomic_write_u64(&jf_my_slot->buffered_rows, 0);
}
