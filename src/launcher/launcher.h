/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher that starts one jobflow worker per database having the
 *	  extension, the per-database slots in shared memory, and what other
 *	  processes tell it (launcher.c, launcher_hook.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LAUNCHER_H
#define JOBFLOW_LAUNCHER_H

#include "jobflow.h"
#include "nodes/nodes.h"

/* _PG_init: shared memory and the launcher's registration */
extern Size jf_launcher_shmem_size(void);
extern void jf_launcher_shmem_init(void);
extern void jf_launcher_register(void);

extern PGDLLEXPORT void jobflow_launcher_main(Datum main_arg);
extern PGDLLEXPORT void jobflow_probe_main(Datum main_arg);

/* any backend: the slot serving a database, NULL when none does */
extern JobflowShared *jf_db_slot(Oid dboid);
extern int	jf_db_slots(Oid dboid, JobflowShared **by_part);
extern void jf_slot_wake(JobflowShared *s, Oid dboid);
extern void jf_db_wake(Oid dboid, bool recheck);
extern int	jf_launcher_nslots(void);

/* the worker: its slot before it connects, and how it leaves */
extern JobflowShared *jf_worker_attach(Datum main_arg, Oid *dboid);
extern void jf_worker_detach(void);
extern void jf_worker_clear_requested(void);
extern bool jf_worker_release(void);
extern int	jf_worker_exit_code(void);
extern bool jf_worker_recheck_pending(void);

/* the utility hook (guard.c): statements the launcher must hear of */
extern void jf_launcher_utility_before(Node *parsetree);
extern void jf_launcher_utility_after(Node *parsetree);

#endif							/* JOBFLOW_LAUNCHER_H */
