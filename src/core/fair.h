/*-------------------------------------------------------------------------
 *
 * fair.h
 *	  Fair sharing of the dispatcher's capacity among hosts and owners.
 *
 * Due tasks are not claimed in due order across everything: each one is
 * parked in the queue of its (owner, origin), where origin is
 * scheme://host:port.  jf_fair_pick() then chooses what to claim now,
 * visiting the queues round-robin, in due order within each queue, and
 * never beyond what can be sent soon:
 *
 *	- per origin: max_per_host requests claimed and not finished;
 *	- per owner: max_per_owner claimed and not finished, whatever the
 *	  number of origins it spreads them over;
 *	- in all: max_in_flight.
 *
 * So a slow or dead origin holds at most max_per_host requests, a tenant at
 * most max_per_owner, and an overdue backlog waits in its own queue while
 * other queues are served on every pass.
 *
 * Tasks also belong to a named queue of their owner (jobflow.tasks.queue,
 * configured in jobflow.queues), so the fair share's queues are really
 * (owner, named queue, origin) lanes.  A named queue may be paused (its
 * lanes take nothing), hold at most max_concurrent requests, send at most
 * max_per_second (see rate.h: smooth, never a burst at each second
 * boundary, what a late turn missed made up, and never more than the
 * rate's worth in any second),
 * and have a priority: when a cap leaves
 * fewer places than due tasks, lanes of higher priority are served first,
 * round-robin within one priority.  Each origin may also be held to
 * max_per_second_per_host by the same kind of rate.  A named queue
 * nobody configured has none of these limits.
 *
 * A task may carry a flow key (jobflow.tasks.flow_key): its lane is then
 * (owner, named queue, origin, key), and the key (per owner and named
 * queue) holds the queue's limits per key: max_concurrent_per_key in
 * flight, max_per_second_per_key (a rate like the queue's), and, for an
 * ordered queue, one at a time in due order then id, the key waiting for
 * the retry of its head (jf_fair_key_wait) and backing off when the claim
 * found an earlier task of the key unfinished (jf_fair_key_blocked).  A
 * key at its limit holds only its own lane.  Keyed lanes count with the
 * lane of their (owner, named queue, origin) for the origin's share, so
 * that many keys get no more of an origin than one lane would.  Keys
 * live while they have lanes, tasks in flight, or a rate, a wait or a
 * back-off to remember, and are collected like lanes.  Tasks that are parked cost a few
 * bytes; nothing is claimed for them until they can go, and whatever is
 * claimed can be sent at once: a claimed attempt is one that may have been
 * sent.
 *
 * Plain C, no PostgreSQL headers (unit-tested in test/unit/test_fair.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_FAIR_H
#define JF_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct JfFair JfFair;

/* The longest origin key, and how many of the busiest origins are kept. */
#define JF_FAIR_ORIGIN_MAX 300
#define JF_FAIR_TOP 10

/* One of the busiest origins (jf_fair_busiest). */
typedef struct JfFairLoad
{
	const char *origin;			/* "scheme://host:port", valid until the next
								 * jf_fair_collect() */
	int			claimed;		/* picked and not yet released: in flight */
	int			parked;			/* due and waiting for a place */
} JfFairLoad;

typedef struct JfFairConfig
{
	int			max_in_flight;	/* >= 1 */
	int			max_per_host;	/* >= 1 */
	int			max_per_owner;	/* >= 1 */
	double		max_per_second_per_host;	/* 0: no limit */
} JfFairConfig;

/*
 * What the worker logs of a named queue's attempts (jobflow.queues.
 * log_attempts): the fair share only keeps it for the worker, which asks
 * it of a task's lane when the attempt ends.
 */
typedef enum JfFairLog
{
	JF_FAIR_LOG_DEFAULT = 0,	/* as the global setting says */
	JF_FAIR_LOG_ALL,			/* every attempt */
	JF_FAIR_LOG_FAILURES		/* no row for a success at the first attempt */
} JfFairLog;

