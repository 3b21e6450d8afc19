/*-------------------------------------------------------------------------
 *
 * guard.h
 *	  The worker's guards: the extension incarnation it serves, what holds
 *	  it back, and the sweep of what dropped roles left (guard.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_GUARD_H
#define JOBFLOW_GUARD_H

#include "postgres.h"

/* worker: the extension incarnation it serves */
extern void jf_guard_serve(void);
extern void jf_guard_check_incarnation(void);
extern bool jf_guard_take_lost(void);
extern uint32 jf_guard_generation(void);

/* worker: jobflow.dispatch, off or auto with a subscription of jobflow's tables */
typedef enum JfHold
{
	JF_HOLD_NONE,
	JF_HOLD_OFF,
	JF_HOLD_SUBSCRIBED
} JfHold;
extern JfHold jf_guard_hold(int64 now_ms);
extern void jf_guard_look_soon(void);
extern int64 jf_guard_hold_deadline(void);

/* worker: sequences behind their tables, restores in progress */
extern bool jf_guard_may_materialise(bool *sequences_behind);

/* worker: what dropped roles left, looked for at most once an interval */
extern bool jf_guard_roles_due(int64 now_ms);
extern int64 jf_guard_roles_deadline(void);
extern void jf_guard_sweep_roles(void);

#endif							/* JOBFLOW_GUARD_H */
