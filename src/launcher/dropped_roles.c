/*-------------------------------------------------------------------------
 *
 * dropped_roles.c
 *	  Roles dropped by committed transactions, in any database, published
 *	  in shared memory for the workers of every database.
 *
 * DROP ROLE may run in any database, where the utility hook cannot see
 * jobflow's tables; so a dropping transaction publishes the roles at its
 * commit (api/drops.c calls in here), and each database's first worker
 * sweeps what they left at its next look (worker/guard.c).  The ring
 * keeps the last JF_DROPPED_RING roles; a worker that fell further behind,
 * or a transaction that dropped more than it keeps, makes the workers
 * sweep for every owner.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "launcher/dropped_roles.h"

/* roles one DROP ROLE transaction publishes (more: workers sweep all) */
#define MAX_DROPPED_LOCAL 64

typedef struct DroppedShared
{
	slock_t		mutex;
	uint64		ndropped;		/* published since the server started */
	Oid			dropped[JF_DROPPED_RING];	/* the last ones, at ndropped % size */
} DroppedShared;

static DroppedShared *dropped_shared = NULL;

/* roles this transaction dropped, published at its commit */
static Oid	dropped_here[MAX_DROPPED_LOCAL];
static int	ndropped_here = 0;
static bool dropped_overflow = false;
static bool drop_callback = false;

/* The shared memory of the ring, for the shmem hooks. */
Size
jf_dropped_roles_shmem_size(void)
{
	return MAXALIGN(sizeof(DroppedShared));
}

/* In the postmaster's shmem startup hook, AddinShmemInitLock held. */
void
jf_dropped_roles_shmem_init(void)
{
	bool		found;

	dropped_shared = ShmemInitStruct("jobflow dropped roles", sizeof(DroppedShared), &found);
	if (!found)
	{
		memset(dropped_shared, 0, sizeof(DroppedShared));
		SpinLockInit(&dropped_shared->mutex);
	}
}


/*
 * DROP ROLE committed: publish the roles for every worker of the cluster
 * (nothing here can fail).  A transaction that dropped more than it keeps
 * publishes that many more, which sends the workers to sweep every owner.
 */
static void
drop_xact_callback(XactEvent event, void *arg)
{
	int			i;

	if (event == XACT_EVENT_COMMIT && (ndropped_here > 0 || dropped_overflow) &&
		dropped_shared != NULL)
	{
		SpinLockAcquire(&dropped_shared->mutex);
		for (i = 0; i < ndropped_here; i++)
			dropped_shared->dropped[dropped_shared->ndropped++ % JF_DROPPED_RING] = dropped_here[i];
		if (dropped_overflow)
			dropped_shared->ndropped += JF_DROPPED_RING + 1;
		SpinLockRelease(&dropped_shared->mutex);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT)
	{
		ndropped_here = 0;
		dropped_overflow = false;
	}
}

void
jf_dropped_roles_publish(List *oids)
{
	ListCell   *lc;

	if (!drop_callback)
	{
		RegisterXactCallback(drop_xact_callback, NULL);
		drop_callback = true;
	}
	foreach(lc, oids)
	{
		if (ndropped_here == MAX_DROPPED_LOCAL)
			dropped_overflow = true;
		else
			dropped_here[ndropped_here++] = lfirst_oid(lc);
	}
}

/*
 * The roles published since *seen (at most JF_DROPPED_RING, into out), and
 * the count published now in *seen; -1 when more were published than the
 * ring kept: the caller must look at every owner.
 */
int
jf_dropped_roles_since(uint64 *seen, Oid *out)
{
	uint64		published;
	uint64		i;
	int			n = 0;

	SpinLockAcquire(&dropped_shared->mutex);
	published = dropped_shared->ndropped;
	if (published - *seen > JF_DROPPED_RING)
		n = -1;
	else
		for (i = *seen; i < published; i++)
			out[n++] = dropped_shared->dropped[i % JF_DROPPED_RING];
	SpinLockRelease(&dropped_shared->mutex);
	*seen = published;
	return n;
}
