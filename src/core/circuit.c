/*-------------------------------------------------------------------------
 *
 * circuit.c
 *	  Circuits per (owner, origin) (see circuit.h).
 *
 * A chained hash table of the circuits that count something: a closed one
 * with failures counted, or one open or half-open.  A closed circuit that
 * counts nothing is no entry at all, so memory follows the (owner, origin)
 * pairs failing now, not every origin ever sent to; a closed one whose
 * failures are older than the window is forgotten by jf_circuits_list(),
 * and so is an open one that saw no request for a long time (no task of
 * its owner goes there any more).
 *
 *-------------------------------------------------------------------------
 */
#include "core/circuit.h"
#include "core/hash.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct Circuit
{
	struct Circuit *next;		/* in its bucket */
	uint32_t	owner;
	uint32_t	hash;
	char	   *origin;
	JfCircuitState state;
	int			failures;
	int64_t		since_ms;
	int64_t		first_failure_ms;
	int64_t		last_seen_ms;	/* last result or probe */
	int64_t		next_probe_ms;
	int64_t		backoff_ms;		/* the interval after the next failed probe */
	uint64_t	probe_id;		/* half-open: the probe's task */
} Circuit;

struct JfCircuits
{
	JfCircuitConfig cfg;
	Circuit   **buckets;
	uint32_t	nbuckets;		/* a power of two, or 0 */
	size_t		count;
	int			nopen;
};

/* an open circuit nobody sent to for this long is forgotten */
#define IDLE_FORGET_MS ((int64_t) 3600 * 1000)

static uint32_t
key_hash(uint32_t owner, const char *origin)
{
	return jf_hash64(((uint64_t) owner << 32) | jf_hash_string(origin));
}

JfCircuits *
jf_circuits_create(const JfCircuitConfig *cfg)
{
	JfCircuits *c = calloc(1, sizeof(JfCircuits));

	if (c != NULL)
		c->cfg = *cfg;
	return c;
}

static void
forget_all(JfCircuits *c)
{
	uint32_t	b;

	for (b = 0; b < c->nbuckets; b++)
	{
		Circuit    *e = c->buckets[b];

		while (e != NULL)
		{
			Circuit    *next = e->next;

			free(e->origin);
			free(e);
			e = next;
		}
		c->buckets[b] = NULL;
	}
	c->count = 0;
	c->nopen = 0;
}

void
jf_circuits_destroy(JfCircuits *c)
{
	if (c == NULL)
		return;
	forget_all(c);
	free(c->buckets);
	free(c);
}

void
jf_circuits_set_config(JfCircuits *c, const JfCircuitConfig *cfg)
{
	c->cfg = *cfg;
	if (c->cfg.probe_max_ms < c->cfg.probe_min_ms)
		c->cfg.probe_max_ms = c->cfg.probe_min_ms;
	if (cfg->failures <= 0)
		forget_all(c);
}

static Circuit *
find(const JfCircuits *c, uint32_t owner, const char *origin, uint32_t h)
{
	Circuit    *e;

	if (c->nbuckets == 0)
		return NULL;
	for (e = c->buckets[h & (c->nbuckets - 1)]; e != NULL; e = e->next)
		if (e->hash == h && e->owner == owner && strcmp(e->origin, origin) == 0)
			return e;
	return NULL;
}

/* Twice as many buckets once there are more circuits than buckets. */
static void
grow(JfCircuits *c)
{
	uint32_t	n = c->nbuckets ? c->nbuckets * 2 : 64;
	Circuit   **b = calloc(n, sizeof(Circuit *));
	uint32_t	i;

	if (b == NULL)
		return;					/* longer chains, still correct */
	for (i = 0; i < c->nbuckets; i++)
	{
		Circuit    *e = c->buckets[i];

		while (e != NULL)
		{
			Circuit    *next = e->next;

			e->next = b[e->hash & (n - 1)];
			b[e->hash & (n - 1)] = e;
			e = next;
		}
	}
	free(c->buckets);
	c->buckets = b;
	c->nbuckets = n;
}

/* A new closed circuit; NULL when out of memory (nothing is counted then). */
static Circuit *
add(JfCircuits *c, uint32_t owner, const char *origin, uint32_t h)
{
	Circuit    *e;

	if (c->nbuckets == 0 || c->count >= c->nbuckets)
		grow(c);
	if (c->nbuckets == 0)
		return NULL;
	e = calloc(1, sizeof(Circuit));
	if (e == NULL)
		return NULL;
	e->origin = strdup(origin);
	if (e->origin == NULL)
	{
		free(e);
		return NULL;
	}
	e->owner = owner;
	e->hash = h;
	e->state = JF_CIRCUIT_CLOSED;
	e->next = c->buckets[h & (c->nbuckets - 1)];
	c->buckets[h & (c->nbuckets - 1)] = e;
	c->count++;
	return e;
}

