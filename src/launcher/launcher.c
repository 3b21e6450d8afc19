/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher: one jobflow worker for every database that has the
 *	  extension, in per-database slots of shared memory.
 *
 * The launcher is a background worker connected to no database: it reads
 * only the shared catalog pg_database.  Whether a database has extension
 * jobflow can only be seen from inside it, so at server start (and after
 * lost requests) the launcher starts a short-lived probe worker in each
 * connectable database, a few at a time; a probe that finds the extension
 * asks for the database to be served.  CREATE EXTENSION asks the same at
 * its commit, so a new database is served at once, without a restart.
 *
 * Serving a database means assigning it one of jobflow.max_databases
 * slots (its worker's status, wake-up ring and figures) and registering a
 * dynamic worker for the slot.  The postmaster restarts a worker that
 * exits with an error, as it restarted the one worker before; a worker
 * that exits with code 0 is gone for good: it found the extension absent
 * (DROP EXTENSION, then freed the slot itself), or its database is being
 * dropped, copied, renamed or moved.  Beyond the cap the launcher logs a
 * WARNING (so does CREATE EXTENSION) and the database's tasks stay pending
 * until a slot is freed.
 *
 * DROP DATABASE, CREATE DATABASE ... TEMPLATE, ALTER DATABASE RENAME and
 * SET TABLESPACE fail while another session is connected to the database
 * (and PostgreSQL 15 cannot be told to end a background worker for them).
 * The utility hook (jobflow.c, hook.c) of the backend running one
 * of them holds the database first: no worker or probe starts there, its
 * worker is told to stop, and the statement waits for it to exit.  The
 * hold ends with the transaction, which asks the launcher to look at the
 * database again (serving it if it still exists with the extension,
 * freeing its slot if it is gone).
 *
 * The slots, the requests and the holds live in shared memory (slots.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "launcher/launcher.h"
#include "base/compat.h"
#include "launcher/internal.h"

#define MAX_PROBES 2			/* probe workers at once */
#define MAX_PENDING 1024		/* requests the launcher keeps for later */
#define RETRY_MS 1000			/* a worker or probe that could not start */
#define CHECK_MS 10000			/* slots of vanished databases are freed */

/* From _PG_init: the launcher, started with the server, restarted at once. */
void
jf_launcher_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* on a standby, start at promotion: nothing can be claimed before */
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "jobflow");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "jobflow_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "jobflow launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "jobflow launcher");
	RegisterBackgroundWorker(&worker);
}

/* ----------------------------------------------------------------------
 * The probe: does this database have jobflow?
 * ---------------------------------------------------------------------- */

void
jobflow_probe_main(Datum main_arg)
{
	Oid			dboid = DatumGetObjectId(main_arg);
	bool		held;
	bool		exists;

	/* as the worker's: never bgworker_die, which reports from its handler */
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	SpinLockAcquire(&jf_ls->mutex);
	held = jf_launcher_is_held(dboid);
	SpinLockRelease(&jf_ls->mutex);
	if (held)
		proc_exit(0);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	/* a transaction_timeout set on the database must not end the probe */
	jf_pin_session_settings();
	pgstat_report_appname("jobflow probe");
	StartTransactionCommand();
	exists = OidIsValid(get_extension_oid("jobflow", true));
	CommitTransactionCommand();
	if (exists)
		jf_launcher_post(dboid, REQ_SERVE);
	proc_exit(0);
}

/* ----------------------------------------------------------------------
 * The launcher
 * ---------------------------------------------------------------------- */

typedef struct DbInfo
{
	Oid			oid;
	NameData	name;
	bool		servable;		/* connectable, not a template, valid */
} DbInfo;

static JfLaunchRequest pending[MAX_PENDING];
static int	npending = 0;
static bool probe_all = true;
static Oid	unserved[MAX_PENDING];	/* over the cap, warned about */
static int	nunserved = 0;
static BackgroundWorkerHandle *probes[MAX_PROBES];
static uint32 seen_freed = 0;
static MemoryContext turn_cxt;

/* Every database, from pg_database (a shared catalog), in turn_cxt. */
static DbInfo *
list_databases(int *n)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	int			cap = 16;
	DbInfo	   *dbs = MemoryContextAlloc(turn_cxt, sizeof(DbInfo) * cap);

	*n = 0;
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);

		if (*n == cap)
		{
			cap *= 2;
			dbs = repalloc(dbs, sizeof(DbInfo) * cap);
		}
		dbs[*n].oid = d->oid;
		dbs[*n].name = d->datname;
		/* datconnlimit -2: a DROP DATABASE that was interrupted */
		dbs[*n].servable = d->datallowconn && !d->datistemplate && d->datconnlimit != -2;
		(*n)++;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return dbs;
}

