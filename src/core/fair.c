/*-------------------------------------------------------------------------
 *
 * fair.c
 *	  Fair sharing of the dispatcher's capacity among hosts and owners:
 *	  per-(owner, named queue, origin) lanes of due tasks, picked
 *	  round-robin by priority within per-origin, per-owner, per-named-queue
 *	  and global limits and rates (see fair.h).
 *
 * Origins, named queues and lanes live in arrays found through small
 * open-addressing tables of indexes.  What no task needs any more is
 * collected (jf_fair_collect): a lane once nothing is parked or claimed in
 * it and no task the caller holds names it, an origin or a named queue
 * once no lane uses it and its rate has forgotten its last request.  Their
 * slots are reused, so memory follows what is live, not every origin ever
 * seen (a tenant sending to a million hosts in turn must not grow the
 * worker without end); owners (roles) are few and stay.  A lane is a ring buffer of
 * task ids with their due times, in the order the wheel handed them over
 * (due order, but for overdue tasks loaded late); a paused queue that got
 * one out of order is sorted again before anything is next taken from it,
 * so that on resume its tasks fire in due order.  Queues that hold parked tasks form a circular list that
 * jf_fair_pick() walks from where the previous pick stopped, so every
 * queue is visited once per pass whatever the others hold.  With named
 * queues of several priorities, it walks the circle once per priority,
 * highest first, each pass taking only the lanes of that priority.  A
 * small table of the busiest origins (claimed + parked) follows every
 * change of an origin's counts, for the metrics (jf_fair_busiest).
 *
 *-------------------------------------------------------------------------
 */
#include "core/fair.h"
#include "core/hash.h"
#include "core/rate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NONE UINT32_MAX
/* most tasks taken from one queue per visit: finer turns, fairer passes */
#define QUANTUM 64
#define MAX_ORIGIN JF_FAIR_ORIGIN_MAX
typedef struct Host
{
	char	   *origin;
	uint32_t	hash;
	int			claimed;
	int			owners;			/* queues on this origin with tasks parked or
								 * claimed: the owners sharing it now */
	int			parked;			/* tasks parked in those queues */
	int			top;			/* its slot in JfFair.top, or -1 */
	uint32_t	lanes;			/* lanes on this origin */
	JfRate		rate;			/* max_per_second_per_host */
} Host;

/* A named queue of an owner: what jobflow.queues says of it. */
typedef struct Group
{
	uint32_t	oid;
	char	   *name;
	uint32_t	hash;
	JfFairQueueConfig cfg;
	int			claimed;
	uint32_t	lanes;			/* lanes of this named queue */
	JfRate		rate;			/* cfg.max_per_second */
} Group;

/*
 * A flow key of a named queue (see fair.h): its requests in flight, its
 * rate, and for an ordered queue the retry it waits for and its back-off.
 */
typedef struct Key
{
	uint32_t	group;
	char	   *text;			/* NULL: a free slot */
	uint32_t	hash;
	int			claimed;
	uint32_t	lanes;			/* lanes of this key */
	JfRate		rate;			/* cfg.max_per_second_per_key */
	uint64_t	head;			/* ordered: the task that goes first, 0: none */
	int64_t		head_until;		/* ... at most until then */
	bool		head_required;	/* nothing else goes meanwhile (a retry) */
	uint64_t	head_since;		/* ... written when the wait began */
	bool		head_in_table;	/* ... a row to check at once (not a retry) */
	int64_t		blocked_until;	/* ordered: nothing before then */
	int64_t		backoff;		/* the last back-off, 0: none */
	uint64_t	await_write;	/* ordered: nothing until written passes it */
} Key;

/* back-offs of a key the claim found blocked, in microseconds */
#define KEY_BACKOFF_MIN 25000
#define KEY_BACKOFF_MAX 1000000

typedef struct Owner
{
	uint32_t	oid;
	int			claimed;
} Owner;

typedef struct Parked
{
	uint64_t	id;
	int64_t		due;
} Parked;

typedef struct Queue
{
	uint32_t	host;			/* NONE: a free slot */
	uint32_t	owner;
	uint32_t	group;
	uint32_t	key;			/* its flow key, NONE: none */
	uint32_t	parent;			/* keyed: the lane of (owner, named queue,
								 * origin) it counts with; NONE: unkeyed */
	uint32_t	children;		/* keyed lanes that count with it */
	uint32_t	kids;			/* ... of which have tasks parked or claimed */
	int			kid_claimed;	/* ... their claimed requests */
	Parked	   *ids;			/* ring buffer of parked tasks */
	uint32_t	head;
	uint32_t	count;
	uint32_t	cap;
	int			claimed;
	uint32_t	holds;			/* the caller's tasks naming it (jf_fair_hold) */
	uint32_t	prev;			/* in the circle of queues with tasks */
	uint32_t	next;
	bool		active;
	bool		unsorted;		/* a task was parked out of due order */
} Queue;

/* Slots of an array free for reuse. */
typedef struct FreeList
{
	uint32_t   *ids;
	uint32_t	n;
	uint32_t	cap;
} FreeList;

/* An open-addressing table of indexes + 1 (0 = empty slot). */
typedef struct Index
{
	uint32_t   *slots;
	uint32_t	size;			/* a power of two */
	uint32_t	used;
} Index;

struct JfFair
{
	JfFairConfig cfg;
	Host	   *hosts;
	uint32_t	nhosts;
	uint32_t	hosts_cap;
	Owner	   *owners;
	uint32_t	nowners;
	uint32_t	owners_cap;
	Queue	   *queues;
	uint32_t	nqueues;
	uint32_t	queues_cap;
	Group	   *groups;
	uint32_t	ngroups;
	uint32_t	groups_cap;
	Key		   *keys;
	uint32_t	nkeys;
	uint32_t	keys_cap;
	uint32_t	live_keys;
	Index		key_index;
	FreeList	free_keys;
	uint32_t	collect_key;
	uint64_t	written;		/* jf_fair_written() calls so far */
	uint32_t	awaiting;		/* keys awaiting it since the last one */
	bool		waiting_heads;	/* some key may wait for a retry */
	uint32_t	heads_cursor;	/* where jf_fair_waited_heads goes on */
	Index		host_index;
	Index		owner_index;
	Index		queue_index;
	Index		group_index;
	FreeList	free_hosts;
	FreeList	free_queues;
	FreeList	free_groups;
	uint32_t	live_queues;
	uint32_t	collect_queue;	/* where jf_fair_collect() goes on */
	uint32_t	collect_host;
	uint32_t	collect_group;
	uint32_t	made;			/* slots taken since the last collection */
	uint32_t	prioritized;	/* named queues with a priority other than 0 */
	int64_t		next_deadline;	/* see jf_fair_next_deadline() */
	uint32_t	cursor;			/* next queue to visit; NONE: no tasks */
	uint32_t	nactive;
	int			claimed;
	size_t		parked;
	size_t		bytes;			/* what the arrays, indexes and buffers hold */
	uint32_t	top[JF_FAIR_TOP];	/* the busiest hosts, in no order */
	int			ntop;
	uint32_t	sweep;			/* next host jf_fair_busiest() looks at */
	JfFairGate	gate;			/* see jf_fair_set_gate() */
	JfFairGateTaken gate_taken;
	void	   *gate_arg;
};

