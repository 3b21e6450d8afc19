/*-------------------------------------------------------------------------
 *
 * restore.h
 *	  Restores of jobflow's tables in progress (restore.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_RESTORE_H
#define JOBFLOW_RESTORE_H

#include "postgres.h"

#include "nodes/nodes.h"

/* the shmem hooks (jobflow.c) */
extern Size jf_restore_shmem_size(void);
extern void jf_restore_shmem_init(void);

/* the utility hook (jobflow.c): COPY marks, DISCARD ALL unmarks */
extern void jf_restore_utility_before(Node *parsetree);
extern void jf_restore_utility_after(Node *parsetree);

/* any backend: whether this session is restoring jobflow's tables */
extern bool jf_restore_marked(void);

/* whether some live session restores jobflow's tables in this database */
extern bool jf_restore_in_progress(void);

#endif							/* JOBFLOW_RESTORE_H */
