/*-------------------------------------------------------------------------
 *
 * dropped_roles.h
 *	  Roles dropped by committed transactions, for the workers of every
 *	  database (dropped_roles.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_DROPPED_ROLES_H
#define JOBFLOW_DROPPED_ROLES_H

#include "postgres.h"

#include "nodes/pg_list.h"

/* roles dropped and not yet looked at by every worker, cluster-wide */
#define JF_DROPPED_RING 256

/* the shmem hooks (jobflow.c) */
extern Size jf_dropped_roles_shmem_size(void);
extern void jf_dropped_roles_shmem_init(void);

/* DROP ROLE: publish these roles (OIDs) at the transaction's commit */
extern void jf_dropped_roles_publish(List *oids);

/* the worker: what was published since *seen (-1: too much, look at all) */
extern int	jf_dropped_roles_since(uint64 *seen, Oid *out);

#endif							/* JOBFLOW_DROPPED_ROLES_H */