static uint32_t
host_hash(const JfFair *f, uint32_t i)
{
	return f->hosts[i].hash;
}

static uint32_t
owner_hash(const JfFair *f, uint32_t i)
{
	return jf_hash64(f->owners[i].oid);
}

static uint32_t
lane_key(uint32_t group, uint32_t host, uint32_t key)
{
	return jf_hash64((((uint64_t) group << 32) | host) ^ ((uint64_t) key * 0x9E3779B97F4A7C15ULL));
}

static uint32_t
queue_hash(const JfFair *f, uint32_t i)
{
	return lane_key(f->queues[i].group, f->queues[i].host, f->queues[i].key);
}

static uint32_t
key_key(uint32_t group, const char *text)
{
	return jf_hash64(((uint64_t) group << 32) | jf_hash_string(text));
}

static uint32_t
key_hash(const JfFair *f, uint32_t i)
{
	return f->keys[i].hash;
}

static uint32_t
group_key(uint32_t oid, const char *name)
{
	return jf_hash64(((uint64_t) oid << 32) | jf_hash_string(name));
}

static uint32_t
group_hash(const JfFair *f, uint32_t i)
{
	return f->groups[i].hash;
}

/* Grow an index to twice its size, re-placing every entry. */
static bool
index_grow(JfFair *f, Index *ix, uint32_t (*hash) (const JfFair *, uint32_t))
{
	uint32_t	size = ix->size ? ix->size * 2 : 64;
	uint32_t   *slots = calloc(size, sizeof(uint32_t));
	uint32_t	i;

	if (slots == NULL)
		return false;
	for (i = 0; i < ix->size; i++)
	{
		uint32_t	s;

		if (ix->slots[i] == 0)
			continue;
		s = hash(f, ix->slots[i] - 1) & (size - 1);
		while (slots[s] != 0)
			s = (s + 1) & (size - 1);
		slots[s] = ix->slots[i];
	}
	free(ix->slots);
	f->bytes += (size_t) (size - ix->size) * sizeof(uint32_t);
	ix->slots = slots;
	ix->size = size;
	return true;
}

/* Grow an array of elements of the given size to hold one more. */
static bool
array_reserve(JfFair *f, void **array, uint32_t *cap, uint32_t n, size_t elem)
{
	uint32_t	newcap;
	void	   *p;

	if (n < *cap)
		return true;
	newcap = *cap ? *cap * 2 : 64;
	p = realloc(*array, (size_t) newcap * elem);
	if (p == NULL)
		return false;
	*array = p;
	f->bytes += (size_t) (newcap - *cap) * elem;
	*cap = newcap;
	return true;
}

/*
 * Take entry idx (whose hash is given) out of an index, shifting back the
 * entries after it that probed past its slot (linear probing needs no
 * tombstones).
 */
static void
index_remove(JfFair *f, Index *ix, uint32_t (*hash) (const JfFair *, uint32_t),
			 uint32_t h, uint32_t idx)
{
	uint32_t	mask = ix->size - 1;
	uint32_t	s = h & mask;
	uint32_t	j;

	while (ix->slots[s] != idx + 1)
		s = (s + 1) & mask;
	for (j = (s + 1) & mask; ix->slots[j] != 0; j = (j + 1) & mask)
	{
		uint32_t	home = hash(f, ix->slots[j] - 1) & mask;

		/* the entry at j may move to s unless its home lies in (s, j] */
		if (s <= j ? (home <= s || home > j) : (home <= s && home > j))
		{
			ix->slots[s] = ix->slots[j];
			s = j;
		}
	}
	ix->slots[s] = 0;
	ix->used--;
}

/* Note a free slot; out of memory, it is simply not reused. */
static void
free_push(JfFair *f, FreeList *fl, uint32_t i)
{
	if (array_reserve(f, (void **) &fl->ids, &fl->cap, fl->n, sizeof(uint32_t)))
		fl->ids[fl->n++] = i;
}

/*
 * A slot for a new entry: a free one, or one more at the end of the array
 * (NONE when out of memory).
 */
static uint32_t
slot_take(JfFair *f, FreeList *fl, void **array, uint32_t *cap, uint32_t *n,
		  size_t elem)
{
	if (fl->n > 0)
	{
		f->made++;
		return fl->ids[--fl->n];
	}
	if (!array_reserve(f, array, cap, *n, elem))
		return NONE;
	f->made++;
	return (*n)++;
}

/*
 * A zeroed slot for a new origin or named queue, with its own copy of the
 * name in *copy; NONE (nothing kept) when out of memory.
 */
static uint32_t
slot_take_named(JfFair *f, const char *name, char **copy, FreeList *fl,
				void **array, uint32_t *cap, uint32_t *n, size_t elem)
{
	uint32_t	i;

	*copy = strdup(name);
	if (*copy == NULL)
		return NONE;
	i = slot_take(f, fl, array, cap, n, elem);
	if (i == NONE)
	{
		free(*copy);
		return NONE;
	}
	memset((char *) *array + (size_t) i * elem, 0, elem);
	f->bytes += strlen(name) + 1;
	return i;
}

JfFair *
jf_fair_create(const JfFairConfig *cfg)
{
	JfFair	   *f = calloc(1, sizeof(JfFair));

	if (f == NULL)
		return NULL;
	f->cfg = *cfg;
	f->cursor = NONE;
	f->next_deadline = INT64_MAX;
	return f;
}

void
jf_fair_destroy(JfFair *f)
{
	uint32_t	i;

	if (f == NULL)
		return;
	for (i = 0; i < f->nhosts; i++)
	{
		free(f->hosts[i].origin);
		jf_rate_free(&f->hosts[i].rate);
	}
	for (i = 0; i < f->nqueues; i++)
		free(f->queues[i].ids);
	for (i = 0; i < f->ngroups; i++)
	{
		free(f->groups[i].name);
		jf_rate_free(&f->groups[i].rate);
	}
	for (i = 0; i < f->nkeys; i++)
	{
		free(f->keys[i].text);
		jf_rate_free(&f->keys[i].rate);
	}
	free(f->keys);
	free(f->key_index.slots);
	free(f->free_keys.ids);
	free(f->hosts);
	free(f->owners);
	free(f->queues);
	free(f->groups);
	free(f->host_index.slots);
	free(f->owner_index.slots);
	free(f->queue_index.slots);
	free(f->group_index.slots);
	free(f->free_hosts.ids);
	free(f->free_queues.ids);
	free(f->free_groups.ids);
	free(f);
}

void
jf_fair_set_config(JfFair *f, const JfFairConfig *cfg)
{
	f->cfg = *cfg;
}

void
jf_fair_set_gate(JfFair *f, JfFairGate gate, JfFairGateTaken taken, void *arg)
{
	f->gate = gate;
	f->gate_taken = taken;
	f->gate_arg = arg;
}

const char *
jf_fair_lane_origin(const JfFair *f, uint32_t queue)
{
	return f->hosts[f->queues[queue].host].origin;
}

uint32_t
jf_fair_owner_of(const JfFair *f, uint32_t queue)
{
	return f->owners[f->queues[queue].owner].oid;
}

