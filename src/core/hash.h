/*-------------------------------------------------------------------------
 *
 * hash.h
 *	  The two small hash functions jobflow's in-memory tables share.
 *
 * Plain C, no PostgreSQL headers: used by the worker's task map (feed.c)
 * and by the plain-C modules (core/fair.c, http/queue.c) alike.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JF_HASH_H
#define JF_HASH_H

#include <stdint.h>

/* MurmurHash3's 64-bit finaliser: task ids and oids are dense, spread them. */
static inline uint32_t
jf_hash64(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	return (uint32_t) x;
}

/* FNV-1a: host keys are short, any spread will do. */
static inline uint32_t
jf_hash_string(const char *s)
{
	uint32_t	h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char) *s) * 16777619u;
	return h;
}

#endif							/* JF_HASH_H */