static void
remove_entry(JfCircuits *c, Circuit *e)
{
	Circuit   **p = &c->buckets[e->hash & (c->nbuckets - 1)];

	while (*p != e)
		p = &(*p)->next;
	*p = e->next;
	if (e->state != JF_CIRCUIT_CLOSED)
		c->nopen--;
	free(e->origin);
	free(e);
	c->count--;
}

int
jf_circuits_room(JfCircuits *c, uint32_t owner, const char *origin, int64_t now_ms)
{
	Circuit    *e;

	if (c == NULL || c->nopen == 0)
		return -1;
	e = find(c, owner, origin, key_hash(owner, origin));
	if (e == NULL || e->state == JF_CIRCUIT_CLOSED)
		return -1;
	if (e->state == JF_CIRCUIT_OPEN && now_ms >= e->next_probe_ms)
		return 1;
	return 0;
}

void
jf_circuits_taken(JfCircuits *c, uint32_t owner, const char *origin, uint64_t id,
				  int64_t now_ms)
{
	Circuit    *e;

	if (c == NULL || c->nopen == 0)
		return;
	e = find(c, owner, origin, key_hash(owner, origin));
	if (e == NULL || e->state != JF_CIRCUIT_OPEN)
		return;
	e->state = JF_CIRCUIT_HALF_OPEN;
	e->since_ms = now_ms;
	e->probe_id = id;
	e->last_seen_ms = now_ms;
}

/* Open (again): the next probe after the current backoff, doubled after. */
static void
open_circuit(JfCircuits *c, Circuit *e, int64_t now_ms)
{
	if (e->state == JF_CIRCUIT_CLOSED)
	{
		c->nopen++;
		e->backoff_ms = c->cfg.probe_min_ms;
	}
	e->state = JF_CIRCUIT_OPEN;
	e->since_ms = now_ms;
	e->next_probe_ms = now_ms + e->backoff_ms;
	e->backoff_ms = e->backoff_ms > c->cfg.probe_max_ms / 2 ?
		c->cfg.probe_max_ms : e->backoff_ms * 2;
	if (e->backoff_ms < 1)
		e->backoff_ms = 1;
}

bool
jf_circuits_result(JfCircuits *c, uint32_t owner, const char *origin, uint64_t id,
				   JfCircuitResult r, int64_t now_ms)
{
	uint32_t	h;
	Circuit    *e;

	if (c == NULL || c->cfg.failures <= 0 || r == JF_CIRCUIT_NEUTRAL)
	{
		if (r == JF_CIRCUIT_NEUTRAL)
			jf_circuits_unsent(c, owner, origin, id, now_ms);
		return false;
	}
	h = key_hash(owner, origin);
	e = find(c, owner, origin, h);
	if (r == JF_CIRCUIT_SUCCESS)
	{
		bool		was_open;

		if (e == NULL)
			return false;
		was_open = e->state != JF_CIRCUIT_CLOSED;
		remove_entry(c, e);
		return was_open;
	}
	if (e == NULL && (e = add(c, owner, origin, h)) == NULL)
		return false;
	e->last_seen_ms = now_ms;
	if (e->state == JF_CIRCUIT_CLOSED)
	{
		if (e->failures == 0 || now_ms - e->first_failure_ms > c->cfg.window_ms)
		{
			e->failures = 0;
			e->first_failure_ms = now_ms;
			e->since_ms = now_ms;
		}
		e->failures++;
		if (e->failures >= c->cfg.failures)
		{
			open_circuit(c, e, now_ms);
			return true;
		}
		return false;
	}
	e->failures++;
	/* the probe failed: open again, for longer; other failures change nothing */
	if (e->state == JF_CIRCUIT_HALF_OPEN && e->probe_id == id)
		open_circuit(c, e, now_ms);
	return false;
}

void
jf_circuits_unsent(JfCircuits *c, uint32_t owner, const char *origin, uint64_t id,
				   int64_t now_ms)
{
	Circuit    *e;

	if (c == NULL || c->nopen == 0)
		return;
	e = find(c, owner, origin, key_hash(owner, origin));
	if (e == NULL || e->state != JF_CIRCUIT_HALF_OPEN || e->probe_id != id)
		return;
	/* no answer either way: another task may probe at once */
	e->state = JF_CIRCUIT_OPEN;
	e->next_probe_ms = now_ms;
}

int
jf_circuits_reset(JfCircuits *c, uint32_t owner, const char *origin,
				  uint32_t *closed, int max)
{
	int			n = 0;
	uint32_t	b;

	if (c == NULL)
		return 0;
	for (b = 0; b < c->nbuckets; b++)
	{
		Circuit    *e = c->buckets[b];

		while (e != NULL)
		{
			Circuit    *next = e->next;

			if ((owner == 0 || e->owner == owner) && strcmp(e->origin, origin) == 0)
			{
				if (e->state != JF_CIRCUIT_CLOSED)
				{
					if (n < max)
						closed[n] = e->owner;
					n++;
				}
				remove_entry(c, e);
			}
			e = next;
		}
	}
	return n;
}

