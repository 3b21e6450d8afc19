/*-------------------------------------------------------------------------
 *
 * xact.c
 *	  The worker's transactions (SPI, snapshot, activity, the durability
 *	  of claims, the scan rule of fetches by id) and its statement counter.
 *
 * The bottom layer of the worker: the feeder, dispatcher, log writer,
 * pruner and guard use it, and it uses none of them (the check each
 * transaction makes first, that the extension served is still the one
 * the worker started with, is handed in by the worker at start).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "worker/xact.h"
#include "launcher/slots.h"

/* the memory context current when the worker's transaction began */
static MemoryContext xact_caller_cxt = NULL;

/* the cluster's synchronous_commit, for claims (see jf_xact_begin_durable) */
static char durable_commit[32] = "on";

/* run first in each transaction (guard.c's incarnation check) */
static JfXactCheck begin_check = NULL;

/*
 * At the worker's start, before it turns synchronous_commit off for its
 * own transactions: what claims commit with, and the check each
 * transaction makes first.
 */
void
jf_xact_init(const char *durable, JfXactCheck check)
{
	strlcpy(durable_commit, durable, sizeof(durable_commit));
	begin_check = check;
}

/* One transaction with SPI and a snapshot, as worker_spi does. */
void
jf_xact_begin(const char *activity)
{
	xact_caller_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	/* the extension served is locked, or this fails: see guard.c */
	if (begin_check != NULL)
		begin_check();
}

/*
 * The same, for a transaction whose commit must be as durable as the
 * cluster's synchronous_commit makes any other (a claim: its requests go
 * out right after it, and an attempt that may have been sent must never be
 * forgotten by a crash or a failover).  The worker's other transactions
 * commit asynchronously: what they lose, the next start recomputes.
 */
void
jf_xact_begin_durable(const char *activity)
{
	jf_xact_begin(activity);
	(void) set_config_option("synchronous_commit", durable_commit, PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * The statements that fetch tasks by id may not scan jobflow.tasks: each
 * is planned once and kept, and planned while the table was small (the
 * first turns after start, or a new database) it would read every task at
 * every execution once there are 200,000 (the claim: 35 ms a claim; the
 * outcome write: a nested loop over the table, 50-390 ms a flush, and
 * every tenant's callbacks 100-350 ms late).  For the current transaction
 * only: statements that must read the table whole (sweeps, rescues) keep
 * their sequential scans.  The worker runs without JIT, which the cost of
 * a disabled scan would otherwise set off.
 */
void
jf_xact_by_id_only(void)
{
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * Back to the context and state the caller had before jf_xact_begin, its
 * statistics sent.
 */
void
jf_xact_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	/* back to the caller's context (a turn's), not TopMemoryContext */
	MemoryContextSwitchTo(xact_caller_cxt);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The statements the worker ran, for worker_status() and the metrics. */
void
jf_xact_count_statements(int n)
{
	pg_atomic_fetch_add_u64(&jf_figures->statements, n);
}