/* The index of origin in f->hosts, or NONE; creates nothing. */
static uint32_t
lookup_host(const JfFair *f, const char *origin)
{
	uint32_t	h = jf_hash_string(origin);
	uint32_t	s;

	if (f->host_index.size == 0)
		return NONE;
	for (s = h & (f->host_index.size - 1); f->host_index.slots[s] != 0;
		 s = (s + 1) & (f->host_index.size - 1))
	{
		const Host *host = &f->hosts[f->host_index.slots[s] - 1];

		if (host->hash == h && strcmp(host->origin, origin) == 0)
			return f->host_index.slots[s] - 1;
	}
	return NONE;
}

void
jf_fair_parked_of(const JfFair *f, int n, const uint32_t *owners,
				  const char *const *origins, size_t *out)
{
	uint32_t	hosts[JF_FAIR_PARKED_OF_MAX];
	uint32_t	i;
	uint32_t	k;
	int			j;

	for (j = 0; j < n; j++)
		out[j] = 0;
	if (n > JF_FAIR_PARKED_OF_MAX)
		n = JF_FAIR_PARKED_OF_MAX;
	for (j = 0; j < n; j++)
		hosts[j] = lookup_host(f, origins[j]);
	if (f->cursor == NONE)
		return;
	/* the circle holds exactly the lanes with parked tasks */
	for (i = f->cursor, k = 0; k < f->nactive; i = f->queues[i].next, k++)
	{
		const Queue *q = &f->queues[i];

		for (j = 0; j < n; j++)
			if (q->host == hosts[j] && f->owners[q->owner].oid == owners[j])
				out[j] += q->count;
	}
}

/*
 * scheme://host:port of an absolute URL, in lower case, with the scheme's
 * default port made explicit, so that http://A/ and http://a:80/x share
 * one origin.  URLs reaching the worker were validated by the row check.
 */
bool
jf_fair_origin(const char *url, char *buf, size_t len)
{
	const char *sep = strstr(url, "://");
	const char *auth;
	const char *end;
	const char *at;
	const char *port = NULL;
	const char *host_end;
	size_t		n = 0;
	const char *p;
	long		portnum;

	if (sep == NULL || sep == url)
		return false;
	auth = sep + 3;
	end = auth + strcspn(auth, "/?#");
	for (at = end; at > auth && at[-1] != '@'; at--)
		;
	if (at > auth)
		auth = at;
	if (*auth == '[')
	{
		host_end = memchr(auth, ']', end - auth);
		if (host_end == NULL)
			return false;
		host_end++;
		if (host_end < end && *host_end == ':')
			port = host_end + 1;
	}
	else
	{
		host_end = auth;
		while (host_end < end && *host_end != ':')
			host_end++;
		if (host_end < end)
			port = host_end + 1;
	}
	if (port != NULL && port < end)
	{
		char	   *stop;

		portnum = strtol(port, &stop, 10);
		if (stop != end || portnum < 0 || portnum > 65535)
			return false;
	}
	else if (sep - url == 5 && strncasecmp(url, "https", 5) == 0)
		portnum = 443;
	else
		portnum = 80;
	if ((size_t) (sep - url) + 3 + (size_t) (host_end - auth) + 7 > len)
		return false;
	for (p = url; p < sep; p++)
		buf[n++] = (*p >= 'A' && *p <= 'Z') ? *p + 32 : *p;
	memcpy(buf + n, "://", 3);
	n += 3;
	for (p = auth; p < host_end; p++)
		buf[n++] = (*p >= 'A' && *p <= 'Z') ? *p + 32 : *p;
	snprintf(buf + n, len - n, ":%ld", portnum);
	return true;
}

static uint32_t
find_host(JfFair *f, const char *origin)
{
	uint32_t	h = jf_hash_string(origin);
	uint32_t	s;
	Host	   *host;

	if (f->host_index.size == 0 ||
		(f->host_index.used + 1) * 2 > f->host_index.size)
		if (!index_grow(f, &f->host_index, host_hash))
			return NONE;
	for (s = h & (f->host_index.size - 1); f->host_index.slots[s] != 0;
		 s = (s + 1) & (f->host_index.size - 1))
	{
		host = &f->hosts[f->host_index.slots[s] - 1];
		if (host->hash == h && strcmp(host->origin, origin) == 0)
			return f->host_index.slots[s] - 1;
	}
	{
		char	   *copy;
		uint32_t	i = slot_take_named(f, origin, &copy, &f->free_hosts,
										(void **) &f->hosts, &f->hosts_cap,
										&f->nhosts, sizeof(Host));

		if (i == NONE)
			return NONE;
		host = &f->hosts[i];
		host->origin = copy;
		host->hash = h;
		host->top = -1;
		f->host_index.slots[s] = i + 1;
		f->host_index.used++;
		return i;
	}
}

static uint32_t
find_owner(JfFair *f, uint32_t oid)
{
	uint32_t	s;

	if (f->owner_index.size == 0 ||
		(f->owner_index.used + 1) * 2 > f->owner_index.size)
		if (!index_grow(f, &f->owner_index, owner_hash))
			return NONE;
	for (s = jf_hash64(oid) & (f->owner_index.size - 1); f->owner_index.slots[s] != 0;
		 s = (s + 1) & (f->owner_index.size - 1))
		if (f->owners[f->owner_index.slots[s] - 1].oid == oid)
			return f->owner_index.slots[s] - 1;
	if (!array_reserve(f, (void **) &f->owners, &f->owners_cap, f->nowners, sizeof(Owner)))
		return NONE;
	f->owners[f->nowners].oid = oid;
	f->owners[f->nowners].claimed = 0;
	f->owner_index.slots[s] = ++f->nowners;
	f->owner_index.used++;
	return f->nowners - 1;
}

/*
 * The named queue (oid, name), created with no limits on first use.  Its
 * index in f->groups stays valid while it has lanes or limits (a row
 * deleted from jobflow.queues just goes back to no limits).
 */
static uint32_t
find_group(JfFair *f, uint32_t oid, const char *name)
{
	uint32_t	h = group_key(oid, name);
	uint32_t	s;
	Group	   *g;

	if (f->group_index.size == 0 ||
		(f->group_index.used + 1) * 2 > f->group_index.size)
		if (!index_grow(f, &f->group_index, group_hash))
			return NONE;
	for (s = h & (f->group_index.size - 1); f->group_index.slots[s] != 0;
		 s = (s + 1) & (f->group_index.size - 1))
	{
		g = &f->groups[f->group_index.slots[s] - 1];
		if (g->hash == h && g->oid == oid && strcmp(g->name, name) == 0)
			return f->group_index.slots[s] - 1;
	}
	{
		char	   *copy;
		uint32_t	i = slot_take_named(f, name, &copy, &f->free_groups,
										(void **) &f->groups, &f->groups_cap,
										&f->ngroups, sizeof(Group));

		if (i == NONE)
			return NONE;
		g = &f->groups[i];
		g->name = copy;
		g->oid = oid;
		g->hash = h;
		f->group_index.slots[s] = i + 1;
		f->group_index.used++;
		return i;
	}
}

