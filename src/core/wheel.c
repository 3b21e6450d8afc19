/*-------------------------------------------------------------------------
 *
 * wheel.c
 *	  Hierarchical timing wheel for jobflow's worker.
 *
 * Levels of 64 slots with a 1 ms tick at level 0; a slot at level L spans
 * 64^L ms.  An entry due at d, with the wheel's clock at e (both counted in
 * ms from the wheel's epoch), lives at the level of the highest bit in
 * which d and e differ, in the slot given by d's 6 bits at that level.
 * Hence the invariant every operation relies on: an entry's level and
 * slot are a function of (e, d) only, and the slot starts after e.  Each
 * level keeps a 64-bit occupancy bitmap, so the next non-empty slot is one
 * rotate and count-trailing-zeros away, and the lowest non-empty level
 * always holds the earliest entries.  The top level wraps around; the
 * number of levels is chosen from the horizon so that a top-level slot can
 * never hold two rotations.
 *
 * Level 0 and the entries already due ("ready", not yet returned) form one
 * doubly linked list in firing order: the ready part first, then each
 * occupied level-0 slot as a contiguous stretch (the slot's head and tail
 * mark it).  So when the clock passes level-0 slots they become due by
 * moving the ready part's end, O(1) per advance whatever their number.
 * Slots of level 1 and up are lists of their own; when the clock reaches
 * one it is emptied into lower levels (lazy cascading: an entry is touched
 * at most once per level), moving runs of consecutive entries bound for
 * the same list in one splice.
 *
 * Entries are 24 bytes (id, absolute due, next, prev) in a pool addressed
 * by uint32 index (wheel_pool.c): no per-entry malloc and no pointer per
 * entry.  Cancel is O(1); the list an entry is on is recomputed from its
 * due instead of being stored.
 *
 * The expiry path is written for the common case of tasks loaded in due
 * order (the worker reads them ORDER BY run_at), where successive entries
 * of a list are neighbours in the pool; other orders are correct, only
 * slower.
 *
 *-------------------------------------------------------------------------
 */
#include "core/wheel_internal.h"

#include <stdlib.h>

/*
 * Level of an entry due at rel (> elapsed): that of the highest differing
 * bit, capped at the top level, which wraps.
 */
static inline int
level_for(const JfWheel *w, uint64_t elapsed, uint64_t rel)
{
	return w->level_of_bit[63 - __builtin_clzll(elapsed ^ rel)];
}

static inline uint64_t
rotr64(uint64_t x, unsigned c)
{
	return c ? (x >> c) | (x << (64 - c)) : x;
}

/*
 * The earliest non-empty slot at level from or above: the lowest non-empty
 * level, first occupied slot after the clock's own digit.  Returns false if
 * those levels are empty.  *start gets the slot's start (relative ms).  Slots never hold
 * entries due at or before elapsed, so the clock's own slot is never
 * occupied, and at the top level a slot behind the clock's digit belongs
 * to the next rotation.
 */
static inline bool
next_slot(const JfWheel *w, int from, int *level, unsigned *slot,
		  uint64_t *start)
{
	for (int l = from; l < w->nlevels; l++)
	{
		const JfWheelLevel *lv = &w->levels[l];
		unsigned	shift = l * SLOT_BITS;
		unsigned	digit;
		unsigned	off;

		if (lv->occupied == 0)
			continue;
		digit = (w->elapsed >> shift) & SLOT_MASK;
		off = __builtin_ctzll(rotr64(lv->occupied, digit));
		*level = l;
		*slot = (digit + off) & SLOT_MASK;
		*start = ((w->elapsed >> shift) + off) << shift;
		return true;
	}
	return false;
}

/*
 * Put the chain first..last into the firing-order list right after entry
 * after (WHEEL_NIL: at the front).
 */
static inline void
link_after(JfWheel *w, uint32_t after, uint32_t first, JfWheelEntry *fe,
		   uint32_t last, JfWheelEntry *le)
{
	uint32_t	succ;

	fe->prev = after;
	if (after == WHEEL_NIL)
	{
		succ = w->list_head;
		w->list_head = first;
	}
	else
	{
		JfWheelEntry *ae = entry_at(w, after);

		succ = ae->next;
		ae->next = first;
	}
	le->next = succ;
	if (succ == WHEEL_NIL)
		w->list_tail = last;
	else
		entry_at(w, succ)->prev = last;
}

/* Due entries go behind the ready part: equal dues keep insertion order. */
static inline void
ready_append(JfWheel *w, uint32_t first, JfWheelEntry *fe,
			 uint32_t last, JfWheelEntry *le)
{
	link_after(w, w->ready_tail, first, fe, last, le);
	w->ready_tail = last;
}