static DbInfo *
find_db(DbInfo *dbs, int n, Oid oid)
{
	int			i;

	for (i = 0; i < n; i++)
		if (dbs[i].oid == oid)
			return &dbs[i];
	return NULL;
}

static void
add_pending(Oid dboid, JfLaunchKind kind)
{
	int			i;

	for (i = 0; i < npending; i++)
	{
		if (pending[i].dboid == dboid)
		{
			if (kind == REQ_SERVE)
				pending[i].kind = REQ_SERVE;
			return;
		}
	}
	if (npending < MAX_PENDING)
	{
		pending[npending].dboid = dboid;
		pending[npending].kind = kind;
		npending++;
	}
	else
		probe_all = true;
}

/* A database is gone: free its slots (their workers, if any, exit with 0). */
static void
free_slot(Oid dboid)
{
	int			i;

	SpinLockAcquire(&jf_ls->mutex);
	for (i = 0; i < jf_slots_count(); i++)
	{
		if (jf_ls->slots[i].dboid == dboid)
		{
			jf_ls->slots[i].dboid = InvalidOid;
			jf_ls->slots[i].registered = false;
			jf_ls->freed++;
		}
	}
	SpinLockRelease(&jf_ls->mutex);
}

/* Register the worker of slot i; false (logged once) when no room. */
static bool
start_worker(int i, JfWorkerExtra extra, const char *dbname)
{
	static bool warned = false;
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	/* errors: the postmaster starts it again, as it did the one worker */
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "jobflow");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "jobflow_worker_main");
	if (jobflow_workers_per_database > 1)
		snprintf(worker.bgw_name, BGW_MAXLEN, "jobflow worker %d of %d for database %s",
				 jf_ls->slots[i].part + 1, jobflow_workers_per_database, dbname);
	else
		snprintf(worker.bgw_name, BGW_MAXLEN, "jobflow worker for database %s", dbname);
	snprintf(worker.bgw_type, BGW_MAXLEN, "jobflow worker");
	worker.bgw_main_arg = Int32GetDatum(i);
	memcpy(worker.bgw_extra, &extra, sizeof(extra));
	if (RegisterDynamicBackgroundWorker(&worker, NULL))
	{
		warned = false;
		return true;
	}
	if (!warned)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("jobflow launcher could not start a worker for database \"%s\": no background worker slot is free", dbname),
				 errdetail("It tries again every second."),
				 errhint("Raise max_worker_processes: jobflow needs jobflow.workers_per_database per database served plus two.")));
	warned = true;
	return false;
}

static bool
start_probe(DbInfo *db)
{
	BackgroundWorker worker;
	int			i;

	for (i = 0; i < MAX_PROBES; i++)
		if (probes[i] == NULL)
			break;
	if (i == MAX_PROBES)
		return false;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "jobflow");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "jobflow_probe_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "jobflow probe of database %s", NameStr(db->name));
	snprintf(worker.bgw_type, BGW_MAXLEN, "jobflow probe");
	worker.bgw_main_arg = ObjectIdGetDatum(db->oid);
	worker.bgw_notify_pid = MyProcPid;
	MemoryContextSwitchTo(TopMemoryContext);
	if (!RegisterDynamicBackgroundWorker(&worker, &probes[i]))
		probes[i] = NULL;
	MemoryContextSwitchTo(turn_cxt);
	return probes[i] != NULL;
}

/*
 * Act on one request; false to try again later (no room for a worker or
 * a probe yet).
 */