bool
jf_fair_configure(JfFair *f, uint32_t owner, const char *name,
				  const JfFairQueueConfig *cfg)
{
	uint32_t	i = find_group(f, owner, name);
	Group	   *g;

	if (i == NONE)
		return false;
	g = &f->groups[i];
	if (g->cfg.priority != 0)
		f->prioritized--;
	if (cfg->priority != 0)
		f->prioritized++;
	g->cfg = *cfg;
	return true;
}

void
jf_fair_reset_queues(JfFair *f)
{
	uint32_t	i;

	for (i = 0; i < f->ngroups; i++)
		memset(&f->groups[i].cfg, 0, sizeof(JfFairQueueConfig));
	f->prioritized = 0;
}

/*
 * The flow key (group, text), created on first use; NONE when out of
 * memory.  It lives while lanes use it or it has something to remember.
 */
static uint32_t
find_key(JfFair *f, uint32_t group, const char *text)
{
	uint32_t	h = key_key(group, text);
	uint32_t	s;
	Key		   *k;

	if (f->key_index.size == 0 ||
		(f->key_index.used + 1) * 2 > f->key_index.size)
		if (!index_grow(f, &f->key_index, key_hash))
			return NONE;
	for (s = h & (f->key_index.size - 1); f->key_index.slots[s] != 0;
		 s = (s + 1) & (f->key_index.size - 1))
	{
		k = &f->keys[f->key_index.slots[s] - 1];
		if (k->hash == h && k->group == group && strcmp(k->text, text) == 0)
			return f->key_index.slots[s] - 1;
	}
	{
		char	   *copy;
		uint32_t	i = slot_take_named(f, text, &copy, &f->free_keys,
										(void **) &f->keys, &f->keys_cap,
										&f->nkeys, sizeof(Key));

		if (i == NONE)
			return NONE;
		k = &f->keys[i];
		k->text = copy;
		k->group = group;
		k->hash = h;
		f->key_index.slots[s] = i + 1;
		f->key_index.used++;
		f->live_keys++;
		return i;
	}
}

/* The lane (group, host, key), created on first use; NONE: no memory. */
static uint32_t
find_lane(JfFair *f, uint32_t own, uint32_t grp, uint32_t host, uint32_t key)
{
	uint32_t	s;
	Queue	   *q;

	if (f->queue_index.size == 0 ||
		(f->queue_index.used + 1) * 2 > f->queue_index.size)
		if (!index_grow(f, &f->queue_index, queue_hash))
			return NONE;
	for (s = lane_key(grp, host, key) & (f->queue_index.size - 1);
		 f->queue_index.slots[s] != 0;
		 s = (s + 1) & (f->queue_index.size - 1))
	{
		q = &f->queues[f->queue_index.slots[s] - 1];
		if (q->host == host && q->group == grp && q->key == key)
			return f->queue_index.slots[s] - 1;
	}
	{
		uint32_t	i = slot_take(f, &f->free_queues, (void **) &f->queues,
								  &f->queues_cap, &f->nqueues, sizeof(Queue));

		if (i == NONE)
			return NONE;
		q = &f->queues[i];
		memset(q, 0, sizeof(Queue));
		q->host = host;
		q->owner = own;
		q->group = grp;
		q->key = key;
		q->parent = NONE;
		q->prev = q->next = NONE;
		f->hosts[host].lanes++;
		f->groups[grp].lanes++;
		if (key != NONE)
			f->keys[key].lanes++;
		f->live_queues++;
		f->queue_index.slots[s] = i + 1;
		f->queue_index.used++;
		return i;
	}
}

uint32_t
jf_fair_queue(JfFair *f, uint32_t owner, const char *name, const char *url)
{
	return jf_fair_queue_key(f, owner, name, url, NULL);
}

/*
 * A keyed lane is made with (or after) the lane of its (owner, named
 * queue, origin), which it counts with and keeps alive.
 */
uint32_t
jf_fair_queue_key(JfFair *f, uint32_t owner, const char *name, const char *url,
				  const char *flow_key)
{
	char		origin[MAX_ORIGIN];
	uint32_t	host;
	uint32_t	own;
	uint32_t	grp;
	uint32_t	base;
	uint32_t	key;
	uint32_t	lane;

	/* an unparsable URL fails at sending; it still needs a queue */
	if (!jf_fair_origin(url, origin, sizeof(origin)))
		snprintf(origin, sizeof(origin), "?");
	if ((host = find_host(f, origin)) == NONE || (own = find_owner(f, owner)) == NONE ||
		(grp = find_group(f, owner, name != NULL ? name : "default")) == NONE)
		return NONE;
	base = find_lane(f, own, grp, host, NONE);
	if (base == NONE || flow_key == NULL)
		return base;
	if ((key = find_key(f, grp, flow_key)) == NONE)
		return NONE;
	lane = find_lane(f, own, grp, host, key);
	if (lane != NONE && f->queues[lane].parent == NONE)
	{
		f->queues[lane].parent = base;
		f->queues[base].children++;
	}
	return lane;
}

bool
jf_fair_is_lane_of(const JfFair *f, uint32_t queue, uint32_t owner,
				   const char *name, const char *url, const char *flow_key)
{
	const Queue *q = &f->queues[queue];
	char		origin[MAX_ORIGIN];

	if (!jf_fair_origin(url, origin, sizeof(origin)))
		snprintf(origin, sizeof(origin), "?");
	if ((q->key == NONE) != (flow_key == NULL) ||
		(flow_key != NULL && strcmp(f->keys[q->key].text, flow_key) != 0))
		return false;
	return f->owners[q->owner].oid == owner &&
		strcmp(f->groups[q->group].name, name != NULL ? name : "default") == 0 &&
		strcmp(f->hosts[q->host].origin, origin) == 0;
}

bool
jf_fair_lane_keyed(const JfFair *f, uint32_t queue)
{
	return f->queues[queue].key != NONE;
}

bool
jf_fair_lane_ordered(const JfFair *f, uint32_t queue)
{
	return f->queues[queue].key != NONE && f->groups[f->queues[queue].group].cfg.ordered;
}

void
jf_fair_key_wait(JfFair *f, uint32_t queue, uint64_t id, int64_t until_us)
{
	Queue	   *q = &f->queues[queue];

	if (q->key == NONE || !f->groups[q->group].cfg.ordered)
		return;
	f->keys[q->key].head = id;
	f->keys[q->key].head_until = until_us;
	f->keys[q->key].head_required = true;
	f->keys[q->key].head_since = f->written;
	f->keys[q->key].head_in_table = false;
	f->waiting_heads = true;
}

void
jf_fair_key_await(JfFair *f, uint32_t queue, uint64_t id, int64_t until_us)
{
	Queue	   *q = &f->queues[queue];

	if (q->key == NONE || !f->groups[q->group].cfg.ordered)
		return;
	jf_fair_key_wait(f, queue, id, until_us);
	f->keys[q->key].head_in_table = true;
}