/*
 * Append a chain due at level-0 slot s (its time is after the clock) at
 * the end of that slot's stretch.  A slot not yet occupied starts right
 * after the nearest occupied slot before it in time (one bit scan of the
 * bitmap rotated to the clock's digit), or after the ready part.
 */
static inline void
level0_append(JfWheel *w, unsigned s, uint64_t rel, uint32_t first,
			  JfWheelEntry *fe, uint32_t last, JfWheelEntry *le)
{
	JfWheelLevel *lv = &w->levels[0];
	uint32_t	after;

	if (lv->occupied & (UINT64_C(1) << s))
		after = lv->tail[s];
	else
	{
		unsigned	digit = w->elapsed & SLOT_MASK;
		unsigned	off = (s - digit) & SLOT_MASK;
		uint64_t	rot = rotr64(lv->occupied, digit);
		uint64_t	before = rot & ((UINT64_C(1) << off) - 1);

		lv->occupied |= UINT64_C(1) << s;
		lv->head[s] = first;
		lv->min_due[s] = rel;
		lv->tail[s] = last;
		if ((rot >> off) == 0)
		{
			/* latest slot so far (always so in due order): list's end */
			fe->prev = w->list_tail;
			le->next = WHEEL_NIL;
			if (w->list_tail == WHEEL_NIL)
				w->list_head = first;
			else
				entry_at(w, w->list_tail)->next = first;
			w->list_tail = last;
			return;
		}
		if (before != 0)
			after = lv->tail[(digit + 63 - __builtin_clzll(before)) & SLOT_MASK];
		else
			after = w->ready_tail;
	}
	link_after(w, after, first, fe, last, le);
	lv->tail[s] = last;
}

/*
 * Link an entry due strictly after elapsed into its slot, at the tail.
 * Level-1-and-up slots are lists of their own.
 */
static inline void
slot_append(JfWheel *w, uint32_t idx, JfWheelEntry *e, uint64_t rel)
{
	int			l = level_for(w, w->elapsed, rel);
	JfWheelLevel *lv = &w->levels[l];
	unsigned	s = (rel >> (l * SLOT_BITS)) & SLOT_MASK;
	uint32_t	tail = lv->tail[s];

	if (l == 0)
	{
		level0_append(w, s, rel, idx, e, idx, e);
		return;
	}

	e->next = WHEEL_NIL;
	e->prev = tail;
	if (tail == WHEEL_NIL)
	{
		lv->head[s] = idx;
		lv->occupied |= UINT64_C(1) << s;
		lv->min_due[s] = rel;
	}
	else
	{
		entry_at(w, tail)->next = idx;
		if (rel < lv->min_due[s])
			lv->min_due[s] = rel;
	}
	lv->tail[s] = idx;
}

/* ----------------------------------------------------------------
 * Public API
 * ----------------------------------------------------------------
 */

/*
 * The level count is the smallest for which the top level, wrapping,
 * still tells every due within the horizon apart: a due at most
 * 63 * 64^top ms ahead lands at most 63 top slots ahead of the clock, so
 * it never shares a slot with the clock's own (never-occupied) one.
 */
JfWheel *
jf_wheel_create(int64_t now_ms, int64_t horizon_ms, uint32_t max_entries)
{
	JfWheel    *w;
	int			n;

	if (horizon_ms < 1)
		return NULL;
	for (n = 1; n <= MAX_LEVELS; n++)
		if ((uint64_t) horizon_ms <= (UINT64_C(63) << ((n - 1) * SLOT_BITS)))
			break;
	if (n > MAX_LEVELS)
		return NULL;

	w = calloc(1, sizeof(JfWheel));
	if (w == NULL)
		return NULL;
	w->epoch = now_ms;
	w->now = now_ms;
	w->elapsed = 0;
	w->horizon = (uint64_t) horizon_ms;
	w->nlevels = n;
	for (int b = 0; b < 64; b++)
		w->level_of_bit[b] = (b / SLOT_BITS < n) ? b / SLOT_BITS : n - 1;
	w->max_entries = max_entries ? max_entries : SIZE_MAX;
	w->list_head = w->list_tail = w->ready_tail = WHEEL_NIL;
	for (int l = 0; l < MAX_LEVELS; l++)
		for (int s = 0; s < SLOTS; s++)
			w->levels[l].head[s] = w->levels[l].tail[s] = WHEEL_NIL;
	return w;
}

void
jf_wheel_destroy(JfWheel *w)
{
	if (w == NULL)
		return;
	jf_wheel_pool_free(w);
	free(w);
}

