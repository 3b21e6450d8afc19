/*-------------------------------------------------------------------------
 *
 * log_writer.c
 *	  Buffers attempt outcomes and writes them in batches: one UPDATE of
 *	  jobflow.tasks and one INSERT into jobflow.task_log per batch.
 *
 * The transaction that writes a batch also sends NOTIFY jobflow_outcome
 * for the tasks of the batch that asked for it (notify => true) and have
 * finished: one notification per batch (per 200 such tasks), delivered at
 * its commit.
 *
 * A batch is written when jobflow.log_batch_size rows are buffered or the
 * oldest has waited jobflow.log_flush_ms.  Each statement reads its rows
 * from unnest() over arrays, so the cost per callback falls as load rises.
 * If a batch fails, it is rolled back to a subtransaction and its rows are
 * written one by one, so one bad row cannot take the others with it.
 *
 * The worker never waits for a row lock that another transaction holds on
 * a task (a tenant may lock its own tasks FOR UPDATE, in a transaction it
 * keeps open): each flush first locks the rows it writes, skipping those
 * locked elsewhere, and the outcomes of those wait in the buffer and are
 * tried again LOCKED_RETRY_MS later, while the loop goes on for everyone.
 *
 * Response excerpts are arbitrary bytes; they are made valid text in the
 * database encoding (NUL and invalid sequences become '?') before writing.
 *
 *-------------------------------------------------------------------------
 */
#include "worker.h"
#include "fault.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

static const char *const outcome_names[] = {
	"succeeded", "retry", "failed", "interrupted", "unsent"
};

/* finished tasks announced per NOTIFY jobflow_outcome */
#define OUTCOMES_PER_NOTIFY 200

static MemoryContext buffer_cxt = NULL;
static OutcomeRow *rows = NULL;
static int	nrows = 0;
static int	maxrows = 0;
static int64 first_buffered_ms = 0;
static SPIPlanPtr update_plan = NULL;

/* outcomes held back by others' row locks: rows[0 .. nheld) after a flush */
#define LOCKED_RETRY_MS 500
static int	nheld = 0;
static int64 held_retry_ms = 0;
static SPIPlanPtr locked_plan = NULL;

/* tasks whose outcome row could not be written, for the next rescue */
static int64 *orphans = NULL;
static int	norphans = 0;
static int	maxorphans = 0;
static SPIPlanPtr insert_plan = NULL;