int64_t
jf_fair_key_blocked(JfFair *f, uint32_t queue, int64_t now_us, uint64_t blocker,
					int64_t at_least_us)
{
	Queue	   *q = &f->queues[queue];
	Key		   *k;

	if (q->key == NONE)
		return KEY_BACKOFF_MIN;
	k = &f->keys[q->key];
	k->backoff = k->backoff == 0 ? KEY_BACKOFF_MIN :
		(k->backoff * 2 > KEY_BACKOFF_MAX ? KEY_BACKOFF_MAX : k->backoff * 2);
	k->blocked_until = now_us + (at_least_us > k->backoff ? at_least_us : k->backoff);
	/*
	 * The task that blocks it (pending, redriven or retried, it goes before
	 * the ones behind it once parked; running or failed, it is not waited
	 * for here: the back-off is).
	 */
	if (blocker != 0 && (k->head == 0 || !k->head_required))
	{
		k->head = blocker;
		k->head_until = k->blocked_until + 2 * KEY_BACKOFF_MAX;
		k->head_required = false;
	}
	return k->blocked_until - now_us;
}

/* A walk over the keys: called once a reconcile interval, while some wait. */
int
jf_fair_waited_heads(JfFair *f, uint64_t *ids, int max)
{
	uint32_t	i;
	int			n = 0;
	bool		some = false;

	if (!f->waiting_heads || f->nkeys == 0)
		return 0;
	/* from where the last walk stopped, so that each gets its turn */
	for (i = 0; i < f->nkeys && n < max; i++)
	{
		const Key  *k;

		if (f->heads_cursor >= f->nkeys)
			f->heads_cursor = 0;
		k = &f->keys[f->heads_cursor++];
		if (k->text == NULL || k->head == 0 || !k->head_required)
			continue;
		some = true;
		if (k->head_in_table || f->written > k->head_since)
			ids[n++] = k->head;
	}
	f->waiting_heads = some;
	return n;
}

/* The key that waits for task id (if one does) waits no more. */
void
jf_fair_head_gone(JfFair *f, uint64_t id)
{
	uint32_t	i;

	for (i = 0; i < f->nkeys; i++)
	{
		Key		   *k = &f->keys[i];

		if (k->text != NULL && k->head == id && k->head_required)
		{
			k->head = 0;
			k->head_required = false;
		}
	}
}

void
jf_fair_key_done(JfFair *f, uint32_t queue)
{
	Queue	   *q = &f->queues[queue];

	if (q->key != NONE)
		f->keys[q->key].backoff = 0;
}

void
jf_fair_key_await_write(JfFair *f, uint32_t queue)
{
	Queue	   *q = &f->queues[queue];

	if (q->key == NONE || !f->groups[q->group].cfg.ordered)
		return;
	f->keys[q->key].await_write = f->written + 1;
	f->awaiting++;
}

bool
jf_fair_written(JfFair *f)
{
	bool		some = f->awaiting > 0;

	f->written++;
	f->awaiting = 0;
	return some;
}

size_t
jf_fair_keys(const JfFair *f)
{
	return f->live_keys;
}

/* Whether a lane has nothing parked or claimed, itself or its keyed lanes. */
static bool
lane_idle(const Queue *q)
{
	return q->count == 0 && q->claimed == 0 && q->kids == 0;
}

/*
 * Lane i turned busy (tasks parked or claimed) from idle: it is one more
 * of its origin's sharers, or, keyed, makes its base lane one.
 */
static void
lane_up(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	if (q->parent != NONE)
	{
		Queue	   *p = &f->queues[q->parent];
		bool		was_idle = lane_idle(p);

		p->kids++;
		if (was_idle)
			f->hosts[p->host].owners++;
	}
	else
		f->hosts[q->host].owners++;
}

/* Lane i turned idle: the reverse of lane_up. */
static void
lane_down(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	if (q->parent != NONE)
	{
		Queue	   *p = &f->queues[q->parent];

		p->kids--;
		if (lane_idle(p))
			f->hosts[p->host].owners--;
	}
	else
		f->hosts[q->host].owners--;
}

/* Kept for the worker, which logs a lane's attempts as its queue says. */
JfFairLog
jf_fair_lane_log(const JfFair *f, uint32_t queue)
{
	return f->groups[f->queues[queue].group].cfg.log;
}

/* Join the circle just before the cursor: visited last in this pass. */
static void
circle_insert(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	if (f->cursor == NONE)
	{
		q->prev = q->next = i;
		f->cursor = i;
	}
	else
	{
		Queue	   *c = &f->queues[f->cursor];

		q->next = f->cursor;
		q->prev = c->prev;
		f->queues[c->prev].next = i;
		c->prev = i;
	}
	q->active = true;
	f->nactive++;
}

static void
circle_remove(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	if (q->next == i)
		f->cursor = NONE;
	else
	{
		f->queues[q->prev].next = q->next;
		f->queues[q->next].prev = q->prev;
		if (f->cursor == i)
			f->cursor = q->next;
	}
	q->prev = q->next = NONE;
	q->active = false;
	f->nactive--;
}

static int
host_load(const JfFair *f, uint32_t i)
{
	return f->hosts[i].claimed + f->hosts[i].parked;
}

/*
 * Keep the table of the busiest hosts in step with a change of host i's
 * load: an idle host leaves it, and a host outside it takes the place of
 * the least busy one if it now has more.  A member whose load fell stays
 * until something busier comes along; jf_fair_busiest() sweeps for hosts
 * that became busier than it without changing since.
 */
static void
top_note(JfFair *f, uint32_t i)
{
	Host	   *h = &f->hosts[i];
	int			load = host_load(f, i);
	int			least = 0;
	int			k;

	if (h->top >= 0)
	{
		if (load == 0)
		{
			f->top[h->top] = f->top[--f->ntop];
			f->hosts[f->top[h->top]].top = h->top;
			h->top = -1;
		}
		return;
	}
	if (load == 0)
		return;
	if (f->ntop < JF_FAIR_TOP)
	{
		h->top = f->ntop;
		f->top[f->ntop++] = i;
		return;
	}
	for (k = 1; k < f->ntop; k++)
		if (host_load(f, f->top[k]) < host_load(f, f->top[least]))
			least = k;
	if (load <= host_load(f, f->top[least]))
		return;
	f->hosts[f->top[least]].top = -1;
	f->top[least] = i;
	h->top = least;
}

static int	compare_parked(const void *a, const void *b);