static bool
handle(JfLaunchRequest *r, DbInfo *dbs, int ndbs)
{
	DbInfo	   *db = find_db(dbs, ndbs, r->dboid);
	JfSlot	   *s;
	JfWorkerExtra extra[JF_MAX_WORKERS_PER_DB];
	int			chosen[JF_MAX_WORKERS_PER_DB];
	int			nstart = 0;
	int			i;
	int			p;
	bool		all_started = true;

	if (db == NULL)
	{
		free_slot(r->dboid);
		return true;
	}
	SpinLockAcquire(&jf_ls->mutex);
	/* held: the hold's end asks again */
	if (jf_launcher_is_held(r->dboid) || !db->servable)
	{
		SpinLockRelease(&jf_ls->mutex);
		return true;
	}
	i = jf_launcher_slot_index(r->dboid);
	if (i < 0 && r->kind == REQ_PROBE)
	{
		SpinLockRelease(&jf_ls->mutex);
		return start_probe(db);
	}
	/* a slot for each of its workers that has none (all of them, or none) */
	{
		bool		have[JF_MAX_WORKERS_PER_DB] = {false};
		int			nmissing = 0;
		int			nfree = 0;

		for (i = 0; i < jf_slots_count(); i++)
			if (jf_ls->slots[i].dboid == r->dboid)
				have[jf_ls->slots[i].part] = true;
		for (p = 0; p < jobflow_workers_per_database; p++)
			nmissing += have[p] ? 0 : 1;
		for (i = 0; i < jf_slots_count() && nfree < nmissing; i++)
		{
			s = &jf_ls->slots[i];
			if (!OidIsValid(s->dboid) && !s->registered && s->worker_pid == 0)
				chosen[nfree++] = i;
		}
		if (nfree < nmissing)
		{
			SpinLockRelease(&jf_ls->mutex);
			for (i = 0; i < nunserved; i++)
				if (unserved[i] == r->dboid)
					return true;
			if (nunserved < MAX_PENDING)
				unserved[nunserved++] = r->dboid;
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("jobflow serves at most %d databases: database \"%s\" is not served",
							jobflow_max_databases, NameStr(db->name)),
					 errdetail("Its tasks stay pending until another database drops extension jobflow or is dropped."),
					 errhint("Raise jobflow.max_databases (and max_worker_processes) and restart the server.")));
			return true;
		}
		nfree = 0;
		for (p = 0; p < jobflow_workers_per_database; p++)
		{
			if (have[p])
				continue;
			s = &jf_ls->slots[chosen[nfree++]];

			/*
			 * Its figures start from zero before the database's workers
			 * can find it: a running worker of the database (the second,
			 * while the first's slot is replaced) adds to the first's
			 * slot as soon as it finds it, and a worker zeroing them as
			 * it attached wiped what a faster one had added.  Rare, and
			 * only stores: done under the lock.
			 */
			jf_slot_reset(s);
			/* readers find slots by (dboid, part) without the lock */
			s->part = p;
			pg_write_barrier();
			s->dboid = r->dboid;
			s->incarnation = ++jf_ls->next_incarnation;
			s->registered = false;
			s->requested = false;
			pg_atomic_write_u32(&s->recheck, 0);
		}
	}
	/* register each of its workers that is not */
	for (i = 0; i < jf_slots_count(); i++)
	{
		s = &jf_ls->slots[i];
		if (s->dboid != r->dboid)
			continue;
		if (r->kind == REQ_SERVE)
			s->requested = true;
		if (!s->registered && nstart < JF_MAX_WORKERS_PER_DB)
		{
			/* before registering: the worker may clear it at once */
			s->registered = true;
			chosen[nstart] = i;
			extra[nstart].dboid = s->dboid;
			extra[nstart].incarnation = s->incarnation;
			nstart++;
		}
	}
	SpinLockRelease(&jf_ls->mutex);
	for (p = 0; p < nstart; p++)
	{
		if (start_worker(chosen[p], extra[p], NameStr(db->name)))
			continue;
		all_started = false;
		SpinLockAcquire(&jf_ls->mutex);
		s = &jf_ls->slots[chosen[p]];
		if (s->incarnation == extra[p].incarnation)
			s->registered = false;
		SpinLockRelease(&jf_ls->mutex);
	}
	return all_started;
}

/*
 * Slots whose database vanished without a word (a crash, say) are freed,
 * and those of databases no worker may connect to any more (ALTER
 * DATABASE ... ALLOW_CONNECTIONS false or IS_TEMPLATE true) once their
 * worker is not running: its restarts would fail to connect, again and
 * again.
 */
