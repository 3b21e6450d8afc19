/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  What differs between the PostgreSQL major versions jobflow supports
 *	  (14 to 18), in one place, behind PG_VERSION_NUM checks.
 *
 * Built and tested on 14, 15, 16, 17 and 18: 14 has no
 * MarkGUCPrefixReserved(), pg_hmac_error(), InitMaterializedSRF() or
 * pg_prng; 14 has no
 * shmem_request_hook either (jobflow.c asks for its shared memory from
 * _PG_init there); PGPROC's local
 * transaction id moved into vxid in 17; CreateWaitEventSet() takes a
 * ResourceOwner since 17 and lives in storage/waiteventset.h since 18;
 * custom wait event names exist since 17; PG_MODULE_MAGIC_EXT since 18.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_COMPAT_H
#define JOBFLOW_COMPAT_H

#include "postgres.h"

#include "storage/latch.h"
#include "storage/proc.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/memutils.h"
#if PG_VERSION_NUM >= 180000
#include "storage/waiteventset.h"
#endif

/* The current local transaction id of this backend. */
#if PG_VERSION_NUM >= 170000
#define JF_MY_LXID (MyProc->vxid.lxid)
#else
#define JF_MY_LXID (MyProc->lxid)
#endif

/*
 * A WaitEventSet for the life of the process: owned by no resource owner
 * (17+), allocated in TopMemoryContext.
 */
static inline WaitEventSet *
jf_create_wait_event_set(int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

/* Whether the current user owns a database (or is a superuser). */
#if PG_VERSION_NUM >= 160000
#define jf_database_owned(dboid) \
	object_ownercheck(DatabaseRelationId, (dboid), GetUserId())
#else
#define jf_database_owned(dboid) pg_database_ownercheck((dboid), GetUserId())
#endif

/*
 * Settings named jobflow.* that jobflow does not define are refused (15+),
 * or only warned about where they exist at load (14).  Called by
 * base/settings.c only, like every definition of a setting.
 */
#if PG_VERSION_NUM >= 150000
#define jf_reserve_guc_prefix(prefix) MarkGUCPrefixReserved(prefix)
#else
#define jf_reserve_guc_prefix(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* Why pg_hmac failed: 15+ can say; 14's pg_hmac reports nothing. */
#if PG_VERSION_NUM >= 150000
#define jf_hmac_error(ctx) pg_hmac_error(ctx)
#else
#define jf_hmac_error(ctx) ((void) (ctx), "error in the HMAC implementation")
#endif

/*
 * A set-returning function's tuplestore and descriptor, from its declared
 * result type (InitMaterializedSRF since 15).
 */
#if PG_VERSION_NUM >= 150000
#include "funcapi.h"
#define jf_init_materialized_srf(fcinfo) InitMaterializedSRF((fcinfo), 0)
#else
extern void jf_init_materialized_srf(FunctionCallInfo fcinfo);
#endif

/* A uniformly random number in [lo, hi], for jitter (pg_prng since 15). */
#if PG_VERSION_NUM >= 150000
#include "common/pg_prng.h"
#define jf_random_range(lo, hi) pg_prng_uint64_range(&pg_global_prng_state, (lo), (hi))
#else
#define jf_random_range(lo, hi) \
	((uint64) (lo) + (uint64) random() % ((uint64) (hi) - (uint64) (lo) + 1))
#endif

/* What the worker waits on, as pg_stat_activity.wait_event shows it. */
typedef enum JfWaitEvent
{
	JF_WAIT_MAIN,				/* the loop: due tasks, requests, notifies */
	JF_WAIT_SCHEMA,				/* CREATE EXTENSION or UPDATE to come */
	JF_WAIT_LAUNCHER,			/* the launcher: requests, probes */
	JF_WAIT_WORKER_EXIT,		/* DROP DATABASE & co. wait for a worker */
	JF_NWAIT
} JfWaitEvent;

extern uint32 jf_wait_event(JfWaitEvent which);

/*
 * jobflow's background workers' own values of the settings a database's
 * owner (ALTER DATABASE ... SET) or a role's settings could give their
 * sessions, those of every version and transaction_timeout (17+).
 */
extern void jf_pin_session_settings(void);

/*
 * A constant of a raw parse tree (A_Const): its value node, or NULL for a
 * NULL literal.  14 keeps a Value with T_Null; 15 has a union and isnull,
 * and Boolean nodes for true and false (14 writes them as 't'::bool).
 */
#if PG_VERSION_NUM >= 150000
#define jf_a_const_value(c) ((c)->isnull ? NULL : (Node *) &(c)->val)
#define jf_is_boolean_node(n) IsA((n), Boolean)
#define jf_boolean_node_value(n) boolVal(n)
#else
#define jf_a_const_value(c) ((c)->val.type == T_Null ? NULL : (Node *) &(c)->val)
#define jf_is_boolean_node(n) false
#define jf_boolean_node_value(n) false
#endif

#endif							/* JOBFLOW_COMPAT_H */
