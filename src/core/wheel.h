/*-------------------------------------------------------------------------
 *
 * wheel.h
 *	  Hierarchical timing wheel for jobflow's worker.
 *
 * Plain C, no PostgreSQL headers.  The background worker keeps every
 * pending task due within its horizon in one JfWheel, sleeps until
 * jf_wheel_next_deadline() and then collects what is due with
 * jf_wheel_advance().
 *
 * Semantics the worker can rely on:
 *
 *	- Time is in milliseconds (any epoch; the worker uses Unix ms).  The
 *	  wheel has its own clock, jf_wheel_now(), which only ever moves
 *	  forward: jf_wheel_advance() with an earlier now does not move it.
 *
 *	- jf_wheel_advance(w, now, ...) returns exactly the entries whose due is
 *	  <= now: never one early, never one held back past the call whose now
 *	  reaches its due.  They come out in due order, and entries with the
 *	  same due in insertion order.  At most max entries are returned per
 *	  call; the rest stay due and come out first at the next call (call
 *	  again, with the same now, while it returns max).
 *
 *	- An entry inserted with a due <= jf_wheel_now() (in the past, or now)
 *	  is accepted and comes out at the next jf_wheel_advance(), after the
 *	  entries already due (it is queued as if due at jf_wheel_now()); the
 *	  due_ms reported for it is the one it was inserted with.
 *
 *	- An entry due after jf_wheel_horizon_end() (now + horizon) is refused
 *	  with JF_WHEEL_BEYOND_HORIZON; the worker keeps it in the table and
 *	  loads it when the horizon reaches it.
 *
 *	- Handles are pool indices and ARE REUSED once an entry has fired (been
 *	  returned by jf_wheel_advance) or been cancelled.  The caller must drop
 *	  its handle at that moment (the worker removes the id from its
 *	  id->handle map when the task fires).  As a guard, jf_wheel_cancel()
 *	  takes the task id too and refuses (returns false) a handle that is not
 *	  live or whose live entry carries another id, so a stale handle can
 *	  never cancel someone else's task.
 *
 * Costs: insert and cancel O(1); expiry touches an entry at most once per
 * level; jf_wheel_next_deadline() is O(levels); advancing over empty time
 * costs the same whatever its length.  Memory: 24 bytes per entry, in
 * chunks of 65536 entries (1.5 MB), freed again as the wheel drains.
 * Chunks are carved out of 6 MB slabs of address space (2 MB-aligned and
 * advised for transparent huge pages, so that filling fresh chunks costs
 * few page faults); pages are only backed as entries are handed out, but
 * with huge pages granted a wheel in use holds at least 2 MB.
 * jf_wheel_memory() counts chunks in use, not slab address space.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_WHEEL_H
#define JF_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct JfWheel JfWheel;

/* never returned as a valid handle */
#define JF_WHEEL_NO_HANDLE UINT32_MAX

/* default horizon of the worker (1 hour); the wheel accepts up to ~2^59 ms */
#define JF_WHEEL_DEFAULT_HORIZON_MS (3600 * 1000)

typedef enum JfWheelStatus
{
	JF_WHEEL_OK = 0,
	JF_WHEEL_BEYOND_HORIZON,	/* due > jf_wheel_horizon_end(): not inserted */
	JF_WHEEL_NO_MEMORY,			/* malloc failed: not inserted, wheel intact */
	JF_WHEEL_FULL				/* max_entries (or the 2^32 index space) reached */
} JfWheelStatus;

typedef struct JfWheelExpired
{
	uint64_t	id;				/* as given to jf_wheel_insert */
	int64_t		due_ms;			/* as given to jf_wheel_insert */
} JfWheelExpired;

/*
 * Create a wheel whose clock starts at now_ms, accepting entries due up to
 * now + horizon_ms (horizon_ms >= 1).  max_entries caps the number of live
 * entries (0 = no cap besides the index space).  Returns NULL when out of
 * memory or when horizon_ms is out of range.
 */
extern JfWheel *jf_wheel_create(int64_t now_ms, int64_t horizon_ms,
								uint32_t max_entries);
extern void jf_wheel_destroy(JfWheel *w);

/*
 * Add task id due at due_ms.  On JF_WHEEL_OK *handle (if not NULL) receives
 * the handle to cancel it with; on any other status nothing changed.
 * The same id may be inserted several times: each insert is its own entry.
 */
extern JfWheelStatus jf_wheel_insert(JfWheel *w, uint64_t id, int64_t due_ms,
									 uint32_t *handle);

/*
 * Remove a pending entry (not yet returned by jf_wheel_advance).  Returns
 * false, changing nothing, if handle is not live or its entry is not id.
 */
extern bool jf_wheel_cancel(JfWheel *w, uint32_t handle, uint64_t id);

/*
 * The due a pending entry was inserted with; INT64_MIN when handle is not
 * live or its entry is not id (same guard as jf_wheel_cancel).
 */
extern int64_t jf_wheel_due(const JfWheel *w, uint32_t handle, uint64_t id);

/*
 * When the worker should next call jf_wheel_advance:
 *	- INT64_MAX when the wheel is empty;
 *	- jf_wheel_now() when entries are already due (not yet returned);
 *	- otherwise the due of the earliest entry, exactly, in O(levels).
 * One caveat: when the earliest entry of a coarse slot was cancelled, the
 * value may be earlier than the true earliest due (never later, and never
 * before the start of the slot holding it).  Advancing to that time is then
 * correct and cheap (it fires nothing and cascades that one slot), after
 * which the value is exact again.  So "sleep until next_deadline, advance,
 * repeat" never fires late and wakes at most once per level in vain.
 */
extern int64_t jf_wheel_next_deadline(const JfWheel *w);

/*
 * Move the wheel's clock to now_ms (no-op if earlier than jf_wheel_now())
 * and copy up to max due entries into out, oldest first; they are removed
 * from the wheel and their handles become free.  Returns how many were
 * copied.  Entries due but not copied (returned == max) stay due.
 */
extern size_t jf_wheel_advance(JfWheel *w, int64_t now_ms,
							   JfWheelExpired *out, size_t max);

/* live entries (pending in the wheel or due and not yet returned) */
extern size_t jf_wheel_count(const JfWheel *w);
/* bytes held by the wheel: struct, chunk table and entry chunks */
extern size_t jf_wheel_memory(const JfWheel *w);
/* the wheel's clock: the largest now_ms given to create/advance */
extern int64_t jf_wheel_now(const JfWheel *w);
/* latest due accepted by jf_wheel_insert: jf_wheel_now() + horizon */
extern int64_t jf_wheel_horizon_end(const JfWheel *w);
/* number of levels of 64 slots used for this horizon (for tests/stats) */
extern int	jf_wheel_levels(const JfWheel *w);

#endif							/* JF_WHEEL_H */