/* The settings of one named queue (a row of jobflow.queues). */
typedef struct JfFairQueueConfig
{
	bool		paused;
	int			max_concurrent; /* 0: no limit of its own */
	double		max_per_second; /* 0: no limit */
	int			priority;		/* higher first */
	JfFairLog	log;			/* unused by the fair share */
	int			max_concurrent_per_key; /* 0: no limit per key */
	double		max_per_second_per_key; /* 0: no limit */
	bool		ordered;		/* one at a time per key, in due order */
} JfFairQueueConfig;

/* One task chosen by jf_fair_pick(). */
typedef struct JfFairPick
{
	uint64_t	id;
	uint32_t	queue;
} JfFairPick;

/*
 * Called for each parked id about to be picked from lane queue: false
 * drops it (a stale entry: rescheduled, moved to another lane, cancelled
 * or already picked), true takes it.
 */
typedef bool (*JfFairTake) (uint64_t id, uint32_t queue, void *arg);

/*
 * A gate on lanes (the worker's circuits, core/circuit.h): asked, before
 * a lane with parked tasks is served, how many of (owner, origin)'s tasks
 * may be taken now (-1: no limit of its own), and told of each task taken
 * while it gave a limit.  Tasks it holds stay parked: no place, no rate is
 * spent on them.
 */
typedef int (*JfFairGate) (uint32_t owner, const char *origin, void *arg);
typedef void (*JfFairGateTaken) (uint32_t owner, const char *origin, uint64_t id,
								 void *arg);

extern JfFair *jf_fair_create(const JfFairConfig *cfg);
extern void jf_fair_destroy(JfFair *f);
extern void jf_fair_set_config(JfFair *f, const JfFairConfig *cfg);
extern void jf_fair_set_gate(JfFair *f, JfFairGate gate, JfFairGateTaken taken,
							 void *arg);

/* The origin of lane queue ("scheme://host:port"), while the lane lives. */
extern const char *jf_fair_lane_origin(const JfFair *f, uint32_t queue);

/* The owner (role oid) of lane queue, while the lane lives. */
extern uint32_t jf_fair_owner_of(const JfFair *f, uint32_t queue);

/*
 * Tasks parked in the lanes of each of n (owner, origin) pairs, into
 * out[]: one look at every lane with parked tasks.  n is at most
 * JF_FAIR_PARKED_OF_MAX (out[] beyond it stays 0).
 */
#define JF_FAIR_PARKED_OF_MAX 64
extern void jf_fair_parked_of(const JfFair *f, int n, const uint32_t *owners,
							  const char *const *origins, size_t *out);

/*
 * The queue (lane) of (owner, named queue, the origin of url), created on
 * first use.  name NULL is "default".  UINT32_MAX when out of memory.
 *
 * A lane number stays valid while the lane has tasks parked or claimed, or
 * is held: jf_fair_collect() may free it otherwise, and give its number to
 * another lane.  A caller that keeps lane numbers of tasks not yet parked
 * (the worker's map of loaded tasks) holds the lane once per task, from
 * before the next collect until it no longer keeps the number.
 */
extern uint32_t jf_fair_queue(JfFair *f, uint32_t owner, const char *name,
							  const char *url);

/* The same for a task with a flow key (NULL: none, as jf_fair_queue). */
extern uint32_t jf_fair_queue_key(JfFair *f, uint32_t owner, const char *name,
								  const char *url, const char *flow_key);
extern void jf_fair_hold(JfFair *f, uint32_t queue);

/*
 * Whether lane queue is the one of (owner, named queue, the origin of
 * url): a task's row may have moved to another queue or host since the
 * caller parked it.
 */
extern bool jf_fair_is_lane_of(const JfFair *f, uint32_t queue, uint32_t owner,
							   const char *name, const char *url, const char *flow_key);

/* Whether lane queue has a flow key, and whether its named queue is ordered. */
extern bool jf_fair_lane_keyed(const JfFair *f, uint32_t queue);
extern bool jf_fair_lane_ordered(const JfFair *f, uint32_t queue);