static void
free_vanished(DbInfo *dbs, int ndbs)
{
	int			i;
	int			j;

	for (i = 0; i < jf_slots_count(); i++)
	{
		JfSlot	   *s = &jf_ls->slots[i];
		Oid			dboid = s->dboid;
		DbInfo	   *db;
		pid_t		pid;

		if (!OidIsValid(dboid))
			continue;
		db = find_db(dbs, ndbs, dboid);
		/* not servable: once none of its workers runs (each holds a slot) */
		pid = 0;
		for (j = 0; j < jf_slots_count() && db != NULL && pid == 0; j++)
		{
			JfSlot	   *o = &jf_ls->slots[j];

			SpinLockAcquire(&o->mutex);
			if (o->dboid == dboid)
				pid = o->worker_pid;
			SpinLockRelease(&o->mutex);
		}
		if (db == NULL || (!db->servable && pid == 0))
			free_slot(dboid);
	}
}

/* One turn: take requests, reap probes, act. */
static void
launcher_turn(void)
{
	JfLaunchRequest taken[MAX_REQUESTS];
	int			ntaken;
	int			i;
	int			n;
	DbInfo	   *dbs;
	int			ndbs;
	uint32		freed;

	SpinLockAcquire(&jf_ls->mutex);
	ntaken = jf_ls->nrequests;
	memcpy(taken, jf_ls->requests, sizeof(JfLaunchRequest) * ntaken);
	jf_ls->nrequests = 0;
	if (jf_ls->overflowed)
		probe_all = true;
	jf_ls->overflowed = false;
	freed = jf_ls->freed;
	SpinLockRelease(&jf_ls->mutex);

	for (i = 0; i < MAX_PROBES; i++)
	{
		pid_t		pid;

		if (probes[i] != NULL &&
			GetBackgroundWorkerPid(probes[i], &pid) == BGWH_STOPPED)
		{
			pfree(probes[i]);
			probes[i] = NULL;
		}
	}
	for (i = 0; i < ntaken; i++)
		add_pending(taken[i].dboid, taken[i].kind);
	/* a slot was freed: databases turned away get another look */
	if (freed != seen_freed)
	{
		seen_freed = freed;
		for (i = 0; i < nunserved; i++)
			add_pending(unserved[i], REQ_PROBE);
		nunserved = 0;
	}

	dbs = list_databases(&ndbs);
	free_vanished(dbs, ndbs);
	if (probe_all)
	{
		probe_all = false;
		for (i = 0; i < ndbs; i++)
			if (dbs[i].servable)
				add_pending(dbs[i].oid, REQ_PROBE);
	}
	n = 0;
	for (i = 0; i < npending; i++)
		if (!handle(&pending[i], dbs, ndbs))
			pending[n++] = pending[i];
	npending = n;

	/* a slot freed just now goes to a database waiting at once */
	if (nunserved > 0 && jf_ls->freed != seen_freed)
		SetLatch(MyLatch);
}

static void
launcher_detach(int code, Datum arg)
{
	SpinLockAcquire(&jf_ls->mutex);
	jf_ls->launcher_pid = 0;
	jf_ls->launcher_latch = NULL;
	SpinLockRelease(&jf_ls->mutex);
}

void
jobflow_launcher_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("jobflow launcher");
	turn_cxt = AllocSetContextCreate(TopMemoryContext, "jobflow launcher",
									 ALLOCSET_DEFAULT_SIZES);

	SpinLockAcquire(&jf_ls->mutex);
	jf_ls->launcher_pid = MyProcPid;
	jf_ls->launcher_latch = MyLatch;
	SpinLockRelease(&jf_ls->mutex);
	before_shmem_exit(launcher_detach, (Datum) 0);

	if (strcmp(jobflow_database_name, "postgres") != 0)
		ereport(WARNING,
				(errmsg("jobflow.database_name is deprecated and ignored"),
				 errdetail("Every database with extension jobflow is served, up to jobflow.max_databases.")));
	if (max_worker_processes < jf_slots_count() + 2)
		ereport(WARNING,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_worker_processes (%d) is less than jobflow.max_databases (%d) times jobflow.workers_per_database (%d) plus 2",
						max_worker_processes, jobflow_max_databases, jobflow_workers_per_database),
				 errdetail("jobflow needs a background worker per worker of each database served, one for its launcher and one for a probe."),
				 errhint("Raise max_worker_processes or lower jobflow.max_databases or jobflow.workers_per_database.")));
	ereport(LOG,
			(errmsg("jobflow launcher started: serving up to %d databases",
					jobflow_max_databases)));

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		MemoryContextReset(turn_cxt);
		MemoryContextSwitchTo(turn_cxt);
		launcher_turn();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 npending > 0 ? RETRY_MS : CHECK_MS,
						 jf_wait_event(JF_WAIT_LAUNCHER));
		ResetLatch(MyLatch);
	}
}