int64_t
jf_circuits_next_probe(const JfCircuits *c, int64_t now_ms)
{
	int64_t		at = INT64_MAX;
	uint32_t	b;

	if (c == NULL || c->nopen == 0)
		return INT64_MAX;
	for (b = 0; b < c->nbuckets; b++)
		for (Circuit *e = c->buckets[b]; e != NULL; e = e->next)
			if (e->state == JF_CIRCUIT_OPEN && e->next_probe_ms > now_ms &&
				e->next_probe_ms < at)
				at = e->next_probe_ms;
	return at;
}

/* One circuit as jf_circuits_list() ranks them when they do not all fit. */
typedef struct Ranked
{
	Circuit    *e;
	int			closed;
	size_t		rank;			/* among its owner's, from 0 */
} Ranked;

/* By owner, its not closed ones first, oldest first: rank can be counted. */
static int
compare_owner(const void *a, const void *b)
{
	const Ranked *x = a;
	const Ranked *y = b;

	if (x->e->owner != y->e->owner)
		return x->e->owner < y->e->owner ? -1 : 1;
	if (x->closed != y->closed)
		return x->closed - y->closed;
	if (x->e->since_ms != y->e->since_ms)
		return x->e->since_ms < y->e->since_ms ? -1 : 1;
	return strcmp(x->e->origin, y->e->origin);
}

/* Each owner's first, then each owner's second, ...; not closed first. */
static int
compare_rank(const void *a, const void *b)
{
	const Ranked *x = a;
	const Ranked *y = b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	if (x->closed != y->closed)
		return x->closed - y->closed;
	return compare_owner(a, b);
}

static void
list_one(JfCircuitInfo *out, const Circuit *e)
{
	out->owner = e->owner;
	out->origin = e->origin;
	out->state = e->state;
	out->since_ms = e->since_ms;
	out->failures = e->failures;
	out->next_probe_ms = e->state == JF_CIRCUIT_OPEN ? e->next_probe_ms : 0;
}

/*
 * More circuits than max: shared out among their owners, each owner's
 * first (its open ones before those that count failures) before any
 * owner's second, so that one owner's many circuits do not hide another's.  -1 when out of memory (the caller lists them in
 * table order then).
 */
static int
list_shared(JfCircuits *c, JfCircuitInfo *out, int max)
{
	Ranked	   *r = malloc(sizeof(Ranked) * c->count);
	size_t		n = 0;
	size_t		i;
	uint32_t	b;

	if (r == NULL)
		return -1;
	for (b = 0; b < c->nbuckets; b++)
		for (Circuit *e = c->buckets[b]; e != NULL; e = e->next)
		{
			r[n].e = e;
			r[n].closed = e->state == JF_CIRCUIT_CLOSED;
			n++;
		}
	qsort(r, n, sizeof(Ranked), compare_owner);
	for (i = 0; i < n; i++)
		r[i].rank = i > 0 && r[i - 1].e->owner == r[i].e->owner ? r[i - 1].rank + 1 : 0;
	qsort(r, n, sizeof(Ranked), compare_rank);
	for (i = 0; i < n && i < (size_t) max; i++)
		list_one(&out[i], r[i].e);
	free(r);
	return (int) i;
}

int
jf_circuits_list(JfCircuits *c, JfCircuitInfo *out, int max, int64_t now_ms)
{
	int			n = 0;
	int			pass;

	if (c == NULL)
		return 0;
	for (pass = 0; pass < 2; pass++)
	{
		uint32_t	b;

		/* too many to show all: pass 0 forgot the stale ones */
		if (pass == 1 && max > 0 && c->count > (size_t) max)
		{
			int			k = list_shared(c, out, max);

			if (k >= 0)
				return k;
		}
		for (b = 0; b < c->nbuckets; b++)
		{
			Circuit    *e = c->buckets[b];

			while (e != NULL)
			{
				Circuit    *next = e->next;
				bool		closed = e->state == JF_CIRCUIT_CLOSED;

				if (pass == 0 && closed && now_ms - e->first_failure_ms > c->cfg.window_ms)
					remove_entry(c, e);
				else if (pass == 0 && !closed &&
						 now_ms - e->last_seen_ms > IDLE_FORGET_MS &&
						 now_ms - e->last_seen_ms > 4 * c->cfg.probe_max_ms)
					remove_entry(c, e);
				else if (n < max && closed == (pass == 1))
					list_one(&out[n++], e);
				e = next;
			}
		}
	}
	return n;
}

int
jf_circuits_open(const JfCircuits *c)
{
	return c == NULL ? 0 : c->nopen;
}

size_t
jf_circuits_count(const JfCircuits *c)
{
	return c == NULL ? 0 : c->count;
}
