/*-------------------------------------------------------------------------
 *
 * jobflow.c
 *	  Module entry point: settings, shared memory, worker registration and
 *	  the small SQL-callable functions that read the worker's shared state.
 *
 * jobflow must be in shared_preload_libraries: its worker is registered by
 * the postmaster and its status lives in shared memory.
 *
 *-------------------------------------------------------------------------
 */
#include "jobflow.h"

#include "guard.h"
#include "http.h"

#include <limits.h>

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "access/htup_details.h"

PG_MODULE_MAGIC;

char	   *jobflow_database_name = NULL;
int			jobflow_horizon_s = 3600;
int			jobflow_max_body_size = 1024 * 1024;
int			jobflow_max_headers_size = 16 * 1024;
int			jobflow_max_concurrent = 512;
int			jobflow_max_per_host = 64;
int			jobflow_max_response_size = 4096;
int			jobflow_max_redirects = 3;
int			jobflow_log_batch_size = 500;
int			jobflow_log_flush_ms = 50;
int			jobflow_claim_batch_size = 1000;
int			jobflow_retry_base_ms = 1000;
int			jobflow_retry_max_ms = 3600 * 1000;
int			jobflow_reconcile_ms = 5000;
int			jobflow_shutdown_grace_ms = 5000;
char	   *jobflow_deny_networks = NULL;
bool		jobflow_dispatch = true;

JobflowShared *jobflow_shared = NULL;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

void		_PG_init(void);
static void jobflow_define_gucs(void);
static void jobflow_shmem_request(void);
static void jobflow_shmem_startup(void);

/*
 * The worker and the shared status block only exist when the postmaster
 * loads us, so refuse any other way of loading, with a hint.  pg_upgrade
 * loads every library to check it exists: let it.
 */
void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
	{
		if (IsBinaryUpgrade)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobflow must be loaded via shared_preload_libraries"),
				 errhint("Add jobflow to shared_preload_libraries in postgresql.conf and restart the server.")));
	}

	jobflow_define_gucs();
	jobflow_register_worker();
	jf_guard_init();

#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = jobflow_shmem_request;
#else
	jobflow_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = jobflow_shmem_startup;

}

/*
 * Cloud metadata endpoints answer any process on the host: a task must
 * not be able to read them into its log.  Operators extend the list (for
 * example with loopback and private ranges) to suit their network.
 */
#define JOBFLOW_DEFAULT_DENY_NETWORKS \
	"169.254.0.0/16, fe80::/10, fd00:ec2::254/128, 100.100.100.200/32"

static bool
check_deny_networks(char **newval, void **extra, GucSource source)
{
	char		err[128];

	if (jf_http_check_networks(*newval, err, sizeof(err)))
		return true;
	GUC_check_errdetail("The list must hold IPv4 or IPv6 addresses with optional /bits, but has an %s.", err);
	return false;
}

