/*-------------------------------------------------------------------------
 *
 * internal.h
 *	  The launcher's shared state, for slots.c, launcher.c and hook.c only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LAUNCHER_INTERNAL_H
#define JOBFLOW_LAUNCHER_INTERNAL_H

#include "launcher/slots.h"

#define MAX_REQUESTS 256		/* beyond: every database is probed again */
#define MAX_HOLDS 32			/* databases held at once, cluster-wide */

typedef enum JfLaunchKind
{
	REQ_PROBE,					/* see whether the database has jobflow */
	REQ_SERVE					/* it has: serve it */
} JfLaunchKind;

typedef struct JfLaunchRequest
{
	Oid			dboid;
	JfLaunchKind kind;
} JfLaunchRequest;

typedef struct JfLauncherShared
{
	slock_t		mutex;
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	uint32		next_incarnation;
	uint32		freed;			/* slots freed so far */
	int			nrequests;
	bool		overflowed;		/* requests were lost: probe everything */
	JfLaunchRequest requests[MAX_REQUESTS];
	struct
	{
		Oid			dboid;
		pid_t		pid;		/* the backend holding it; 0: free */
	}			holds[MAX_HOLDS];
	JfSlot slots[FLEXIBLE_ARRAY_MEMBER];
} JfLauncherShared;

/* what a worker is started for, in bgw_extra */
typedef struct JfWorkerExtra
{
	Oid			dboid;
	uint32		incarnation;
} JfWorkerExtra;

/* slots.c */
extern JfLauncherShared *jf_ls;
extern bool jf_launcher_is_held(Oid dboid);
extern int	jf_launcher_slot_index(Oid dboid);
extern void jf_launcher_post(Oid dboid, JfLaunchKind kind);

#endif							/* JOBFLOW_LAUNCHER_INTERNAL_H */