/*
 * Ordered queues.  jf_fair_key_wait: the task id of keyed lane queue goes
 * to a retry; until it is taken again (or until until_us, or until
 * jf_fair_head_gone: cancelled, moved), its key sends nothing else, and it
 * goes first once parked whatever its place in the lane.  jf_fair_key_blocked: the
 * claim found an earlier task of the key unfinished (an outcome not
 * written yet, a failed task that blocks, a task redriven): the key sends
 * nothing until a back-off (growing from 25 ms to 1 s, or at_least_us when
 * longer: the blocker is pending and due later) passed, and the earliest
 * such task (blocker, 0: unknown) goes first should it be or come parked;
 * returns how long the key waits, in microseconds.  jf_fair_key_done: a
 * request of the key was sent, so the back-off starts small again.
 */
extern void jf_fair_key_wait(JfFair *f, uint32_t queue, uint64_t id, int64_t until_us);
extern int64_t jf_fair_key_blocked(JfFair *f, uint32_t queue, int64_t now_us,
								   uint64_t blocker, int64_t at_least_us);
extern void jf_fair_key_done(JfFair *f, uint32_t queue);

/*
 * The tasks that ordered keys wait for, up to max, each key in turn: a
 * retry (jf_fair_key_wait) once an outcome was written since its wait
 * began (so that the retry is in the table), a task of jf_fair_key_await
 * at once: the caller checks that each is still its key's head.  Its
 * owner may have cancelled it, rescheduled it after the key's next task,
 * or deleted it, and nothing tells the worker: jf_fair_head_gone(id)
 * then lets its key go on at once rather than when the retry was due.
 */
extern int	jf_fair_waited_heads(JfFair *f, uint64_t *ids, int max);
extern void jf_fair_head_gone(JfFair *f, uint64_t id);

/*
 * The same wait as jf_fair_key_wait, for a task the claim found first in
 * its key's order and not about to go: a dead letter that blocks (until
 * redriven: the redrive loads it), a retry not due (after a restart the
 * wait was forgotten).  The key sends nothing meanwhile rather than try
 * the claim again every second, and the task is checked at once.
 */
extern void jf_fair_key_await(JfFair *f, uint32_t queue, uint64_t id, int64_t until_us);

/*
 * Ordered queues: a task of keyed lane queue finished (succeeded, failed
 * for good); its outcome is not written yet, and until it is the claim
 * would find it still running: the key sends nothing until
 * jf_fair_written() says the outcomes buffered so far are written, which
 * returns whether some key waited for that.
 */
extern void jf_fair_key_await_write(JfFair *f, uint32_t queue);
extern bool jf_fair_written(JfFair *f);

/* Keys live now (memory follows the keys with tasks, not all ever seen). */
extern size_t jf_fair_keys(const JfFair *f);
extern void jf_fair_unhold(JfFair *f, uint32_t queue);

/* What the named queue of lane queue logs (JF_FAIR_LOG_DEFAULT if unset). */
extern JfFairLog jf_fair_lane_log(const JfFair *f, uint32_t queue);

/*
 * Free what no task needs any more: lanes neither parked, claimed nor
 * held; origins and named queues without lanes whose rates forgot their
 * last request (at now_us, the clock of jf_fair_pick), named queues only
 * once jobflow.queues sets nothing for them.  Of each kind, looks at a
 * quarter of the entries (at least 4,096, at most max_look), going on
 * where the last call stopped, and frees at most max_free: one call costs
 * the worker's loop a bounded time however many origins a tenant used.
 * Returns how many it freed.
 */
extern size_t jf_fair_collect(JfFair *f, int64_t now_us, uint32_t max_look,
							  uint32_t max_free);

/*
 * Whether lane queue holds many copies of tasks no longer parked there
 * (moved to another lane or back into the wheel while they waited): more
 * than twice as many entries as the caller holds the lane for, and more
 * than a few.  A lane that is not served (paused, or at a limit) never
 * drops them otherwise, so a tenant rescheduling its tasks again and again
 * would grow it with each commit.
 */
