/*-------------------------------------------------------------------------
 *
 * guard.h
 *	  Integrity guards around jobflow's tables: DROP EXTENSION, DROP ROLE,
 *	  DROP OWNED, REASSIGN OWNED, restores in progress, and the extension
 *	  incarnation the worker serves (guard.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_GUARD_H
#define JOBFLOW_GUARD_H

#include "postgres.h"

/* _PG_init: utility hook and shared memory */
extern void jf_guard_init(void);

/* worker: the extension incarnation it serves */
extern void jf_guard_serve(void);
extern void jf_guard_check_incarnation(void);
extern bool jf_guard_take_lost(void);
extern uint32 jf_guard_generation(void);

/* worker: restores in progress, and sequences behind their tables */
extern bool jf_guard_restore_in_progress(void);
extern bool jf_guard_may_materialise(bool *sequences_behind);
extern bool jf_guard_sequences_behind(void);

/* any backend: whether this session restores jobflow's tables */
extern bool jf_guard_restoring(void);

/* worker: what dropped roles left, looked for at most once an interval */
extern bool jf_guard_roles_due(int64 now_ms);
extern int64 jf_guard_roles_deadline(void);
extern void jf_guard_sweep_roles(void);

#endif							/* JOBFLOW_GUARD_H */