/* All settings in one place, so README and code cannot drift apart. */
static void
jobflow_define_gucs(void)
{
	DefineCustomStringVariable("jobflow.database_name",
							   "Database in which the jobflow worker runs.",
							   NULL, &jobflow_database_name, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.horizon",
							"How far ahead the worker keeps due tasks in memory.",
							"Tasks due later stay in the table until the horizon reaches them.",
							&jobflow_horizon_s, 3600, 60, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_body_size",
							"Largest request body a task may carry.",
							NULL, &jobflow_max_body_size, 1024 * 1024, 0, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_headers_size",
							"Largest total size of a task's request headers.",
							NULL, &jobflow_max_headers_size, 16 * 1024, 0, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_concurrent_requests",
							"Most HTTP requests the worker has in flight at once.",
							NULL, &jobflow_max_concurrent, 512, 1, 65536,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_requests_per_host",
							"Most HTTP requests in flight to one host and port.",
							NULL, &jobflow_max_per_host, 64, 1, 65536,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_response_size",
							"How much of each response body is kept in the task log.",
							NULL, &jobflow_max_response_size, 4096, 0, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.max_redirects",
							"Most redirects followed per request (0 follows none).",
							NULL, &jobflow_max_redirects, 3, 0, 20,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.log_batch_size",
							"Outcomes buffered before the worker writes them.",
							NULL, &jobflow_log_batch_size, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.log_flush_ms",
							"Longest time an outcome stays buffered before it is written.",
							NULL, &jobflow_log_flush_ms, 50, 1, 60000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.claim_batch_size",
							"Most due tasks claimed by one statement.",
							NULL, &jobflow_claim_batch_size, 1000, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.retry_backoff_base",
							"Delay before the first retry; it doubles with each attempt.",
							NULL, &jobflow_retry_base_ms, 1000, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.retry_backoff_max",
							"Longest delay between two attempts, Retry-After included.",
							NULL, &jobflow_retry_max_ms, 3600 * 1000, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.reconcile_interval",
							"How often the worker rescans the table for tasks it was not told about.",
							NULL, &jobflow_reconcile_ms, 5000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobflow.shutdown_grace",
							"How long a stopping worker waits for requests in flight.",
							NULL, &jobflow_shutdown_grace_ms, 5000, 0, 600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomStringVariable("jobflow.deny_networks",
							   "Networks the worker never connects to.",
							   "A list of address/prefix entries, IPv4 or IPv6. Checked at connect time, "
							   "so host names and redirects that lead there are refused too.",
							   &jobflow_deny_networks, JOBFLOW_DEFAULT_DENY_NETWORKS,
							   PGC_SIGHUP, 0, check_deny_networks, NULL, NULL);

	DefineCustomBoolVariable("jobflow.dispatch",
							 "Whether the worker sends callbacks.",
							 "Off, tasks and cron occurrences are still scheduled and kept; they fire when it is on again.",
							 &jobflow_dispatch, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	MarkGUCPrefixReserved("jobflow");
}

static void
jobflow_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(MAXALIGN(sizeof(JobflowShared)));
}

/* Create or attach the status block; zero means "no worker yet". */
static void
jobflow_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	jobflow_shared = ShmemInitStruct("jobflow", sizeof(JobflowShared), &found);
	if (!found)
	{
		pg_atomic_uint64 *c;

		memset(jobflow_shared, 0, sizeof(JobflowShared));
		SpinLockInit(&jobflow_shared->mutex);
		for (c = &jobflow_shared->horizon_end_ms;
			 c <= &jobflow_shared->statements; c++)
			pg_atomic_init_u64(c, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Due time the notify trigger compares new tasks against: a task due later
 * need not wake the worker, whose rolling rescan loads it at least one
 * jobflow.reconcile_interval before it is due.  Sparing those transactions
 * NOTIFY spares them its cluster-wide lock, held through the commit's WAL
 * flush.  With no worker attached every pending task is announced.
 */
TimestampTz
jobflow_notify_before(void)
{
	uint64		end_ms = 0;
	pid_t		pid = 0;
	TimestampTz result;

	if (jobflow_shared != NULL)
	{
		SpinLockAcquire(&jobflow_shared->mutex);
		pid = jobflow_shared->worker_pid;
		SpinLockRelease(&jobflow_shared->mutex);
		end_ms = pg_atomic_read_u64(&jobflow_shared->notify_before_ms);
	}
	if (pid == 0 || end_ms == 0)
	{
		TIMESTAMP_NOEND(result);
		return result;
	}
	return (TimestampTz) ((int64) end_ms * 1000 -
						  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

PG_FUNCTION_INFO_V1(jobflow_wake_horizon);
Datum
jobflow_wake_horizon(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(jobflow_notify_before());
}

static Datum
ms_to_timestamptz_datum(uint64 ms, bool *isnull)
{
	*isnull = (ms == 0);
	return TimestampTzGetDatum((TimestampTz) ((int64) ms * 1000 -
											  (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY));
}

/*
 * What the worker is doing, for operators: its pid (NULL when no worker is
 * attached), what it holds and cumulative counters since server start.
 */
PG_FUNCTION_INFO_V1(jobflow_worker_status);
Datum
jobflow_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[16];
	bool		nulls[16];
	pid_t		pid;
	JobflowShared *s = jobflow_shared;
	int			i = 0;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("jobflow shared memory is not initialised")));
	memset(nulls, 0, sizeof(nulls));

	SpinLockAcquire(&s->mutex);
	pid = s->worker_pid;
	SpinLockRelease(&s->mutex);

	values[i] = Int32GetDatum(pid);
	nulls[i++] = (pid == 0);
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->started_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->wheel_tasks));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->wheel_bytes));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->horizon_end_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->in_flight));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->queued));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->buffered_rows));
	values[i] = ms_to_timestamptz_datum(pg_atomic_read_u64(&s->last_flush_ms), &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->fired));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->succeeded));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->failed));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->retried));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushes));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->flushed_rows));
	values[i++] = Int64GetDatum(pg_atomic_read_u64(&s->statements));
	Assert(i == 16);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