/*
 * Entries already due go straight to the ready list, after everything
 * already there: they fire at the next advance, and the firing order stays
 * "by the wheel time at which each became due".
 */
JfWheelStatus
jf_wheel_insert(JfWheel *w, uint64_t id, int64_t due_ms, uint32_t *handle)
{
	JfWheelEntry *e;
	JfWheelStatus st;
	uint32_t	idx;

	if (due_ms > w->now &&
		(uint64_t) due_ms - (uint64_t) w->now > w->horizon)
		return JF_WHEEL_BEYOND_HORIZON;
	if (w->count >= w->max_entries)
		return JF_WHEEL_FULL;
	st = entry_alloc(w, &idx);
	if (st != JF_WHEEL_OK)
		return st;

	e = entry_at(w, idx);
	e->id = id;
	e->due = due_ms;
	if (due_ms <= w->now)
		ready_append(w, idx, e, idx, e);
	else
		slot_append(w, idx, e, (uint64_t) due_ms - (uint64_t) w->epoch);
	if (handle)
		*handle = idx;
	return JF_WHEEL_OK;
}

/*
 * Lets the worker see whether an entry still matches its task's run_at, so
 * a rescan can repair an entry no notification told it about.
 */
int64_t
jf_wheel_due(const JfWheel *w, uint32_t handle, uint64_t id)
{
	uint32_t	c = handle >> CHUNK_SHIFT;
	const JfWheelEntry *e;

	if (handle == JF_WHEEL_NO_HANDLE || c >= w->nchunks ||
		(handle & CHUNK_MASK) >= w->chunks[c].fresh)
		return INT64_MIN;
	e = entry_at(w, handle);
	if (e->prev == FREE_MARK || e->id != id)
		return INT64_MIN;
	return e->due;
}

/*
 * The list head/tail of a live entry are found from its due alone (see the
 * invariant at the top), so entries need not store where they are.
 */
bool
jf_wheel_cancel(JfWheel *w, uint32_t handle, uint64_t id)
{
	uint32_t	c = handle >> CHUNK_SHIFT;
	JfWheelEntry *e;
	uint64_t	rel;
	int			l;
	JfWheelLevel *lv;
	unsigned	s;

	if (handle == JF_WHEEL_NO_HANDLE || c >= w->nchunks ||
		(handle & CHUNK_MASK) >= w->chunks[c].fresh)
		return false;
	e = entry_at(w, handle);
	if (e->prev == FREE_MARK || e->id != id)
		return false;

	rel = (uint64_t) e->due - (uint64_t) w->epoch;
	l = (e->due <= w->now) ? -1 : level_for(w, w->elapsed, rel);
	if (l <= 0)
	{
		/* ready part or level 0: one list, with stretches to keep right */
		bool		is_head = handle == w->list_head;

		if (l < 0)
		{
			/* the ready part starts the list */
			if (handle == w->ready_tail)
				w->ready_tail = is_head ? WHEEL_NIL : e->prev;
		}
		else
		{
			lv = &w->levels[0];
			s = rel & SLOT_MASK;
			if (lv->head[s] == handle && lv->tail[s] == handle)
				lv->occupied &= ~(UINT64_C(1) << s);
			else if (lv->head[s] == handle)
				lv->head[s] = e->next;
			else if (lv->tail[s] == handle)
				lv->tail[s] = e->prev;
		}
		/* the head's prev is not kept up to date (see pop_ready) */
		if (is_head)
			w->list_head = e->next;
		else
			entry_at(w, e->prev)->next = e->next;
		if (e->next == WHEEL_NIL)
			w->list_tail = is_head ? WHEEL_NIL : e->prev;
		else
			entry_at(w, e->next)->prev = e->prev;
	}
	else
	{
		lv = &w->levels[l];
		s = (rel >> (l * SLOT_BITS)) & SLOT_MASK;
		if (e->prev == WHEEL_NIL)
			lv->head[s] = e->next;
		else
			entry_at(w, e->prev)->next = e->next;
		if (e->next == WHEEL_NIL)
			lv->tail[s] = e->prev;
		else
			entry_at(w, e->next)->prev = e->prev;
		if (lv->head[s] == WHEEL_NIL)
			lv->occupied &= ~(UINT64_C(1) << s);
	}

	entry_free(w, handle, e);
	return true;
}

