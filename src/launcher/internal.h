/*-------------------------------------------------------------------------
 *
 * launcher_internal.h
 *	  The launcher's shared state, for launcher.c and launcher_hook.c only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBFLOW_LAUNCHER_INTERNAL_H
#define JOBFLOW_LAUNCHER_INTERNAL_H

#include "jobflow.h"

#define MAX_REQUESTS 256		/* beyond: every database is probed again */
#define MAX_HOLDS 32			/* databases held at once, cluster-wide */

typedef enum RequestKind
{
	REQ_PROBE,					/* see whether the database has jobflow */
	REQ_SERVE					/* it has: serve it */
} RequestKind;

typedef struct Request
{
	Oid			dboid;
	RequestKind kind;
} Request;

typedef struct JfLauncherShared
{
	slock_t		mutex;
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	uint32		next_incarnation;
	uint32		freed;			/* slots freed so far */
	int			nrequests;
	bool		overflowed;		/* requests were lost: probe everything */
	Request		requests[MAX_REQUESTS];
	struct
	{
		Oid			dboid;
		pid_t		pid;		/* the backend holding it; 0: free */
	}			holds[MAX_HOLDS];
	JobflowShared slots[FLEXIBLE_ARRAY_MEMBER];
} JfLauncherShared;

/* what a worker is started for, in bgw_extra */
typedef struct WorkerExtra
{
	Oid			dboid;
	uint32		incarnation;
} WorkerExtra;

/* launcher.c */
extern JfLauncherShared *jf_ls;
extern bool jf_launcher_is_held(Oid dboid);
extern int	jf_launcher_slot_index(Oid dboid);
extern void jf_launcher_post(Oid dboid, RequestKind kind);

#endif							/* JOBFLOW_LAUNCHER_INTERNAL_H */
