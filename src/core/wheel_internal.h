/*-------------------------------------------------------------------------
 *
 * wheel_internal.h
 *	  What the files of jobflow's timing wheel share (not installed).
 *
 * The wheel is one module in two files: wheel.c holds the levels, the
 * firing-order list and the public API; wheel_pool.c the pool of 24-byte
 * entries, carved out of chunks of 65536 that come from huge-page-advised
 * slabs.  Both need the layout of JfWheel and its entries, defined here.
 *
 * Taking and freeing one entry happens on every insert, cancel and expiry,
 * so those two are static inline here; only growing and shrinking the
 * pool (a chunk at a time) are calls into wheel_pool.c, prefixed
 * jf_wheel_pool_ like every global symbol of the module.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_WHEEL_INTERNAL_H
#define JF_WHEEL_INTERNAL_H

#include "core/wheel.h"

#define SLOT_BITS		6
#define SLOTS			64
#define SLOT_MASK		63
#define MAX_LEVELS		10

#define CHUNK_SHIFT		16
#define CHUNK_SIZE		(1u << CHUNK_SHIFT)
#define CHUNK_MASK		(CHUNK_SIZE - 1)
/* keeps every index below FREE_MARK */
#define MAX_CHUNKS		65535u

#define WHEEL_NIL				UINT32_MAX

#define likely(x)		__builtin_expect(!!(x), 1)
#define FREE_MARK		(UINT32_MAX - 1)	/* prev of a free entry */

typedef struct JfWheelEntry
{
	uint64_t	id;
	int64_t		due;			/* absolute ms, as inserted */
	uint32_t	next;
	uint32_t	prev;			/* FREE_MARK when on a free list */
} JfWheelEntry;

typedef struct JfWheelChunk
{
	JfWheelEntry *entries;
	uint32_t	free_head;		/* pool index (in this chunk), WHEEL_NIL if none */
	uint32_t	fresh;			/* offsets >= fresh never handed out */
	uint32_t	live;
} JfWheelChunk;

typedef struct JfWheelLevel
{
	uint64_t	occupied;
	/* lower bound of the dues in each slot (exact unless cancelled) */
	uint64_t	min_due[SLOTS];
	uint32_t	head[SLOTS];
	uint32_t	tail[SLOTS];
} JfWheelLevel;

struct JfWheel
{
	int64_t		epoch;			/* absolute ms of elapsed == 0 */
	int64_t		now;			/* absolute clock == epoch + elapsed */
	uint64_t	elapsed;
	uint64_t	horizon;
	int			nlevels;
	uint8_t		level_of_bit[64];
	size_t		count;
	size_t		max_entries;

	/*
	 * One list in firing order: first the ready part (due, not yet
	 * returned; it ends at ready_tail, WHEEL_NIL when empty), then the entries of
	 * level 0, each level-0 slot a contiguous stretch of it.
	 */
	uint32_t	list_head;
	uint32_t	list_tail;
	uint32_t	ready_tail;

	JfWheelChunk *chunks;
	uint64_t   *nonfull;		/* bit per chunk with room */
	uint32_t	nchunks;
	uint32_t	chunk_cap;
	uint32_t	nonfull_hint;	/* no bit set in words below this */

	JfWheelLevel levels[MAX_LEVELS];
};

/* A handle is chunk number and offset: two shifts, no table of pointers. */
static inline JfWheelEntry *
entry_at(const JfWheel *w, uint32_t idx)
{
	return &w->chunks[idx >> CHUNK_SHIFT].entries[idx & CHUNK_MASK];
}

/* wheel_pool.c */
extern JfWheelStatus jf_wheel_pool_add_chunk(JfWheel *w);
extern void jf_wheel_pool_trim(JfWheel *w);
extern void jf_wheel_pool_free(JfWheel *w);

/*
 * Take a free entry from the lowest chunk with room; the caller has
 * already checked max_entries.
 */
static inline JfWheelStatus
entry_alloc(JfWheel *w, uint32_t *idx)
{
	size_t		nwords = (w->nchunks + 63) / 64;
	uint32_t	c = w->nchunks;
	JfWheelChunk *ch;
	uint32_t	off;

	for (size_t i = w->nonfull_hint; i < nwords; i++)
	{
		if (w->nonfull[i])
		{
			c = i * 64 + __builtin_ctzll(w->nonfull[i]);
			w->nonfull_hint = i;
			break;
		}
	}
	if (c == w->nchunks)
	{
		JfWheelStatus st = jf_wheel_pool_add_chunk(w);

		if (st != JF_WHEEL_OK)
			return st;
	}
	ch = &w->chunks[c];
	if (ch->free_head != WHEEL_NIL)
	{
		off = ch->free_head & CHUNK_MASK;
		ch->free_head = ch->entries[off].next;
	}
	else
		off = ch->fresh++;
	if (++ch->live == CHUNK_SIZE)
		w->nonfull[c / 64] &= ~(UINT64_C(1) << (c % 64));
	w->count++;
	*idx = (c << CHUNK_SHIFT) | off;
	return JF_WHEEL_OK;
}

/*
 * Freed entries are marked (cancel's guard against stale handles) and go
 * on their chunk's free list; the pool may shrink once its last chunk is
 * empty.
 */
static inline void
entry_free(JfWheel *w, uint32_t idx, JfWheelEntry *e)
{
	uint32_t	c = idx >> CHUNK_SHIFT;
	JfWheelChunk *ch = &w->chunks[c];

	e->prev = FREE_MARK;
	e->next = ch->free_head;
	ch->free_head = idx;
	if (ch->live-- == CHUNK_SIZE)
	{
		w->nonfull[c / 64] |= UINT64_C(1) << (c % 64);
		if (c / 64 < w->nonfull_hint)
			w->nonfull_hint = c / 64;
	}
	w->count--;
	if (w->chunks[w->nchunks - 1].live == 0)
		jf_wheel_pool_trim(w);
}

#endif							/* JF_WHEEL_INTERNAL_H */