void
log_writer_init(void)
{
	buffer_cxt = AllocSetContextCreate(TopMemoryContext, "jobflow log buffer",
									   ALLOCSET_DEFAULT_SIZES);
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
log_writer_add(const OutcomeRow *row)
{
	MemoryContext old = MemoryContextSwitchTo(buffer_cxt);
	OutcomeRow *r;

	if (nrows == maxrows)
	{
		maxrows = Max(64, maxrows * 2);
		rows = rows ? repalloc(rows, sizeof(OutcomeRow) * maxrows)
			: palloc(sizeof(OutcomeRow) * maxrows);
	}
	r = &rows[nrows++];
	*r = *row;
	r->error = row->error ? sanitize_text(row->error, strlen(row->error)) : NULL;
	r->response = row->response ? sanitize_text(row->response, row->response_len) : NULL;
	if (nrows == nheld + 1)
		first_buffered_ms = jf_now_ms();
	MemoryContextSwitchTo(old);
	pg_atomic_write_u64(&jobflow_shared->buffered_rows, nrows);
}

/*
 * Whether a retry of task id waits in the buffer: its row still says
 * running, so a claim made now would miss it.
 */
bool
log_writer_has_retry(int64 id)
{
	int			i;

	for (i = 0; i < nrows; i++)
	{
		if (rows[i].id == id && rows[i].outcome == OUTCOME_RETRY)
			return true;
	}
	return false;
}

/* Whether task id has an outcome waiting in the buffer. */
bool
log_writer_holds(int64 id)
{
	int			i;

	for (i = 0; i < nrows; i++)
	{
		if (rows[i].id == id)
			return true;
	}
	return false;
}

int
log_writer_buffered(void)
{
	return nrows;
}

/* When the oldest buffered row must be written; INT64_MAX when none. */
int64
log_writer_deadline(void)
{
	if (nrows == 0)
		return PG_INT64_MAX;
	if (nrows == nheld)
		return held_retry_ms;
	if (nrows - nheld >= jobflow_log_batch_size)
		return 0;
	if (nheld > 0)
		return Min(first_buffered_ms + jobflow_log_flush_ms, held_retry_ms);
	return first_buffered_ms + jobflow_log_flush_ms;
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
prepare_plans(void)
{
	Oid			utypes[7] = {INT8ARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, INT4ARRAYOID,
		TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID};
	Oid			itypes[10] = {INT8ARRAYOID, INT4ARRAYOID, OIDARRAYOID, TIMESTAMPTZARRAYOID,
		TIMESTAMPTZARRAYOID, TIMESTAMPTZARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID};

	/*
	 * Tasks that asked for it are announced on jobflow_outcome, at most
	 * OUTCOMES_PER_NOTIFY per notification (each "<id>:<state>" takes at
	 * most 30 bytes, far below the 8000-byte limit of a payload).
	 */
	update_plan = SPI_prepare(
		"WITH w AS ("
		"UPDATE jobflow.tasks t"
		"   SET state = u.state::jobflow.task_state,"
		"       run_at = COALESCE(u.next_run_at, t.run_at),"
		"       attempts = t.attempts - u.unclaim,"
		"       last_status = CASE WHEN u.unclaim = 1 THEN t.last_status ELSE u.status END,"
		"       last_error = CASE WHEN u.unclaim = 1 THEN t.last_error ELSE u.error END,"
		"       updated_at = pg_catalog.now()"
		"  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
		"                  pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),"
		"                  pg_catalog.unnest($7))"
		"    AS u(id, state, next_run_at, status, error, unclaim, attempt)"
		" WHERE t.id = u.id AND t.attempts = u.attempt AND t.state = 'running'"
		" RETURNING t.id, t.state, t.notify)"
		"SELECT pg_catalog.pg_notify('jobflow_outcome',"
		"                            pg_catalog.string_agg(n.id || ':' || n.state, ' ' ORDER BY n.id))"
		"  FROM (SELECT w.id, w.state,"
		"               (pg_catalog.row_number() OVER (ORDER BY w.id) - 1) / "
		CppAsString2(OUTCOMES_PER_NOTIFY) " AS chunk"
		"          FROM w WHERE w.notify AND w.state IN ('succeeded', 'failed')) n"
		" GROUP BY n.chunk", 7, utypes);
	if (update_plan == NULL)
		elog(ERROR, "could not prepare the outcome update: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(update_plan);

	insert_plan = SPI_prepare(
		"INSERT INTO jobflow.task_log (task_id, attempt, owner, scheduled_at, started_at,"
		"       finished_at, outcome, http_status, error, response)"
		"SELECT u.task_id, u.attempt, u.owner::regrole, u.scheduled_at, u.started_at,"
		"       u.finished_at, u.outcome, u.http_status, u.error, u.response"
		"  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
		"                  pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),"
		"                  pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9),"
		"                  pg_catalog.unnest($10))"
		"    AS u(task_id, attempt, owner, scheduled_at, started_at, finished_at,"
		"         outcome, http_status, error, response)"
		" WHERE u.outcome <> 'unsent'", 10, itypes);
	if (insert_plan == NULL)
		elog(ERROR, "could not prepare the log insert: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(insert_plan);

	/*
	 * Locks the tasks of the batch and returns those another transaction
	 * holds locked (deleted tasks are neither: their attempts are logged).
	 */
	locked_plan = SPI_prepare(
		"SELECT u.id FROM pg_catalog.unnest($1) AS u(id)"
		" WHERE NOT EXISTS (SELECT FROM jobflow.tasks t WHERE t.id = u.id"
		"                   FOR NO KEY UPDATE SKIP LOCKED)"
		"   AND EXISTS (SELECT FROM jobflow.tasks t WHERE t.id = u.id)",
		1, &utypes[0]);
	if (locked_plan == NULL)
		elog(ERROR, "could not prepare the row lock check: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(locked_plan);
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

/* Write rows[from .. from+n) with the two batch statements. */
static void
write_rows(int from, int n)
{
	Datum		uv[7];
	Datum		iv[10];
	Datum	   *e[10];
	bool	   *nl[10];
	int			c;
	int			i;
	int			ret;

	for (c = 0; c < 10; c++)
	{
		e[c] = palloc(sizeof(Datum) * n);
		nl[c] = palloc0(sizeof(bool) * n);
	}
	/* columns: id, attempt, owner, scheduled, started, finished, outcome, status, error, response */
	for (i = 0; i < n; i++)
	{
		OutcomeRow *r = &rows[from + i];

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
	}

	/* tasks: id, state, next_run_at, status, error */
	{
		Datum	   *state = palloc(sizeof(Datum) * n);
		Datum	   *unclaim = palloc(sizeof(Datum) * n);
		Datum	   *next = palloc(sizeof(Datum) * n);
		bool	   *next_null = palloc(sizeof(bool) * n);

		for (i = 0; i < n; i++)
		{
			state[i] = CStringGetTextDatum(rows[from + i].state);
			unclaim[i] = Int32GetDatum(rows[from + i].outcome == OUTCOME_UNSENT ? 1 : 0);
			next[i] = ts_or_null(rows[from + i].next_run_at,
								 rows[from + i].outcome == OUTCOME_RETRY, &next_null[i]);
		}
		uv[0] = PointerGetDatum(make_array(e[0], NULL, n, INT8OID));
		uv[1] = PointerGetDatum(make_array(state, NULL, n, TEXTOID));
		uv[2] = PointerGetDatum(make_array(next, next_null, n, TIMESTAMPTZOID));
		uv[3] = PointerGetDatum(make_array(e[7], nl[7], n, INT4OID));
		uv[4] = PointerGetDatum(make_array(e[8], nl[8], n, TEXTOID));
		uv[5] = PointerGetDatum(make_array(unclaim, NULL, n, INT4OID));
	}
	iv[0] = uv[0];
	iv[1] = PointerGetDatum(make_array(e[1], NULL, n, INT4OID));
	uv[6] = iv[1];				/* only the attempt that produced it */
	iv[2] = PointerGetDatum(make_array(e[2], NULL, n, OIDOID));
	iv[3] = PointerGetDatum(make_array(e[3], nl[3], n, TIMESTAMPTZOID));
	iv[4] = PointerGetDatum(make_array(e[4], nl[4], n, TIMESTAMPTZOID));
	iv[5] = PointerGetDatum(make_array(e[5], nl[5], n, TIMESTAMPTZOID));
	iv[6] = PointerGetDatum(make_array(e[6], NULL, n, TEXTOID));
	iv[7] = uv[3];
	iv[8] = uv[4];
	iv[9] = PointerGetDatum(make_array(e[9], nl[9], n, TEXTOID));

	ret = SPI_execute_plan(update_plan, uv, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "outcome update failed: %s", SPI_result_code_string(ret));
	ret = SPI_execute_plan(insert_plan, iv, NULL, false, 0);
	if (ret != SPI_OK_INSERT)
		elog(ERROR, "log insert failed: %s", SPI_result_code_string(ret));
	worker_count_statement(2);
}

/*
 * Run write_rows in a subtransaction; on error, roll it back and report
 * false, leaving the outer transaction usable.
 */
static bool
try_write_rows(int from, int n)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		write_rows(from, n);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ereport(WARNING,
				(errmsg("jobflow could not write %d outcome row(s) starting with task %lld: %s",
						n, (long long) rows[from].id, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return ok;
}

static void
add_orphan(int64 id)
{
	if (norphans == maxorphans)
	{
		maxorphans = Max(16, maxorphans * 2);
		orphans = orphans ? repalloc(orphans, sizeof(int64) * maxorphans)
			: MemoryContextAlloc(TopMemoryContext, sizeof(int64) * maxorphans);
	}
	orphans[norphans++] = id;
}

/* The tasks whose outcome could not be written, oldest first. */
int
log_writer_orphans(int64 **ids)
{
	*ids = orphans;
	return norphans;
}

/* The first n orphans were rescued. */
void
log_writer_forget_orphans(int n)
{
	memmove(orphans, orphans + n, sizeof(int64) * (norphans - n));
	norphans -= n;
}

/*
 * Lock the tasks of the buffered outcomes, skipping those another
 * transaction holds locked, and move the outcomes of those to the end of
 * the buffer: they wait for a later flush.  Returns how many rows, from
 * the start, can be written now without waiting for anyone.
 */
static int
lock_rows(void)
{
	Datum	   *ids = palloc(sizeof(Datum) * nrows);
	OutcomeRow *later;
	int64	   *locked;
	Datum		arg;
	int			nlocked;
	int			nwrite = 0;
	int			nlater = 0;
	int			i;
	int			ret;

	for (i = 0; i < nrows; i++)
		ids[i] = Int64GetDatum(rows[i].id);
	arg = PointerGetDatum(make_array(ids, NULL, nrows, INT8OID));
	ret = SPI_execute_plan(locked_plan, &arg, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "row lock check failed: %s", SPI_result_code_string(ret));
	worker_count_statement(1);
	if (SPI_processed == 0)
		return nrows;

	nlocked = (int) SPI_processed;
	locked = palloc(sizeof(int64) * nlocked);
	for (i = 0; i < nlocked; i++)
	{
		bool		isnull;

		locked[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
												SPI_tuptable->tupdesc, 1, &isnull));
	}
	qsort(locked, nlocked, sizeof(int64), jf_compare_int64);
	later = palloc(sizeof(OutcomeRow) * nrows);
	for (i = 0; i < nrows; i++)
	{
		if (bsearch(&rows[i].id, locked, nlocked, sizeof(int64), jf_compare_int64))
			later[nlater++] = rows[i];
		else
			rows[nwrite++] = rows[i];
	}
	memcpy(rows + nwrite, later, sizeof(OutcomeRow) * nlater);
	return nwrite;
}

/*
 * A copy of rows[from .. nrows), the outcomes held back, in a new buffer
 * context made a child of the current one: an error before the flush has
 * forgotten what it wrote deletes it with its parent.
 */
static OutcomeRow *
copy_held(int from, MemoryContext *cxt)
{
	int			n = nrows - from;
	OutcomeRow *copy;
	int			i;

	*cxt = AllocSetContextCreate(buffer_cxt, "jobflow log buffer", ALLOCSET_DEFAULT_SIZES);
	copy = MemoryContextAlloc(*cxt, sizeof(OutcomeRow) * Max(64, n));
	for (i = 0; i < n; i++)
	{
		copy[i] = rows[from + i];
		if (copy[i].error)
			copy[i].error = MemoryContextStrdup(*cxt, copy[i].error);
		if (copy[i].response)
			copy[i].response = MemoryContextStrdup(*cxt, copy[i].response);
	}
	return copy;
}

/*
 * Write every buffered outcome in one transaction, but for those of tasks
 * another transaction holds locked (see the file header).
 */
void
log_writer_flush(void)
{
	TimestampTz flush_start;
	int			i;
	int			nwrite;
	uint64		written;
	int64	   *failed;
	int			nfailed = 0;
	MemoryContext held_cxt = NULL;
	OutcomeRow *held = NULL;

	if (nrows == 0)
		return;
	flush_start = GetCurrentTimestamp();
	jf_xact_begin("jobflow: write outcomes");
	if (update_plan == NULL)
		prepare_plans();
	nwrite = lock_rows();
	written = nwrite;
	/* outlives the transaction; goes with the buffer below */
	failed = MemoryContextAlloc(buffer_cxt, sizeof(int64) * Max(nwrite, 1));
	if (nwrite > 0 && !try_write_rows(0, nwrite))
	{
		/*
		 * One by one: a row that still fails is reported and its task,
		 * still running, is handed to the next housekeeping's rescue once
		 * the others are committed.
		 */
		written = 0;
		for (i = 0; i < nwrite; i++)
		{
			if (try_write_rows(i, 1))
				written++;
			else
				failed[nfailed++] = rows[i].id;
		}
	}
	if (nwrite < nrows)
		held = copy_held(nwrite, &held_cxt);
	jf_fault("flush");
	jf_xact_commit();
	jf_metrics_observe(JF_HIST_FLUSH, GetCurrentTimestamp() - flush_start);

	/*
	 * Written: forget the rows before anything else can fail, or an ERROR
	 * from here on would have the next flush write them again.  Their
	 * memory goes with the buffer's context below (or at the next flush).
	 */
	nheld = nrows - nwrite;
	nrows = nheld;
	maxrows = nheld > 0 ? Max(64, nheld) : 0;
	rows = held;
	pg_atomic_write_u64(&jobflow_shared->buffered_rows, nrows);
	jf_fault("after_flush");
	for (i = 0; i < nfailed; i++)
		add_orphan(failed[i]);

	pg_atomic_fetch_add_u64(&jobflow_shared->flushes, 1);
	pg_atomic_fetch_add_u64(&jobflow_shared->flushed_rows, written);
	pg_atomic_write_u64(&jobflow_shared->last_flush_ms, (uint64) jf_now_ms());
	if (held_cxt != NULL)
	{
		MemoryContextSetParent(held_cxt, TopMemoryContext);
		MemoryContextDelete(buffer_cxt);
		buffer_cxt = held_cxt;
		held_retry_ms = jf_now_ms() + LOCKED_RETRY_MS;
	}
	else
		MemoryContextReset(buffer_cxt);
}

/*
 * The extension was dropped: buffered outcomes and orphans belong to tasks
 * that no longer exist, and their ids may already name new tasks.
 */
void
log_writer_discard(void)
{
	nrows = 0;
	nheld = 0;
	maxrows = 0;
	rows = NULL;
	MemoryContextReset(buffer_cxt);
	norphans = 0;
	pg_atomic_write_u64(&jobflow_shared->buffered_rows, 0);
}