int64_t
jf_wheel_next_deadline(const JfWheel *w)
{
	int			l;
	unsigned	s;
	uint64_t	start;

	if (w->ready_tail != WHEEL_NIL)
		return w->now;
	if (!next_slot(w, 0, &l, &s, &start))
		return INT64_MAX;
	/* min_due is >= start; exact unless its entry was cancelled */
	return (int64_t) ((uint64_t) w->epoch + w->levels[l].min_due[s]);
}

/*
 * Level-0 slots are stretches of the firing-order list right behind the
 * ready part, so making every slot whose time is <= target due is moving
 * ready_tail to the tail of the last such slot and clearing their bits:
 * O(1), whatever the number of slots or entries.  The clock moves to the
 * last slot made due.
 */
static inline void
drain_level0(JfWheel *w, uint64_t target)
{
	JfWheelLevel *lv = &w->levels[0];
	unsigned	digit = w->elapsed & SLOT_MASK;
	uint64_t	mask = rotr64(lv->occupied, digit);
	uint64_t	span = target - w->elapsed;
	unsigned	top;

	if (span < 63)
		mask &= (UINT64_C(2) << span) - 1;
	if (mask == 0)
		return;
	top = 63 - __builtin_clzll(mask);
	w->ready_tail = lv->tail[(digit + top) & SLOT_MASK];
	lv->occupied &= ~(digit ? (mask << digit) | (mask >> (64 - digit)) : mask);
	w->elapsed += top;
}

/*
 * Append the chain first..last (already linked through next and prev) to
 * a level >= 1 slot in one step; run_min is the smallest due in it.
 */
static inline void
splice_run(JfWheel *w, JfWheelLevel *lv, unsigned s,
		   uint32_t first, JfWheelEntry *fe, uint32_t last,
		   JfWheelEntry *le, uint64_t run_min)
{
	uint32_t	tail = lv->tail[s];

	le->next = WHEEL_NIL;
	fe->prev = tail;
	if (tail == WHEEL_NIL)
	{
		lv->head[s] = first;
		lv->min_due[s] = run_min;
		lv->occupied |= UINT64_C(1) << s;
	}
	else
	{
		entry_at(w, tail)->next = first;
		if (run_min < lv->min_due[s])
			lv->min_due[s] = run_min;
	}
	lv->tail[s] = last;
}

/*
 * Empty the level >= 1 slot starting at start (the clock is there now):
 * each entry moves to a lower level, or onto the ready list if due exactly
 * at start.  Consecutive entries bound for the same list are moved as one
 * run, since they are already chained to each other: the per-entry work
 * is reading the due and comparing its destination with the run's, and
 * only runs pay for linking.  In due order a run is a whole lower slot.
 * An entry bound for level l >= 1 goes to the same slot as the run iff
 * its due agrees with the run's above bit 6l (both then differ from start
 * first at level l); at level 0 and on the ready list iff the due is the
 * same, which the same test with a shift of 0 checks.
 */
static inline void
cascade_slot(JfWheel *w, int from, unsigned s, uint64_t start)
{
	JfWheelLevel *lv = &w->levels[from];
	uint64_t	epoch = (uint64_t) w->epoch;
	uint32_t	idx = lv->head[s];
	JfWheelEntry *e = entry_at(w, idx);

	lv->occupied &= ~(UINT64_C(1) << s);
	lv->head[s] = lv->tail[s] = WHEEL_NIL;
	while (e != NULL)
	{
		uint32_t	first = idx;
		JfWheelEntry *fe = e;
		uint64_t	rel = (uint64_t) e->due - epoch;
		uint64_t	run_min = rel;
		/* from level 1 everything goes to level 0 (or is due) */
		int			l = (rel == start) ? -1 :
			(from == 1) ? 0 : level_for(w, start, rel);
		unsigned	shift = (l > 0) ? l * SLOT_BITS : 0;
		uint64_t	key = rel >> shift;
		JfWheelEntry *le;
		uint32_t	last;

		for (;;)
		{
			uint32_t	next = e->next;

			le = e;
			last = idx;
			/*
			 * Entries loaded in due order sit next to each other in the
			 * pool: when next is the following slot of the same chunk,
			 * the branch predicts it and the walk need not wait on the
			 * load of e->next.
			 */
			if (likely(next == idx + 1 && (next & CHUNK_MASK) != 0))
				e = e + 1;
			else if (next != WHEEL_NIL)
				e = entry_at(w, next);
			else
			{
				e = NULL;
				break;
			}
			idx = next;
			rel = (uint64_t) e->due - epoch;
			if ((rel >> shift) != key)
				break;
			if (rel < run_min)
				run_min = rel;
		}

		if (l < 0)
			ready_append(w, first, fe, last, le);
		else if (l == 0)
			level0_append(w, key & SLOT_MASK, key, first, fe, last, le);
		else
			splice_run(w, &w->levels[l], key & SLOT_MASK,
					   first, fe, last, le, run_min);
	}
}