extern bool jf_fair_stale_heavy(const JfFair *f, uint32_t queue);

/*
 * Drop lane queue's copies for which here(id, queue, arg) is false,
 * keeping the order of the others.  Costs a look at every entry of the
 * lane: call it when jf_fair_stale_heavy() says half of them go.  Returns
 * how many it dropped.
 */
extern uint32_t jf_fair_compact(JfFair *f, uint32_t queue, JfFairTake here, void *arg);

/* what one collection looks at and frees of each kind, at the most */
#define JF_FAIR_COLLECT_LOOK	65536
#define JF_FAIR_COLLECT_FREE	4096

/*
 * Whether lanes, origins and named queues are being made faster than the
 * periodic collection could free them: true once half of what one
 * collection frees has been made since the last one.  The worker then
 * collects at once, so a tenant sending to ever new hosts cannot outpace
 * it, and each collection still costs the loop a bounded time.
 */
extern bool jf_fair_collect_due(const JfFair *f);

/*
 * Settings of the named queue (owner, name); false when out of memory.
 * jf_fair_reset_queues() first puts every named queue back to no limits,
 * so that a configuration read afresh replaces the previous one.
 */
extern bool jf_fair_configure(JfFair *f, uint32_t owner, const char *name,
							  const JfFairQueueConfig *cfg);
extern void jf_fair_reset_queues(JfFair *f);

/* The origin key of url ("scheme://host:port", lower case) into buf. */
extern bool jf_fair_origin(const char *url, char *buf, size_t len);

/*
 * Park a task due at `due` (any clock) in its queue; a paused queue is
 * served in due order once resumed.  False when out of memory.
 */
extern bool jf_fair_push(JfFair *f, uint32_t queue, uint64_t id, int64_t due);

/*
 * The same at the head of its lane: a picked task the claim did not take
 * because an earlier task of its ordered key was unfinished keeps its
 * place before the key's later tasks.
 */
extern bool jf_fair_push_front(JfFair *f, uint32_t queue, uint64_t id, int64_t due);

/*
 * Choose up to max parked tasks to claim now, at time now_us (any clock in
 * microseconds that never goes back: rates are measured on it); each
 * counts as claimed until jf_fair_release().
 */
extern int	jf_fair_pick(JfFair *f, JfFairPick *out, int max, int64_t now_us,
						 JfFairTake take, void *arg);

/*
 * When the last pick left parked tasks waiting for a rate's next token
 * only: the earliest time (on now_us's clock) a token comes; INT64_MAX when
 * nothing waits for one.  The worker sleeps no longer than that.
 */
extern int64_t jf_fair_next_deadline(const JfFair *f);

/* A picked task's request finished, or was not sent after all. */
extern void jf_fair_release(JfFair *f, uint32_t queue);

/*
 * Forget every parked task and every hold (their ids no longer mean
 * anything): the caller forgets, at the same time, every lane number it
 * kept for tasks not yet picked.
 */
extern void jf_fair_drop_parked(JfFair *f);

/*
 * The busiest origins by claimed + parked, most first, at most JF_FAIR_TOP
 * (origins with nothing claimed or parked are never among them).  The
 * table is kept as counts change, in O(JF_FAIR_TOP) per change; an origin
 * whose count stopped changing while others fell below it is found again
 * by a sweep over sweep more origins on each call: while counts stay put,
 * the table is exact again after nhosts / sweep calls at the most.
 */
extern int	jf_fair_busiest(JfFair *f, JfFairLoad *out, int sweep);

extern size_t jf_fair_parked(const JfFair *f);
extern int	jf_fair_claimed(const JfFair *f);
extern size_t jf_fair_queues(const JfFair *f);	/* lanes live now */
extern size_t jf_fair_memory(const JfFair *f);

#endif							/* JF_FAIR_H */