/* Park a task at the back of its lane, or, front, at its head. */
static bool
push(JfFair *f, uint32_t queue, uint64_t id, int64_t due, bool front)
{
	Queue	   *q = &f->queues[queue];
	bool		ordered = q->key != NONE && f->groups[q->group].cfg.ordered;

	/* the task an ordered key waits for goes before the ones behind it */
	if (ordered && f->keys[q->key].head == id)
		front = true;

	if (q->count == q->cap)
	{
		uint32_t	cap = q->cap ? q->cap * 2 : 16;
		Parked	   *ids = malloc(sizeof(Parked) * cap);
		uint32_t	k;

		if (ids == NULL)
			return false;
		for (k = 0; k < q->count; k++)
			ids[k] = q->ids[(q->head + k) % q->cap];
		free(q->ids);
		f->bytes += (size_t) (cap - q->cap) * sizeof(Parked);
		q->ids = ids;
		q->cap = cap;
		q->head = 0;
	}
	if (lane_idle(q))
		lane_up(f, queue);
	/*
	 * Only a paused queue is sorted again (when it is next served): there,
	 * tasks loaded late (overdue ones scheduled while it was paused) must
	 * not fire out of due order on resume.  Other queues are served as the
	 * wheel hands tasks over, as before: sorting a large backlog on every
	 * turn would cost every queue's lateness.
	 */
	/*
	 * An ordered key's lane is sorted too, ties by id: its tasks go in due
	 * order then id, whatever the order they were loaded in.
	 */
	if (front)
	{
		q->head = (q->head + q->cap - 1) % q->cap;
		q->ids[q->head].id = id;
		q->ids[q->head].due = due;
		if (q->count > 0 && compare_parked(&q->ids[q->head], &q->ids[(q->head + 1) % q->cap]) > 0 &&
			(f->groups[q->group].cfg.paused || ordered))
			q->unsorted = true;
	}
	else
	{
		Parked	   *last = &q->ids[(q->head + q->count - 1) % q->cap];

		if (q->count > 0 &&
			(due < last->due || (ordered && due == last->due && id < last->id)) &&
			(f->groups[q->group].cfg.paused || ordered))
			q->unsorted = true;
		q->ids[(q->head + q->count) % q->cap].id = id;
		q->ids[(q->head + q->count) % q->cap].due = due;
	}
	q->count++;
	f->parked++;
	f->hosts[q->host].parked++;
	top_note(f, q->host);
	if (!q->active)
		circle_insert(f, queue);
	return true;
}

bool
jf_fair_push(JfFair *f, uint32_t queue, uint64_t id, int64_t due)
{
	return push(f, queue, id, due, false);
}

bool
jf_fair_push_front(JfFair *f, uint32_t queue, uint64_t id, int64_t due)
{
	return push(f, queue, id, due, true);
}

/*
 * Lane i's parked entries went down (picked, or dropped as stale): once
 * none is left, it is no longer among its origin's owners unless it has
 * requests claimed, and it leaves the circle of lanes with tasks.
 */
static void
lane_drained(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	if (q->count > 0 || !q->active)
		return;
	circle_remove(f, i);
	if (lane_idle(q))
		lane_down(f, i);
}

bool
jf_fair_stale_heavy(const JfFair *f, uint32_t queue)
{
	const Queue *q = &f->queues[queue];

	return q->count > 2 * (uint64_t) q->holds + 16;
}

uint32_t
jf_fair_compact(JfFair *f, uint32_t queue, JfFairTake here, void *arg)
{
	Queue	   *q = &f->queues[queue];
	Host	   *h = &f->hosts[q->host];
	uint32_t	kept = 0;
	uint32_t	dropped;
	uint32_t	k;

	for (k = 0; k < q->count; k++)
	{
		Parked		p = q->ids[(q->head + k) % q->cap];

		if (here(p.id, queue, arg))
			q->ids[(q->head + kept++) % q->cap] = p;
	}
	dropped = q->count - kept;
	q->count = kept;
	f->parked -= dropped;
	h->parked -= dropped;
	lane_drained(f, queue);
	top_note(f, q->host);
	return dropped;
}

static int
min_int(int a, int b)
{
	return a < b ? a : b;
}

/*
 * Places queue q may take on its origin now.  Owners sending to one origin
 * share its max_per_host: each may hold an equal share while others wait
 * there, and one that holds nothing gets a place even on a full origin (a
 * tenant's slow requests to a shared receiver must not hold another's
 * callbacks there until they time out; the origin is exceeded by at most
 * one request per owner).
 */
static int
host_room(JfFair *f, Host *h, Queue *q)
{
	int			share = f->cfg.max_per_host / (h->owners > 0 ? h->owners : 1);
	Queue	   *base = q->parent != NONE ? &f->queues[q->parent] : q;
	int			claimed = base->claimed + base->kid_claimed;
	int			room = min_int(f->cfg.max_per_host - h->claimed,
							   (share > 0 ? share : 1) - claimed);

	if (claimed == 0 && room < 1)
		room = 1;
	return room;
}

static void sort_queue(Queue *q);

/*
 * An ordered key waiting for the retry of its head: the head goes first
 * once parked, wherever it is in the lane (moved to the front); true when
 * it is there.
 */
static bool
head_to_front(Queue *q, uint64_t head)
{
	uint32_t	k;

	for (k = 0; k < q->count; k++)
	{
		uint32_t	at = (q->head + k) % q->cap;

		if (q->ids[at].id == head)
		{
			Parked		p = q->ids[at];

			for (; k > 0; k--)
				q->ids[(q->head + k) % q->cap] = q->ids[(q->head + k - 1) % q->cap];
			q->ids[q->head] = p;
			return true;
		}
	}
	return false;
}

/*
 * Places the flow key of lane q leaves it now (room at most): its cap,
 * for an ordered queue one at a time and not while it waits for a retry
 * or backs off.  The key's rate comes later, with the other rates.
 */
static int
key_room(JfFair *f, Queue *q, Group *g, int room, int64_t now)
{
	Key		   *k = &f->keys[q->key];

	if (g->cfg.ordered)
	{
		room = min_int(room, 1 - k->claimed);
		/* the outcome of the task before is not written yet */
		if (k->await_write > f->written)
			return 0;
		if (room > 0 && k->blocked_until > now)
		{
			if (k->blocked_until < f->next_deadline)
				f->next_deadline = k->blocked_until;
			return 0;
		}
		if (room > 0 && k->head != 0)
		{
			if (now >= k->head_until)
				k->head = 0;
			else
			{
				if (q->unsorted)
					sort_queue(q);
				if (!head_to_front(q, k->head) && k->head_required)
					return 0;
			}
		}
	}
	else if (g->cfg.max_concurrent_per_key > 0)
		room = min_int(room, g->cfg.max_concurrent_per_key - k->claimed);
	return room;
}

