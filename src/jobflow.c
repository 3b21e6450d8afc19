/*-------------------------------------------------------------------------
 *
 * jobflow.c
 *	  Module entry point: _PG_init and the hooks jobflow installs in the
 *	  postmaster (shared memory) and in every backend (ProcessUtility).
 *
 * jobflow must be in shared_preload_libraries: its launcher is registered
 * by the postmaster, and its workers' status lives in shared memory, in
 * one slot per database served.  This file is the top of the layers
 * (src/README.md): it calls down into each part, and no part calls it.
 * Only this file assigns hooks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/utility.h"

#include "api/drops.h"
#include "base/settings.h"
#include "launcher/dropped_roles.h"
#include "launcher/hook.h"
#include "launcher/launcher.h"
#include "launcher/prepared.h"
#include "launcher/restore.h"
#include "launcher/slots.h"

/* 18+: name and version shown by pg_get_loaded_modules() */
#ifdef PG_MODULE_MAGIC_EXT
PG_MODULE_MAGIC_EXT(.name = "jobflow",.version = JOBFLOW_VERSION);
#else
PG_MODULE_MAGIC;
#endif

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static ProcessUtility_hook_type prev_utility_hook = NULL;

void		_PG_init(void);
static void jobflow_shmem_request(void);
static void jobflow_shmem_startup(void);
static void jobflow_utility(PlannedStmt *pstmt, const char *queryString,
							bool readOnlyTree, ProcessUtilityContext context,
							ParamListInfo params, QueryEnvironment *queryEnv,
							DestReceiver *dest, QueryCompletion *qc);

/*
 * The worker and the shared status block only exist when the postmaster
 * loads us, so refuse any other way of loading, with a hint.  pg_upgrade
 * loads every library to check it exists: let it.
 *
 * pg_upgrade also starts the old and the new server in binary-upgrade
 * mode (postgres -b), with the clusters' shared_preload_libraries, for
 * its checks, its dump of the old schemas and its restore into the new
 * cluster, and once more after moving the data files.  No launcher there:
 * its workers would fire the tasks that fall due while the operator has
 * the database down for the upgrade (from the old cluster, or from the
 * new one before it is started for real), and the operator who goes
 * back to the old cluster after a failed upgrade would fire them again.
 * The settings, shared memory and hooks stay: the upgraded cluster's
 * first real start registers the launcher, whose workers resume.
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

	jf_settings_define();
	if (!IsBinaryUpgrade)
		jf_launcher_register();

#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = jobflow_shmem_request;
#else
	jobflow_shmem_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = jobflow_shmem_startup;
	/* from the postmaster, every backend inherits the hook */
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = jobflow_utility;
}

/* Every part's shared memory: the slots, the restore marks, dropped roles. */
static void
jobflow_shmem_request(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(MAXALIGN(jf_slots_shmem_size()));
	RequestAddinShmemSpace(jf_restore_shmem_size());
	RequestAddinShmemSpace(jf_dropped_roles_shmem_size());
}

/* Create them (the postmaster) or attach to them (EXEC_BACKEND). */
static void
jobflow_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	jf_slots_shmem_init();
	jf_restore_shmem_init();
	jf_dropped_roles_shmem_init();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Every utility statement of the cluster passes here.  Before it runs:
 * DROP DATABASE and the like hold the database (its worker goes first),
 * PREPARE TRANSACTION keeps its wake-ups under its GID, a restore's COPY
 * marks the session, DROP EXTENSION jobflow is checked and the roles of a
 * DROP ROLE, DROP OWNED or REASSIGN OWNED noted.  After it: CREATE or DROP
 * EXTENSION and CREATE DATABASE are told to the launcher at commit, COMMIT
 * PREPARED wakes the worker, DISCARD ALL ends a restore mark, and what the
 * dropped or emptied roles leave is dealt with.
 */
static void
jobflow_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				ProcessUtilityContext context, ParamListInfo params,
				QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	JfDropsNoted noted;

	jf_launcher_utility_before(parsetree);
	jf_prepared_utility_before(parsetree);
	jf_restore_utility_before(parsetree);
	jf_drops_utility_before(parsetree, &noted);

	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context, params,
						  queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	jf_launcher_utility_after(parsetree);
	jf_prepared_utility_after(parsetree);
	jf_restore_utility_after(parsetree);
	jf_drops_utility_after(parsetree, &noted);
}
