/*-------------------------------------------------------------------------
 *
 * wheel_pool.c
 *	  The entry pool of jobflow's timing wheel: chunks carved out of slabs.
 *
 * Entries are 24 bytes (id, absolute due, next, prev) in a pool of chunks
 * of 65536, addressed by uint32 index: no per-entry malloc and no pointer
 * per entry.  Allocation (inline, in wheel_internal.h) prefers the lowest
 * chunk with room, so a draining wheel empties its trailing chunks, which
 * are then released here (with one chunk of slack so that hovering around
 * a boundary does not map and unmap memory on every other insert).
 *
 * Chunks are carved out of 6 MB slabs, 2 MB-aligned and advised for
 * transparent huge pages, which makes the first touch of a chunk far
 * cheaper.  A chunk's entries are handed out through its "fresh" mark, so
 * adding a chunk touches no page at all.
 *
 *-------------------------------------------------------------------------
 */
#include "core/wheel_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Chunks are carved out of slabs of 4 (6 MB, three 2 MB huge pages), mapped
 * 2 MB-aligned and, where the kernel offers it, advised to be backed by
 * transparent huge pages: a fresh chunk then costs one page fault per 2 MB
 * instead of one per 4 kB.
 */
#define SLAB_CHUNKS		4u
#define CHUNK_BYTES		((size_t) CHUNK_SIZE * sizeof(JfWheelEntry))
#define SLAB_BYTES		(SLAB_CHUNKS * CHUNK_BYTES)
#define SLAB_ALIGN		((size_t) 2 << 20)

/*
 * Map one slab, 2 MB-aligned (map 2 MB more, unmap the ragged ends).
 * Returns NULL when out of memory.
 */
static void *
slab_map(void)
{
	char	   *p = mmap(NULL, SLAB_BYTES + SLAB_ALIGN, PROT_READ | PROT_WRITE,
						 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	size_t		lead;

	if (p == MAP_FAILED)
		return NULL;
	lead = (SLAB_ALIGN - ((uintptr_t) p & (SLAB_ALIGN - 1))) & (SLAB_ALIGN - 1);
	if (lead > 0)
		munmap(p, lead);
	munmap(p + lead + SLAB_BYTES, SLAB_ALIGN - lead);
	p += lead;
#ifdef MADV_HUGEPAGE
	(void) madvise(p, SLAB_BYTES, MADV_HUGEPAGE);	/* advice only */
#endif
	return p;
}

/*
 * Add one chunk at the end.  The chunk table and the bitmap grow by
 * doubling; the entries themselves are left uninitialised (handed out
 * through "fresh"), so an added chunk costs no page touching.
 */
JfWheelStatus
jf_wheel_pool_add_chunk(JfWheel *w)
{
	JfWheelChunk *ch;

	if (w->nchunks >= MAX_CHUNKS)
		return JF_WHEEL_FULL;
	if (w->nchunks == w->chunk_cap)
	{
		uint32_t	newcap = w->chunk_cap ? w->chunk_cap * 2 : 16;
		size_t		oldwords = (w->chunk_cap + 63) / 64;
		size_t		newwords = (newcap + 63) / 64;
		JfWheelChunk *nc;
		uint64_t   *nb;

		nc = realloc(w->chunks, newcap * sizeof(JfWheelChunk));
		if (nc == NULL)
			return JF_WHEEL_NO_MEMORY;
		w->chunks = nc;
		nb = realloc(w->nonfull, newwords * sizeof(uint64_t));
		if (nb == NULL)
			return JF_WHEEL_NO_MEMORY;	/* bigger table kept, harmless */
		memset(nb + oldwords, 0, (newwords - oldwords) * sizeof(uint64_t));
		w->nonfull = nb;
		w->chunk_cap = newcap;
	}
	ch = &w->chunks[w->nchunks];
	if (w->nchunks % SLAB_CHUNKS == 0)
	{
		ch->entries = slab_map();
		if (ch->entries == NULL)
			return JF_WHEEL_NO_MEMORY;
	}
	else
		ch->entries = (JfWheelEntry *)
			((char *) w->chunks[w->nchunks - 1].entries + CHUNK_BYTES);
	ch->free_head = WHEEL_NIL;
	ch->fresh = 0;
	ch->live = 0;
	w->nonfull[w->nchunks / 64] |= UINT64_C(1) << (w->nchunks % 64);
	if (w->nchunks / 64 < w->nonfull_hint)
		w->nonfull_hint = w->nchunks / 64;
	w->nchunks++;
	return JF_WHEEL_OK;
}

/*
 * Release trailing empty chunks, but only while the chunks left keep a
 * whole free chunk's worth of room: a wheel hovering around a chunk
 * boundary must not malloc and free 1.5 MB on every other insert.
 */
void
jf_wheel_pool_trim(JfWheel *w)
{
	while (w->nchunks > 1 &&
		   w->chunks[w->nchunks - 1].live == 0 &&
		   w->count <= (size_t) (w->nchunks - 2) * CHUNK_SIZE)
	{
		uint32_t	c = w->nchunks - 1;

		if (c % SLAB_CHUNKS == 0)
			munmap(w->chunks[c].entries, SLAB_BYTES);
		w->chunks[c].entries = NULL;
		w->nonfull[c / 64] &= ~(UINT64_C(1) << (c % 64));
		w->nchunks--;
	}
}

/*
 * Slabs are unmapped through their first chunk, which alone holds the
 * mapping's start.
 */
void
jf_wheel_pool_free(JfWheel *w)
{
	for (uint32_t c = 0; c < w->nchunks; c += SLAB_CHUNKS)
		munmap(w->chunks[c].entries, SLAB_BYTES);
	free(w->chunks);
	free(w->nonfull);
}