static int
compare_parked(const void *a, const void *b)
{
	const Parked *x = a;
	const Parked *y = b;

	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Put a queue's parked tasks back in due order (ties by id). */
static void
sort_queue(Queue *q)
{
	if (q->head + q->count > q->cap)
	{
		/* wrapped: rotate the ring so that it starts at 0 */
		Parked	   *tmp = malloc(sizeof(Parked) * q->count);
		uint32_t	k;

		if (tmp == NULL)
			return;				/* out of memory: served as parked */
		for (k = 0; k < q->count; k++)
			tmp[k] = q->ids[(q->head + k) % q->cap];
		memcpy(q->ids, tmp, sizeof(Parked) * q->count);
		free(tmp);
		q->head = 0;
	}
	qsort(q->ids + q->head, q->count, sizeof(Parked), compare_parked);
	q->unsorted = false;
}

/*
 * One pass of jf_fair_pick over the circle; with `filter`, over the lanes
 * of priority `level` only (the others count as visited without taking).
 */
static int
pick_pass(JfFair *f, JfFairPick *out, int max, int64_t now, bool filter,
		  int level, JfFairTake take, void *arg)
{
	int			n = 0;
	int			global_room = f->cfg.max_in_flight - f->claimed;
	uint32_t	idle = 0;
	uint32_t	i = f->cursor;

	while (n < max && global_room > 0 && i != NONE)
	{
		Queue	   *q = &f->queues[i];
		Host	   *h = &f->hosts[q->host];
		Owner	   *o = &f->owners[q->owner];
		Group	   *g = &f->groups[q->group];
		uint32_t	next = q->next;
		int			room;
		int			took = 0;
		bool		group_rated = false;
		bool		host_rated = false;
		bool		key_rated = false;
		bool		gated = false;
		Key		   *k = q->key != NONE ? &f->keys[q->key] : NULL;

		if (filter && g->cfg.priority != level)
		{
			if (++idle >= f->nactive)
				break;
			i = f->cursor = next;
			continue;
		}
		room = host_room(f, h, q);
		room = min_int(room, f->cfg.max_per_owner - o->claimed);
		if (g->cfg.paused)
			room = 0;
		if (g->cfg.max_concurrent > 0)
			room = min_int(room, g->cfg.max_concurrent - g->claimed);
		room = min_int(room, min_int(global_room, min_int(QUANTUM, max - n)));
		if (room > 0 && k != NULL)
			room = key_room(f, q, g, room, now);
		/* an open circuit: before the rates, so that it spends no token */
		if (room > 0 && f->gate != NULL)
		{
			int			limit = f->gate(o->oid, h->origin, f->gate_arg);

			if (limit >= 0)
			{
				room = min_int(room, limit);
				gated = true;
			}
		}
		if (room > 0 && q->unsorted)
			sort_queue(q);
		if (room > 0 && g->cfg.max_per_second > 0)
		{
			size_t		before = jf_rate_memory(&g->rate);

			room = min_int(room, jf_rate_room(&g->rate, g->cfg.max_per_second, now,
											  &f->next_deadline));
			f->bytes += jf_rate_memory(&g->rate) - before;
			group_rated = true;
		}
		if (room > 0 && f->cfg.max_per_second_per_host > 0)
		{
			size_t		before = jf_rate_memory(&h->rate);

			room = min_int(room, jf_rate_room(&h->rate, f->cfg.max_per_second_per_host,
											  now, &f->next_deadline));
			f->bytes += jf_rate_memory(&h->rate) - before;
			host_rated = true;
		}
		if (room > 0 && k != NULL && g->cfg.max_per_second_per_key > 0)
		{
			size_t		before = jf_rate_memory(&k->rate);

			room = min_int(room, jf_rate_room(&k->rate, g->cfg.max_per_second_per_key,
											  now, &f->next_deadline));
			f->bytes += jf_rate_memory(&k->rate) - before;
			key_rated = true;
		}
		while (took < room && q->count > 0)
		{
			uint64_t	id = q->ids[q->head].id;

			q->head = (q->head + 1) % q->cap;
			q->count--;
			f->parked--;
			h->parked--;
			if (take != NULL && !take(id, i, arg))
				continue;
			out[n].id = id;
			out[n].queue = i;
			n++;
			took++;
			if (gated && f->gate_taken != NULL)
				f->gate_taken(o->oid, h->origin, id, f->gate_arg);
		}
		if (g->cfg.max_per_second > 0)
			jf_rate_spend(&g->rate, took, group_rated && q->count > 0);
		if (f->cfg.max_per_second_per_host > 0)
			jf_rate_spend(&h->rate, took, host_rated && q->count > 0);
		if (k != NULL)
		{
			if (g->cfg.max_per_second_per_key > 0)
				jf_rate_spend(&k->rate, took, key_rated && q->count > 0);
			k->claimed += took;
			f->queues[q->parent].kid_claimed += took;
			if (took > 0)
			{
				k->head = 0;
				k->head_required = false;
			}
		}
		h->claimed += took;
		o->claimed += took;
		g->claimed += took;
		q->claimed += took;
		f->claimed += took;
		global_room -= took;
		top_note(f, q->host);
		if (took > 0)
			idle = 0;
		else if (q->count > 0)
			idle++;
		lane_drained(f, i);
		if (f->cursor == NONE)
			break;
		i = q->active ? next : f->cursor;
		f->cursor = i;
		if (idle >= f->nactive)
			break;
	}
	return n;
}

/*
 * Round-robin over every lane when no named queue has a priority (the
 * usual case: one pass); otherwise one pass per priority present among the
 * lanes with tasks, highest first, for as long as places remain.
 */
int
jf_fair_pick(JfFair *f, JfFairPick *out, int max, int64_t now_us,
			 JfFairTake take, void *arg)
{
	int			n = 0;
	bool		have_upper = false;
	int			upper = 0;

	f->next_deadline = INT64_MAX;
	if (f->prioritized == 0)
		return pick_pass(f, out, max, now_us, false, 0, take, arg);
	while (n < max && f->cursor != NONE && f->claimed < f->cfg.max_in_flight)
	{
		bool		found = false;
		int			level = 0;
		uint32_t	i = f->cursor;

		do
		{
			int			p = f->groups[f->queues[i].group].cfg.priority;

			if ((!have_upper || p < upper) && (!found || p > level))
			{
				level = p;
				found = true;
			}
			i = f->queues[i].next;
		} while (i != f->cursor);
		if (!found)
			break;
		n += pick_pass(f, out + n, max - n, now_us, true, level, take, arg);
		upper = level;
		have_upper = true;
	}
	return n;
}

int64_t
jf_fair_next_deadline(const JfFair *f)
{
	return f->next_deadline;
}

void
jf_fair_release(JfFair *f, uint32_t queue)
{
	Queue	   *q = &f->queues[queue];

	f->hosts[q->host].claimed--;
	f->owners[q->owner].claimed--;
	f->groups[q->group].claimed--;
	q->claimed--;
	f->claimed--;
	if (q->key != NONE)
	{
		f->keys[q->key].claimed--;
		f->queues[q->parent].kid_claimed--;
	}
	if (lane_idle(q))
		lane_down(f, queue);
	top_note(f, q->host);
}

void
jf_fair_hold(JfFair *f, uint32_t queue)
{
	f->queues[queue].holds++;
}

/* An unbalanced unhold would pin the lane for good: never below zero. */
void
jf_fair_unhold(JfFair *f, uint32_t queue)
{
	if (f->queues[queue].holds > 0)
		f->queues[queue].holds--;
}

/* Free lane i: nothing is parked or claimed in it and nothing holds it. */
static void
free_queue(JfFair *f, uint32_t i)
{
	Queue	   *q = &f->queues[i];

	index_remove(f, &f->queue_index, queue_hash, queue_hash(f, i), i);
	f->hosts[q->host].lanes--;
	f->groups[q->group].lanes--;
	if (q->key != NONE)
		f->keys[q->key].lanes--;
	if (q->parent != NONE)
		f->queues[q->parent].children--;
	free(q->ids);
	f->bytes -= (size_t) q->cap * sizeof(Parked);
	memset(q, 0, sizeof(Queue));
	q->host = NONE;
	q->prev = q->next = NONE;
	f->live_queues--;
	free_push(f, &f->free_queues, i);
}

/* Free origin i: no lane uses it and its rate lost all memory of it. */
static void
free_host(JfFair *f, uint32_t i)
{
	Host	   *h = &f->hosts[i];

	top_note(f, i);				/* idle: leaves the busiest table */
	index_remove(f, &f->host_index, host_hash, h->hash, i);
	f->bytes -= strlen(h->origin) + 1 + jf_rate_memory(&h->rate);
	free(h->origin);
	jf_rate_free(&h->rate);
	memset(h, 0, sizeof(Host));
	h->top = -1;
	free_push(f, &f->free_hosts, i);
}

static bool
unconfigured(const JfFairQueueConfig *cfg)
{
	return !cfg->paused && cfg->max_concurrent == 0 && cfg->max_per_second == 0 &&
		cfg->priority == 0 && cfg->log == JF_FAIR_LOG_DEFAULT &&
		cfg->max_concurrent_per_key == 0 && cfg->max_per_second_per_key == 0 &&
		!cfg->ordered;
}

/* Free key i: no lane, nothing in flight, nothing to remember. */
static void
free_key(JfFair *f, uint32_t i)
{
	Key		   *k = &f->keys[i];

	index_remove(f, &f->key_index, key_hash, k->hash, i);
	f->bytes -= strlen(k->text) + 1 + jf_rate_memory(&k->rate);
	free(k->text);
	jf_rate_free(&k->rate);
	memset(k, 0, sizeof(Key));
	f->live_keys--;
	free_push(f, &f->free_keys, i);
}

/* Free named queue i: no lane, no limits, its rate idle. */
static void
free_group(JfFair *f, uint32_t i)
{
	Group	   *g = &f->groups[i];

	index_remove(f, &f->group_index, group_hash, g->hash, i);
	f->bytes -= strlen(g->name) + 1 + jf_rate_memory(&g->rate);
	free(g->name);
	jf_rate_free(&g->rate);
	memset(g, 0, sizeof(Group));
	free_push(f, &f->free_groups, i);
}

/* How many of n entries one collect looks at: a quarter, within bounds. */
static uint32_t
collect_share(uint32_t n, uint32_t max_look)
{
	uint32_t	share = n / 4 > 4096 ? n / 4 : 4096;

	return share < max_look ? share : max_look;
}

size_t
jf_fair_collect(JfFair *f, int64_t now_us, uint32_t max_look, uint32_t max_free)
{
	size_t		freed = 0;
	uint32_t	look;
	uint32_t	gone;
	uint32_t	k;

	f->made = 0;
	look = collect_share(f->nqueues, max_look);
	for (k = 0, gone = 0; k < look && k < f->nqueues && gone < max_free; k++)
	{
		Queue	   *q;

		if (f->collect_queue >= f->nqueues)
			f->collect_queue = 0;
		q = &f->queues[f->collect_queue];
		if (q->host != NONE && q->holds == 0 && q->count == 0 && q->claimed == 0 &&
			q->children == 0 && !q->active)
		{
			free_queue(f, f->collect_queue);
			gone++;
		}
		f->collect_queue++;
	}
	freed += gone;
	look = collect_share(f->nkeys, max_look);
	for (k = 0, gone = 0; k < look && k < f->nkeys && gone < max_free; k++)
	{
		Key		   *key;

		if (f->collect_key >= f->nkeys)
			f->collect_key = 0;
		key = &f->keys[f->collect_key];
		if (key->text != NULL && key->lanes == 0 && key->claimed == 0 &&
			(key->head == 0 || now_us >= key->head_until) &&
			key->await_write <= f->written &&
			key->blocked_until <= now_us && jf_rate_idle(&key->rate, now_us))
		{
			free_key(f, f->collect_key);
			gone++;
		}
		f->collect_key++;
	}
	freed += gone;
	look = collect_share(f->nhosts, max_look);
	for (k = 0, gone = 0; k < look && k < f->nhosts && gone < max_free; k++)
	{
		Host	   *h;

		if (f->collect_host >= f->nhosts)
			f->collect_host = 0;
		h = &f->hosts[f->collect_host];
		if (h->origin != NULL && h->lanes == 0 && h->claimed == 0 && h->parked == 0 &&
			jf_rate_idle(&h->rate, now_us))
		{
			free_host(f, f->collect_host);
			gone++;
		}
		f->collect_host++;
	}
	freed += gone;
	look = collect_share(f->ngroups, max_look);
	for (k = 0, gone = 0; k < look && k < f->ngroups && gone < max_free; k++)
	{
		Group	   *g;

		if (f->collect_group >= f->ngroups)
			f->collect_group = 0;
		g = &f->groups[f->collect_group];
		if (g->name != NULL && g->lanes == 0 && g->claimed == 0 &&
			unconfigured(&g->cfg) && jf_rate_idle(&g->rate, now_us))
		{
			free_group(f, f->collect_group);
			gone++;
		}
		f->collect_group++;
	}
	return freed + gone;
}

bool
jf_fair_collect_due(const JfFair *f)
{
	return f->made >= JF_FAIR_COLLECT_FREE / 2;
}

void
jf_fair_drop_parked(JfFair *f)
{
	uint32_t	i;

	for (i = 0; i < f->nqueues; i++)
	{
		Queue	   *q = &f->queues[i];

		q->head = q->count = 0;
		q->holds = 0;
		q->kids = 0;
		q->unsorted = false;
		q->prev = q->next = NONE;
		q->active = false;
	}
	f->cursor = NONE;
	f->nactive = 0;
	f->parked = 0;
	for (i = 0; i < f->nhosts; i++)
	{
		f->hosts[i].parked = 0;
		f->hosts[i].owners = 0;
	}
	/* what is still claimed keeps its lanes busy, keyed ones first */
	for (i = 0; i < f->nqueues; i++)
		if (f->queues[i].host != NONE && f->queues[i].parent != NONE &&
			f->queues[i].claimed > 0)
			f->queues[f->queues[i].parent].kids++;
	for (i = 0; i < f->nqueues; i++)
		if (f->queues[i].host != NONE && f->queues[i].parent == NONE &&
			!lane_idle(&f->queues[i]))
			f->hosts[f->queues[i].host].owners++;
	for (i = 0; i < f->nhosts; i++)
		top_note(f, i);
}

int
jf_fair_busiest(JfFair *f, JfFairLoad *out, int sweep)
{
	int			n;
	int			k;

	for (k = 0; k < sweep && (uint32_t) k < f->nhosts; k++)
	{
		if (f->sweep >= f->nhosts)
			f->sweep = 0;
		top_note(f, f->sweep++);
	}
	/* most first; equal loads by origin, so that the order is stable */
	for (n = 0; n < f->ntop; n++)
	{
		Host	   *h = &f->hosts[f->top[n]];
		JfFairLoad	x = {h->origin, h->claimed, h->parked};

		for (k = n; k > 0; k--)
		{
			int			d = (out[k - 1].claimed + out[k - 1].parked) - (x.claimed + x.parked);

			if (d > 0 || (d == 0 && strcmp(out[k - 1].origin, x.origin) <= 0))
				break;
			out[k] = out[k - 1];
		}
		out[k] = x;
	}
	return n;
}

size_t
jf_fair_parked(const JfFair *f)
{
	return f->parked;
}

int
jf_fair_claimed(const JfFair *f)
{
	return f->claimed;
}

size_t
jf_fair_queues(const JfFair *f)
{
	return f->live_queues;
}

size_t
jf_fair_memory(const JfFair *f)
{
	return sizeof(JfFair) + f->bytes;
}