/*
 * Walk the clock to target visiting only non-empty slots, in time order:
 * level 0 in one bitmap walk, then the earliest higher slot that starts at
 * or before target is cascaded (the clock jumps to its start), and so on.
 * All entries sharing a due sit in one slot, so ready stays in (due,
 * insertion) order.
 */
static void
advance_clock(JfWheel *w, uint64_t target)
{
	for (;;)
	{
		int			l;
		unsigned	s;
		uint64_t	start;

		if (w->levels[0].occupied)
		{
			drain_level0(w, target);
			if (w->levels[0].occupied)
				break;			/* what is left is after target */
		}
		/* level 0 is empty here: next_slot will look from level 1 on */
		if (!next_slot(w, 1, &l, &s, &start) || start > target)
			break;
		w->elapsed = start;
		cascade_slot(w, l, s, start);
	}
	w->elapsed = target;
}

/*
 * Pop up to max entries off the ready part.  The per-entry work is copying
 * it out and marking it free; pool accounting is done per run of entries
 * from one chunk (in due order that is thousands of entries): such a run
 * is already chained through next, so it becomes the head of its chunk's
 * free list in one step.  The pool-shrink check runs once per call.
 */
static size_t
pop_ready(JfWheel *w, JfWheelExpired *out, size_t max)
{
	uint32_t	idx = w->list_head;
	uint32_t	stop = w->ready_tail;
	bool		more = stop != WHEEL_NIL;
	size_t		n = 0;

	while (n < max && more)
	{
		uint32_t	c = idx >> CHUNK_SHIFT;
		uint32_t	first = idx;
		uint32_t	run = 0;
		JfWheelChunk *ch = &w->chunks[c];
		JfWheelEntry *e = &ch->entries[idx & CHUNK_MASK];

		for (;;)
		{
			uint32_t	next = e->next;

			out[n].id = e->id;
			out[n].due_ms = e->due;
			e->prev = FREE_MARK;
			n++;
			run++;
			if (idx == stop)
			{
				more = false;
				idx = next;
				break;
			}
			if (n == max || (next >> CHUNK_SHIFT) != c)
			{
				idx = next;
				break;
			}
			/* as in cascade_slot: adjacent entries need not wait on next */
			if (likely(next == idx + 1))
				e++;
			else
				e = &ch->entries[next & CHUNK_MASK];
			idx = next;
		}
		/* e is the run's last entry: its next continues the free list */
		e->next = ch->free_head;
		ch->free_head = first;
		if (ch->live == CHUNK_SIZE)
		{
			w->nonfull[c / 64] |= UINT64_C(1) << (c % 64);
			if (c / 64 < w->nonfull_hint)
				w->nonfull_hint = c / 64;
		}
		ch->live -= run;
	}
	if (n == 0)
		return 0;
	if (!more)
		w->ready_tail = WHEEL_NIL;
	/* the new head keeps a stale prev: cancel tests for the head itself */
	w->list_head = idx;
	if (idx == WHEEL_NIL)
		w->list_tail = WHEEL_NIL;
	w->count -= n;
	if (w->chunks[w->nchunks - 1].live == 0)
		jf_wheel_pool_trim(w);
	return n;
}

size_t
jf_wheel_advance(JfWheel *w, int64_t now_ms, JfWheelExpired *out, size_t max)
{
	if (now_ms > w->now)
	{
		advance_clock(w, (uint64_t) now_ms - (uint64_t) w->epoch);
		w->now = now_ms;
	}
	return pop_ready(w, out, max);
}

size_t
jf_wheel_count(const JfWheel *w)
{
	return w->count;
}

size_t
jf_wheel_memory(const JfWheel *w)
{
	return sizeof(JfWheel) +
		(size_t) w->chunk_cap * sizeof(JfWheelChunk) +
		(size_t) (w->chunk_cap + 63) / 64 * sizeof(uint64_t) +
		(size_t) w->nchunks * CHUNK_SIZE * sizeof(JfWheelEntry);
}

int64_t
jf_wheel_now(const JfWheel *w)
{
	return w->now;
}

int64_t
jf_wheel_horizon_end(const JfWheel *w)
{
	if ((uint64_t) INT64_MAX - (uint64_t) w->now < w->horizon)
		return INT64_MAX;
	return w->now + (int64_t) w->horizon;
}

int
jf_wheel_levels(const JfWheel *w)
{
	return w->nlevels;
}
