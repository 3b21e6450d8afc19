/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *	  From due wheel entries to HTTP requests, and from responses to
 *	  outcomes: claim, submit, classify, retry.
 *
 * Due tasks leave the wheel into their (owner, origin) queue of the fair
 * share (fair.c), which decides what may be claimed now: never more than an
 * origin can take soon, nor more than an owner's share, so a slow host, a
 * tenant or a backlog holds up nobody else's tasks (see docs/operations.md).  What
 * it picks is claimed in batches by one UPDATE that only takes tasks still
 * pending and due, so a cancelled or rescheduled task never fires; claiming
 * marks them running and counts the attempt.  Requests then go to the
 * libcurl dispatcher (http.c), which runs them at once and never blocks the
 * worker.  Each result becomes an outcome row for the log writer; a retry
 * goes straight back into the wheel.
 *
 * A claim is committed as durably as the cluster's synchronous_commit says
 * (on, by default; with synchronous replication, on the standby too)
 * before its requests go out, and only what can be sent at once is
 * claimed: so every attempt counted may have been sent, and every request
 * that may have been sent has its attempt counted, whatever crashes.  After
 * a crash, tasks left running are put back with that attempt logged as
 * interrupted, and the next attempt has the next number.  Outcomes are
 * written asynchronously: one lost in a crash leaves its task running, and
 * the same rescue applies.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "storage/pmsignal.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "worker/dispatch.h"
#include "core/circuit.h"
#include "base/compat.h"
#include "base/fault.h"
#include "base/signing.h"
#include "worker/feed.h"
#include "worker/guard.h"
#include "worker/log_writer.h"
#include "worker/queues.h"
#include "worker/state.h"
#include "worker/xact.h"

/* What the worker remembers of a request in flight (the result's user). */
typedef struct InFlight
{
	int64		id;
	int32		attempt;
	int32		max_attempts;
	Oid			owner;
	uint32		queue;			/* its (owner, queue, origin) lane in the fair
								 * share */
	TimestampTz scheduled_at;
	uint32		generation;		/* jf_guard_generation() when claimed */
} InFlight;

/* what the worker keeps per request in flight: the result's user pointer */
typedef struct InFlightEntry
{
	InFlight	task;
	bool		unsent;			/* still queued when the worker stopped */
	int			nsecrets;
	char	  **secrets;		/* header secret values sent, in the worker's
								 * context: masked in what is logged */
	dlist_node	node;
} InFlightEntry;

/*
 * Circuit changes kept for notification between two turns: as many as
 * happen (one per request that ends, or per circuit reset), up to this
 * many, so that no owner's many changes push another owner's out.
 */
#define CIRCUIT_CHANGES_MAX 65536

/* A circuit that changed state, to be told its owner. */
typedef struct CircuitChange
{
	Oid			owner;
	bool		open;
	char		origin[JF_FAIR_ORIGIN_MAX];
} CircuitChange;

/* most due tasks moved from the wheel into the fair share per turn */
#define MAX_PARKED_PER_TURN 100000

/* The dispatcher's state: what is in flight and what is being claimed. */
struct JfDispatch
{
	dlist_head	in_flight;		/* InFlightEntry */
	/* picks being claimed: counted in the fair share, not yet requests */
	JfFairPick *claiming;
	int			nclaiming;
	/* requests of a committed claim, until libcurl has them all */
	JfHttpRequest *committed;
	int			ncommitted;
	int			nsubmitted;
	SPIPlanPtr	claim_plan;
	bool		places_freed;	/* since the last pick */
	SPIPlanPtr	overlap_plan;	/* skip_overlapping's statement */
	uint64		cron_skipped;	/* by the claim being made, counted at commit */
	MemoryContext claim_cxt;	/* requests between claim and submit */
	uint64_t	stale_seen;		/* jf_http_stale_restarts, counted so far */
	/* circuits that changed state, to be told their owners */
	int			nchanges;
	int			maxchanges;
	CircuitChange *changes;		/* in the worker's context, or NULL */
};

static JfHttpConfig
http_config(void)
{
	JfHttpConfig cfg;

	memset(&cfg, 0, sizeof(cfg));
	cfg.max_concurrent = jobflow_max_concurrent;
	/*
	 * Per-origin limits are the fair share's (which lets an owner that has
	 * nothing on a full origin have one request there): whatever it claimed
	 * starts at once.
	 */
	cfg.max_per_host = jobflow_max_concurrent;
	cfg.max_response_bytes = (size_t) jobflow_max_response_size;
	cfg.max_redirects = jobflow_max_redirects;
	cfg.user_agent = "jobflow/" JOBFLOW_VERSION;
	cfg.proxy = NULL;
	cfg.deny_networks = jobflow_deny_networks;
	cfg.allow_networks = jobflow_allow_networks;
	cfg.follow_cross_origin = jobflow_follow_cross_origin_redirects;
	cfg.doh_url = jobflow_test_doh_url;
	cfg.ca_file = jobflow_tls_ca_file;
	cfg.ca_path = jobflow_tls_ca_path;
	return cfg;
}

/*
 * Caps and rates hold for the database: with several workers, each takes
 * its share of them (jf_worker_share_cap, rates divided).
 */
static JfFairConfig
fair_config(void)
{
	JfFairConfig cfg;

	cfg.max_in_flight = jf_worker_share_cap(jobflow_max_concurrent);
	cfg.max_per_host = jf_worker_share_cap(jobflow_max_per_host);
	cfg.max_per_owner = jf_worker_share_cap(jobflow_max_per_owner);
	cfg.max_per_second_per_host = jobflow_max_rate_per_host / jobflow_workers_per_database;
	return cfg;
}

/* The circuits' settings (base/settings.c), in milliseconds. */
static JfCircuitConfig
circuit_config(void)
{
	JfCircuitConfig cfg;

	cfg.failures = jobflow_circuit_failures;
	cfg.window_ms = (int64) jobflow_circuit_window_s * 1000;
	cfg.probe_min_ms = (int64) jobflow_circuit_probe_min_s * 1000;
	cfg.probe_max_ms = (int64) jobflow_circuit_probe_max_s * 1000;
	return cfg;
}

/*
 * The fair share's gate: how many of (owner, origin)'s parked tasks its
 * circuit lets go now (-1: no limit).  Costs nothing while every circuit
 * is closed.
 */
static int
circuit_gate(uint32_t owner, const char *origin, void *arg)
{
	JfWorkerState *ws = (JfWorkerState *) arg;

	if (jf_circuits_open(ws->circuits) == 0)
		return -1;
	return jf_circuits_room(ws->circuits, owner, origin, jf_now_ms());
}

/* A task taken through an open circuit: its probe. */
static void
circuit_taken(uint32_t owner, const char *origin, uint64_t id, void *arg)
{
	JfWorkerState *ws = (JfWorkerState *) arg;

	jf_circuits_taken(ws->circuits, owner, origin, id, jf_now_ms());
}

/*
 * A picked task that was not sent after all (not claimed, handed back): if
 * it was a circuit's probe, another task may probe at once.
 */
static void
circuit_unsent(JfWorkerState *ws, uint32 queue, int64 id)
{
	if (jf_circuits_open(ws->circuits) > 0)
		jf_circuits_unsent(ws->circuits, jf_fair_owner_of(ws->fair, queue),
						   jf_fair_lane_origin(ws->fair, queue), (uint64) id, jf_now_ms());
}

/*
 * What a result says of its origin, for the circuits: the failures of the
 * origin itself (no connection, no answer in time, a broken TLS handshake
 * or DNS, a 5xx, a connection reset) count; any other answer (2xx, 3xx,
 * 4xx) shows it alive; a 408 or 429 (it asks to be left alone, which
 * retries already honour) and what never reached it (a denied address, a
 * redirect not followed) say nothing.
 */
static JfCircuitResult
circuit_class(const JfHttpResult *r)
{
	switch (jf_http_result_class(r))
	{
		case JF_CLASS_5XX:
		case JF_CLASS_TIMEOUT:
		case JF_CLASS_CONNECT:
		case JF_CLASS_DNS:
		case JF_CLASS_TLS:
		case JF_CLASS_NO_ANSWER:
		case JF_CLASS_OTHER:
			return JF_CIRCUIT_FAILURE;
		case JF_CLASS_2XX:
		case JF_CLASS_3XX:
			return JF_CIRCUIT_SUCCESS;
		case JF_CLASS_4XX:
			return r->http_status == 408 || r->http_status == 429 ?
				JF_CIRCUIT_NEUTRAL : JF_CIRCUIT_SUCCESS;
		default:
			return JF_CIRCUIT_NEUTRAL;
	}
}

void
jf_dispatch_init(JfWorkerState *ws)
{
	char		errbuf[256];
	JfHttpConfig cfg = http_config();

	if (!jf_http_global_init(errbuf, sizeof(errbuf)))
		ereport(ERROR,
				(errmsg("could not initialise libcurl: %s", errbuf)));
	ws->dispatch = MemoryContextAllocZero(ws->cxt, sizeof(JfDispatch));
	dlist_init(&ws->dispatch->in_flight);
	ws->dispatch->claim_cxt = AllocSetContextCreate(ws->cxt, "jobflow claims", ALLOCSET_DEFAULT_SIZES);
	ws->http = jf_http_create(&cfg, errbuf, sizeof(errbuf));
	if (ws->http == NULL)
		ereport(ERROR,
				(errmsg("could not create the jobflow HTTP dispatcher: %s", errbuf)));
	{
		JfFairConfig fcfg = fair_config();
		JfCircuitConfig ccfg = circuit_config();

		ws->fair = jf_fair_create(&fcfg);
		ws->circuits = jf_circuits_create(&ccfg);
	}
	if (ws->fair == NULL || ws->circuits == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory creating the jobflow fair share")));
	jf_fair_set_gate(ws->fair, circuit_gate, circuit_taken, ws);
}

/* Settings changed on SIGHUP: new caps apply at once. */
void
jf_dispatch_reconfigure(JfWorkerState *ws)
{
	JfHttpConfig cfg = http_config();
	JfFairConfig fcfg = fair_config();
	JfCircuitConfig ccfg = circuit_config();

	jf_fair_set_config(ws->fair, &fcfg);
	jf_circuits_set_config(ws->circuits, &ccfg);
	if (!jf_http_set_config(ws->http, &cfg))
		ereport(WARNING,
				(errmsg("out of memory applying new jobflow HTTP settings; the old ones stay")));
}

/*
 * jsonb headers and content type as "Name: value" lines for libcurl.  With
 * no content type given either way, "Content-Type:" stops libcurl from
 * sending its form-encoded default for a POST body: a task without a
 * content type gets none.
 */
static const char **
build_headers(Jsonb *headers, const char *content_type, Jsonb *secrets, int *n,
			  InFlightEntry *e, MemoryContext cxt)
{
	int			cap = JB_ROOT_COUNT(headers) + 1;
	const char **lines = palloc(sizeof(char *) * cap);
	JsonbIterator *it = JsonbIteratorInit(&headers->root);
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *name = NULL;
	bool		has_content_type = false;

	*n = 0;
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			name = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE && name != NULL && v.type == jbvString)
		{
			if (pg_strcasecmp(name, "Content-Type") == 0)
				has_content_type = true;
			lines[(*n)++] = psprintf("%s: %.*s", name, v.val.string.len, v.val.string.val);
			name = NULL;
		}
		else if (tok == WJB_VALUE && name != NULL && v.type == jbvBinary)
		{
			/* {"secret": "name"}: the owner's secret (none, when dropped or
			 * not bound to this origin: no header) */
			JsonbValue *ref = getKeyJsonValueFromContainer(v.val.binary.data, "secret", 6, NULL);
			JsonbValue *value = NULL;

			if (ref != NULL && ref->type == jbvString && secrets != NULL)
				value = getKeyJsonValueFromContainer(&secrets->root, ref->val.string.val,
													 ref->val.string.len, NULL);
			if (value != NULL && value->type == jbvString)
			{
				lines[(*n)++] = psprintf("%s: %.*s", name, value->val.string.len,
										 value->val.string.val);
				if (e->secrets == NULL)
					e->secrets = MemoryContextAlloc(cxt, sizeof(char *) * cap);
				e->secrets[e->nsecrets++] = MemoryContextStrdup(cxt,
																pnstrdup(value->val.string.val,
																		 value->val.string.len));
			}
			name = NULL;
		}
	}
	if (content_type != NULL)
		lines[(*n)++] = psprintf("Content-Type: %s", content_type);
	else if (!has_content_type)
		lines[(*n)++] = "Content-Type:";
	return lines;
}

/*
 * Build the request for one claimed row (columns as in the claim
 * statement), copying everything into the current memory context: the
 * request is only handed to libcurl once the claim has committed.
 */
static void
build_request(JfWorkerState *ws, HeapTuple tup, TupleDesc desc, uint32 queue,
			  JfHttpRequest *req)
{
	bool		isnull;
	InFlightEntry *e;
	Datum		d;
	int			nheaders;
	char	   *content_type = NULL;
	Jsonb	   *secrets;

	e = MemoryContextAllocZero(ws->cxt, sizeof(InFlightEntry));
	e->task.id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	e->task.attempt = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	e->task.max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	e->task.owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
	e->task.scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 5, &isnull));
	e->task.queue = queue;
	e->task.generation = jf_guard_generation();

	memset(req, 0, sizeof(*req));
	req->task_id = e->task.id;
	req->attempt = e->task.attempt;
	req->user = e;
	req->url = TextDatumGetCString(SPI_getbinval(tup, desc, 6, &isnull));
	req->method = TextDatumGetCString(SPI_getbinval(tup, desc, 7, &isnull));
	d = SPI_getbinval(tup, desc, 10, &isnull);
	if (!isnull)
		content_type = TextDatumGetCString(d);
	d = SPI_getbinval(tup, desc, 15, &isnull);
	secrets = isnull ? NULL : DatumGetJsonbP(d);
	req->headers = build_headers(DatumGetJsonbP(SPI_getbinval(tup, desc, 8, &isnull)),
								 content_type, secrets, &nheaders, e, ws->cxt);
	req->nheaders = nheaders;
	d = SPI_getbinval(tup, desc, 9, &isnull);
	if (!isnull)
	{
		text	   *body = DatumGetTextPP(d);

		req->body_len = VARSIZE_ANY_EXHDR(body);
		req->body = pnstrdup(VARDATA_ANY(body), req->body_len);
	}
	else if (!(d = SPI_getbinval(tup, desc, 14, &isnull), isnull))
	{
		bytea	   *bytes = DatumGetByteaPP(d);
		char	   *copy;

		/* a binary body: its bytes as they are, zero bytes included */
		req->body_len = VARSIZE_ANY_EXHDR(bytes);
		copy = palloc(req->body_len + 1);
		memcpy(copy, VARDATA_ANY(bytes), req->body_len);
		copy[req->body_len] = '\0';
		req->body = copy;
	}
	req->timeout_ms = DatumGetInt32(SPI_getbinval(tup, desc, 11, &isnull));
	/* the owner's signing secrets, if it has any: signed as sent, right now */
	d = SPI_getbinval(tup, desc, 12, &isnull);
	if (!isnull)
	{
		char	   *installation = TextDatumGetCString(SPI_getbinval(tup, desc, 13, &isnull));

		req->headers = jf_sign_headers(req->headers, &nheaders, DatumGetArrayTypeP(d),
									   installation, e->task.id, req->body,
									   req->body_len);
		req->nheaders = nheaders;
	}
	/* the queue's client certificate and key, bound to this origin */
	d = SPI_getbinval(tup, desc, 17, &isnull);
	if (!isnull)
	{
		Datum	   *pems;
		bool	   *pnulls;
		int			npems;

		deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
						  &pems, &pnulls, &npems);
		if (npems == 2 && !pnulls[0] && !pnulls[1])
		{
			text	   *cert = DatumGetTextPP(pems[0]);
			text	   *key = DatumGetTextPP(pems[1]);

			req->client_cert_len = VARSIZE_ANY_EXHDR(cert);
			req->client_cert = pnstrdup(VARDATA_ANY(cert), req->client_cert_len);
			req->client_key_len = VARSIZE_ANY_EXHDR(key);
			req->client_key = pnstrdup(VARDATA_ANY(key), req->client_key_len);
		}
	}
}

/*
 * The copies of client keys in claimed requests, once libcurl's dispatcher
 * has its own: wiped before their context is reset.
 */
static void
wipe_client_keys(JfHttpRequest *reqs, int n)
{
	for (int i = 0; i < n; i++)
		if (reqs[i].client_key != NULL)
			explicit_bzero((char *) reqs[i].client_key, reqs[i].client_key_len);
}

/* An entry and the secret values it keeps. */
static void
free_entry(InFlightEntry *e)
{
	for (int i = 0; i < e->nsecrets; i++)
		pfree(e->secrets[i]);
	if (e->secrets != NULL)
		pfree(e->secrets);
	pfree(e);
}

/*
 * Mask, with '*', every occurrence in buf of a header secret value the
 * request carried, and, when buf was cut, as many of its last bytes as the
 * beginning of a value could take: a receiver that echoes request headers in its answer (or an
 * error that quotes them) must not put a secret into the log, which the
 * task's owner and jobflow_admin read.  A receiver that echoes a secret
 * transformed (escaped, encoded) is not caught.
 */
static void
mask_secrets(const InFlightEntry *e, char *buf, size_t len, bool cut)
{
	size_t		longest = 0;

	if (buf == NULL)
		return;
	for (int i = 0; i < e->nsecrets; i++)
	{
		size_t		vlen = strlen(e->secrets[i]);
		char	   *p = buf;
		char	   *end = buf + len;

		while (vlen > 0 && (size_t) (end - p) >= vlen)
		{
			char	   *hit = memchr(p, e->secrets[i][0], end - p - vlen + 1);

			if (hit == NULL)
				break;
			if (memcmp(hit, e->secrets[i], vlen) == 0)
			{
				memset(hit, '*', vlen);
				p = hit + vlen;
			}
			else
				p = hit + 1;
		}
		longest = Max(longest, vlen);
	}

	/*
	 * An excerpt cut inside a value ends with the value's beginning.  Its
	 * last bytes are masked whatever they are: masking them only when they
	 * match would tell whoever shapes the request and reads the log (the
	 * secret's role, jobflow_admin) that a guessed next character is right.
	 */
	if (cut && longest > 1)
		memset(buf + len - Min(longest - 1, len), '*', Min(longest - 1, len));
}

/*
 * A place in the fair share comes free.  Noted, because a request that
 * finishes inside a turn's last jf_dispatch_collect frees a place no socket
 * will wake the loop for: without the note the parked tasks behind it
 * would wait for the next deadline (seconds, in a burst to one host).
 */
static void
release_place(JfWorkerState *ws, uint32 queue)
{
	jf_fair_release(ws->fair, queue);
	ws->dispatch->places_freed = true;
}

/*
 * A claimed request that was never handed to libcurl: its claim is undone
 * (the log writer puts the task back to pending with its attempt count as
 * before, and logs nothing), as for a request still queued at shutdown.
 */
static void
unsend(JfWorkerState *ws, InFlightEntry *e)
{
	JfOutcomeRow	row;

	circuit_unsent(ws, e->task.queue, e->task.id);
	release_place(ws, e->task.queue);
	memset(&row, 0, sizeof(row));
	row.id = e->task.id;
	row.attempt = e->task.attempt;
	row.owner = e->task.owner;
	row.scheduled_at = e->task.scheduled_at;
	row.finished_at = GetCurrentTimestamp();
	row.outcome = OUTCOME_UNSENT;
	row.state = "pending";
	jf_log_writer_add(ws->log, &row);
	free_entry(e);
}

/*
 * Hand committed claims to libcurl.  A request libcurl cannot take (out of
 * memory) is handed back unsent.
 */
static void
submit_requests(JfWorkerState *ws, JfHttpRequest *reqs, int n)
{
	int			i;

	for (i = 0; i < n; i++)
	{
		InFlightEntry *e = (InFlightEntry *) reqs[i].user;

		ws->dispatch->nsubmitted = i + 1;
		if (jf_http_submit(ws->http, &reqs[i]))
			dlist_push_tail(&ws->dispatch->in_flight, &e->node);
		else
			unsend(ws, e);
	}
}

static int
compare_pick(const void *a, const void *b)
{
	uint64		x = ((const JfFairPick *) a)->id;
	uint64		y = ((const JfFairPick *) b)->id;

	return (x > y) - (x < y);
}

/*
 * An earlier occurrence of the same timer than task d, still pending
 * (retries included) or running: p over jobflow.tasks, with p.cron_id =
 * d.cron_id.  "Earlier" is by the occurrence it stands for, then by id.
 * The partial index of unfinished cron tasks on (cron_id, cron_at) finds
 * them, among the few pending and running tasks of the timer only.
 */
#define OVERLAP_EARLIER_SQL(p, d) \
	p ".state IN ('pending', 'running') AND " p ".cron_at <= " d ".cron_at" \
	" AND (" p ".cron_at < " d ".cron_at OR " p ".id < " d ".id)"

/*
 * The overlap policy of cron timers, for due occurrences the claim left
 * because an earlier occurrence of their timer is still pending or
 * running (its condition on d.cron_id).  With 'skip' such an occurrence
 * is cancelled; with 'queue' it waits, pending, while it is the only one
 * waiting (jf_feed_recheck puts it back in the wheel for a little later,
 * and the claim tries it again), and is cancelled when an earlier one
 * already waits.  Each cancelled occurrence is counted on its timer, whose
 * row is locked with SKIP LOCKED like the task's: a tenant holding a lock
 * on its own timer delays its own occurrences only, never the worker.
 * An occurrence that has started (attempts > 0) is never held: its
 * retries go on, whatever became pending before it meanwhile (a redrive,
 * an occurrence missed while the server was down).
 * Inside the claim's transaction; a statement only when the claim left
 * picks, which is rare.  Returns how many were cancelled.
 */
static uint64
skip_overlapping(JfWorkerState *ws, Datum ids, int64 now_ms)
{
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[2];
	Datum		n;
	bool		isnull;
	int			ret;

	if (ws->dispatch->overlap_plan == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(
			"WITH w AS ("
			"  SELECT d.id, d.cron_id, o.overlap FROM jobflow.tasks d, jobflow.cron_timers o"
			"   WHERE d.id = ANY ($1) AND d.run_at <= $2 AND " JF_PENDING_SQL("d")
			"     AND d.cron_id IS NOT NULL AND d.attempts = 0"
			"     AND o.id = d.cron_id AND o.overlap <> 'allow'"
			"     AND (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM jobflow.tasks p"
			"           WHERE p.cron_id = d.cron_id AND " OVERLAP_EARLIER_SQL("p", "d")
			"           LIMIT 2) e) >= CASE WHEN o.overlap = 'skip' THEN 1 ELSE 2 END"
			"   FOR NO KEY UPDATE OF d, o SKIP LOCKED),"
			" x AS ("
			"  UPDATE jobflow.tasks t SET state = 'cancelled', updated_at = pg_catalog.now(),"
			"         last_error = CASE WHEN w.overlap = 'skip'"
			"           THEN 'skipped: an earlier occurrence of its cron timer was still pending or running (overlap skip)'"
			"           ELSE 'skipped: an occurrence of its cron timer was already waiting for an earlier one (overlap queue)' END"
			"    FROM w WHERE t.id = w.id"
			"  RETURNING t.cron_id),"
			" y AS ("
			"  UPDATE jobflow.cron_timers c SET skipped = c.skipped + n.n,"
			"         last_skipped_at = pg_catalog.now()"
			"    FROM (SELECT x.cron_id, pg_catalog.count(*) AS n FROM x GROUP BY x.cron_id) n"
			"   WHERE c.id = n.cron_id"
			"  RETURNING n.n)"
			" SELECT pg_catalog.sum(y.n)::bigint FROM y",
			2, types);

		if (plan == NULL)
			elog(ERROR, "could not prepare the cron overlap statement: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		ws->dispatch->overlap_plan = plan;
	}
	values[0] = ids;
	values[1] = TimestampTzGetDatum(jf_ms_to_ts(now_ms));
	ret = SPI_execute_plan(ws->dispatch->overlap_plan, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "cron overlap statement failed: %s", SPI_result_code_string(ret));
	jf_xact_count_statements(1);
	n = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : (uint64) DatumGetInt64(n);
}

/*
 * The picks the claim did not take go back to the fair share's counts.  A
 * retry falls due before its outcome row is written when the loop was
 * held up for longer than the flush interval: its claim finds the task
 * still running, so it goes back in the wheel for just after the next
 * flush.  The others were cancelled, rescheduled or are locked by some
 * transaction: jf_feed_recheck sorts them out.
 */
static void
handle_unclaimed(JfWorkerState *ws, JfFairPick *picks, int n, bool *claimed,
				 int64 now_ms)
{
	Datum	   *missed = palloc(sizeof(Datum) * Max(n, 1));
	JfFairPick *gone = palloc(sizeof(JfFairPick) * Max(n, 1));
	int			ngone = 0;
	int			nmissed = 0;
	int			k;

	/*
	 * What an error from here on must still release (jf_dispatch_recover): the
	 * claimed picks only, which are all that stay in `claiming`.
	 */
	ws->dispatch->nclaiming = 0;
	for (k = 0; k < n; k++)
	{
		if (claimed[k])
			ws->dispatch->claiming[ws->dispatch->nclaiming++] = picks[k];
		else
			gone[ngone++] = picks[k];
	}
	for (k = 0; k < ngone; k++)
	{
		circuit_unsent(ws, gone[k].queue, (int64) gone[k].id);
		release_place(ws, gone[k].queue);
	}
	for (k = 0; k < ngone; k++)
	{
		int64		id = (int64) gone[k].id;

		if (jf_log_writer_has_retry(ws->log, id))
			jf_feed_upsert(ws, id, now_ms + jobflow_log_flush_ms, gone[k].queue);
		else
			missed[nmissed++] = Int64GetDatum(id);
	}
	if (nmissed > 0)
	{
		Datum		ids = PointerGetDatum(construct_array(missed, nmissed, INT8OID, 8,
														  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

		ws->dispatch->cron_skipped += skip_overlapping(ws, ids, now_ms);
		jf_feed_recheck(ws, ids, now_ms);
	}
	pfree(missed);
	pfree(gone);
}

/*
 * Put back to pending, in the claim's transaction, tasks it claimed that
 * moved to another lane: as if never claimed (their attempt count as
 * before).  Rare: a statement only when it happens.
 */
static void
unclaim_moved(Datum *moved, int nmoved)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int			ret;

	values[0] = PointerGetDatum(construct_array(moved, nmoved, INT8OID, 8,
												FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	ret = SPI_execute_with_args("UPDATE jobflow.tasks SET state = 'pending',"
								"       attempts = attempts OPERATOR(pg_catalog.-) 1"
								" WHERE id OPERATOR(pg_catalog.=) ANY ($1)",
								1, types, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE)
		elog(ERROR, "could not put moved tasks back: %s", SPI_result_code_string(ret));
	jf_xact_count_statements(1);
}

/*
 * After a claim's commit, before its requests go: the commit waited for the
 * synchronous standbys, if any, unless the postmaster died meanwhile.  Its
 * death ends that wait at once and silently (SyncRepWaitForLSN sets
 * ProcDiePending), with the claim committed here only: the standby that is
 * promoted next has these tasks pending and would send them again as the
 * same attempt, none of it logged.  So the worker sends nothing and exits;
 * on the new primary the tasks fire once.  A postmaster that died just
 * after the standby's acknowledgement costs a rescue there, logged as an
 * interrupted attempt, which is the safe side.
 */
static void
claim_replicated_or_exit(int nclaimed)
{
	if (ProcDiePending || !PostmasterIsAlive())
		ereport(FATAL,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("jobflow worker exits without sending the %d task(s) it claimed", nclaimed),
				 errdetail("The postmaster died while the claim's commit may have been waiting for synchronous replication.")));
}

/*
 * Claim the picked tasks and submit those that are still pending and due.
 * Everything the requests need is copied by jf_http_submit, so the
 * transaction's memory can go when it commits.
 */
static int
claim_and_submit(JfWorkerState *ws, JfFairPick *picks, int n, int64 now_ms)
{
	TimestampTz claim_start;
	Datum		values[2];
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	int			ret;
	uint64		i;
	int			k;
	int			nclaimed;
	JfHttpRequest *reqs;
	Datum	   *ids;
	bool	   *claimed;
	Datum	   *moved;
	int			nmoved = 0;
	MemoryContext old;

	/* sorted by id, so that each claimed row finds its pick */
	qsort(picks, n, sizeof(JfFairPick), compare_pick);
	/* from here, an error releases them (even one starting the transaction) */
	ws->dispatch->claiming = picks;
	ws->dispatch->nclaiming = n;
	jf_fault("before_claim");
	jf_xact_begin_durable("jobflow: claim due tasks");
	jf_xact_by_id_only();
	ws->dispatch->cron_skipped = 0;

	if (ws->dispatch->claim_plan == NULL)
	{
		/*
		 * The claim must fetch its ids through the primary key, whatever
		 * the statistics say: statistics from a moment when few tasks were
		 * pending make the partial index on pending tasks' run_at look
		 * tiny, and a claim through it reads every due task (28 ms for 64
		 * rows behind a 20,000-task burst, against 2 ms).  So the state is
		 * compared as text (JF_PENDING_SQL), from which no partial index
		 * predicate can be proven.  A generic plan: it is made once.  SKIP
		 * LOCKED: a task some transaction holds (a cancel in progress, a
		 * SELECT ... FOR UPDATE) must not stall every other task; it stays
		 * pending and is tried again a little later.
		 *
		 * A task with a flow key in an ordered queue is left while an
		 * earlier task of its key is unfinished (JF_FLOW_FIRST_EARLIER_SQL), the
		 * safety net under the fair share's ordered keys: after a restart,
		 * for tasks loaded late, or redriven.  The test is a subplan behind
		 * "d.flow_key IS NULL OR": a task without a key never runs it (a
		 * batch of 64 such tasks reads 4 buffers, as without it), and a
		 * keyed one of a queue that is not ordered reads its queue's row
		 * only ("NOT EXISTS ... OR"): the generic plan walks the partial
		 * index of keyed tasks within the key, before the task, and tests
		 * the queue for each entry, so without that test every claim of a
		 * key's task read all its earlier entries, finished ones included
		 * until vacuum (one key of 20,000 due tasks: 38,000 buffers for
		 * its last, W2 at 0.21 of its speed).  A keyed task of an ordered
		 * queue still reads the entries of its key's finished tasks that
		 * vacuum has not removed yet (20,000 of them: 233 buffers, 0.3 ms).
		 *
		 * What a request needs besides its row is looked up once per
		 * statement where it can be: the signing secrets once per owner of
		 * the batch (CTE k, not a subquery run again for each of its rows),
		 * the installation id once (an InitPlan); the header secrets only
		 * for rows whose headers name one (the jsonpath test is true for
		 * every row where the subquery could find anything); the client
		 * certificate of the task's queue only for owners that have one
		 * (CTE m), and only when bound to the task's origin.
		 *
		 * libcurl reuses a pooled connection, and resumes a TLS session,
		 * for a request whose certificate blob is the same, whatever its
		 * key: a tenant that stored another's certificate (public, after
		 * all) with a key of its own would ride on the other's
		 * authenticated connections.  So the blob carries, after the PEM
		 * blocks (where OpenSSL's reader skips text), the owner and a
		 * digest of the key: one owner's certificate with one key is one
		 * blob.  Together they
		 * cost a third of the statement when run for every row.
		 */
		SPIPlanPtr	plan = SPI_prepare_cursor(
			"WITH c AS MATERIALIZED ("
			"  SELECT d.id, d.owner FROM jobflow.tasks d"
			"   WHERE d.id OPERATOR(pg_catalog.=) ANY ($1) AND d.run_at <= $2"
			"     AND " JF_PENDING_SQL("d")
			"     AND EXISTS (SELECT 1 FROM pg_catalog.pg_authid a WHERE a.oid = d.owner)"
			"     AND (d.cron_id IS NULL OR d.attempts > 0 OR NOT EXISTS ("
			"          SELECT 1 FROM jobflow.cron_timers o, jobflow.tasks p"
			"           WHERE o.id = d.cron_id AND o.overlap <> 'allow'"
			"             AND p.cron_id = d.cron_id AND " OVERLAP_EARLIER_SQL("p", "d") "))"
			"     AND (d.flow_key IS NULL OR NOT EXISTS ("
			"          SELECT 1 FROM jobflow.queues q"
			"           WHERE q.owner = d.owner AND q.name = d.queue AND q.ordered)"
			"          OR " JF_FLOW_FIRST_EARLIER_SQL("p", "d", "o") " IS NULL)"
			"   FOR UPDATE SKIP LOCKED),"
			" k AS MATERIALIZED ("
			"  SELECT s.owner, pg_catalog.array_agg(s.secret ORDER BY s.created_at DESC) AS secrets"
			"    FROM jobflow.signing_secrets s"
			"   WHERE s.owner IN (SELECT c.owner FROM c)"
			"     AND (s.expires_at IS NULL OR s.expires_at > pg_catalog.now())"
			"   GROUP BY s.owner),"
			" m AS MATERIALIZED ("
			"  SELECT DISTINCT x.owner FROM jobflow.client_certificates x"
			"   WHERE x.owner IN (SELECT c.owner FROM c))"
			"UPDATE jobflow.tasks t"
			"   SET state = 'running', attempts = t.attempts + 1,"
			"       updated_at = pg_catalog.now()"
			"  FROM c LEFT JOIN k ON k.owner = c.owner LEFT JOIN m ON m.owner = c.owner"
			" WHERE t.id = c.id"
			" RETURNING t.id, t.attempts, t.max_attempts, t.owner, t.run_at,"
			"           t.url, t.method, t.headers, t.body, t.content_type, t.timeout_ms,"
			"           k.secrets,"
			"           (SELECT i.id FROM jobflow.installation i"
			"             ORDER BY i.created_at, i.id LIMIT 1),"
			"           t.body_bytes,"
			"           CASE WHEN t.headers OPERATOR(pg_catalog.@?) '$.*.secret' THEN"
			"           (SELECT pg_catalog.jsonb_object_agg(x.name, x.value)"
			"              FROM jobflow.secrets x WHERE x.owner = t.owner"
			"               AND x.name IN (SELECT h.value OPERATOR(pg_catalog.->>) 'secret'"
			"                                FROM pg_catalog.jsonb_each(t.headers) h)"
			"               AND jobflow._origin(t.url) OPERATOR(pg_catalog.=) ANY (x.origins))"
			"           END,"
			"           t.queue,"
			"           CASE WHEN m.owner IS NOT NULL THEN"
			"           (SELECT ARRAY[x.certificate OPERATOR(pg_catalog.||) E'\\n# jobflow '"
			"                         OPERATOR(pg_catalog.||) t.owner::pg_catalog.oid::pg_catalog.text"
			"                         OPERATOR(pg_catalog.||) ' '"
			"                         OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.sha256("
			"                              pg_catalog.textsend(x.private_key)), 'hex')"
			"                         OPERATOR(pg_catalog.||) E'\\n',"
			"                         x.private_key]"
			"              FROM jobflow.queues q, jobflow.client_certificates x"
			"             WHERE q.owner = t.owner AND q.name = t.queue"
			"               AND x.owner = t.owner AND x.name = q.client_certificate"
			"               AND jobflow._origin(t.url) OPERATOR(pg_catalog.=) ANY (x.origins))"
			"           END,"
			"           t.flow_key",
			2, types, CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "could not prepare the claim statement: %s",
				 SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		ws->dispatch->claim_plan = plan;
	}
	ids = palloc(sizeof(Datum) * n);
	claimed = palloc0(sizeof(bool) * n);
	for (k = 0; k < n; k++)
		ids[k] = Int64GetDatum((int64) picks[k].id);
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = TimestampTzGetDatum(jf_ms_to_ts(now_ms));
	claim_start = GetCurrentTimestamp();
	ret = SPI_execute_plan(ws->dispatch->claim_plan, values, NULL, false, 0);
	if (ret != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "claim statement failed: %s", SPI_result_code_string(ret));
	jf_metrics_observe(JF_HIST_CLAIM, GetCurrentTimestamp() - claim_start);
	jf_xact_count_statements(1);
	jf_fault("claim");
	nclaimed = (int) SPI_processed;
	reqs = MemoryContextAlloc(ws->dispatch->claim_cxt, sizeof(JfHttpRequest) * Max(nclaimed, 1));
	moved = palloc(sizeof(Datum) * Max(nclaimed, 1));
	nclaimed = 0;
	old = MemoryContextSwitchTo(ws->dispatch->claim_cxt);
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		JfFairPick	key;
		JfFairPick *pick;
		Oid			owner;
		char	   *url;
		char	   *queue;
		char	   *flow_key;

		key.id = (uint64) DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		pick = bsearch(&key, picks, n, sizeof(JfFairPick), compare_pick);
		/* the same id picked twice: the first pick is the one claimed */
		while (pick > picks && pick[-1].id == key.id)
			pick--;
		owner = DatumGetObjectId(SPI_getbinval(tup, desc, 4, &isnull));
		url = TextDatumGetCString(SPI_getbinval(tup, desc, 6, &isnull));
		queue = TextDatumGetCString(SPI_getbinval(tup, desc, 16, &isnull));
		{
			Datum		k = SPI_getbinval(tup, desc, 18, &isnull);

			flow_key = isnull ? NULL : TextDatumGetCString(k);
		}
		if (!jf_fair_is_lane_of(ws->fair, pick->queue, owner, queue, url, flow_key))
		{
			/*
			 * Moved to another named queue or host since it was parked,
			 * and the worker has not loaded the change yet: it must not go
			 * under the settings of the lane it left (past the new queue's
			 * pause, say).  Its claim is undone below, and it goes to its
			 * new lane at once.
			 */
			uint32		lane = jf_fair_queue_key(ws->fair, owner, queue, url, flow_key);

			if (lane == UINT32_MAX)
				ereport(ERROR,
						(errcode(ERRCODE_OUT_OF_MEMORY),
						 errmsg("out of memory queueing jobflow tasks by host")));
			moved[nmoved++] = Int64GetDatum((int64) key.id);
			jf_feed_upsert(ws, (int64) key.id, now_ms, lane);
			continue;
		}
		claimed[pick - picks] = true;
		build_request(ws, tup, desc, pick->queue, &reqs[nclaimed++]);
	}
	MemoryContextSwitchTo(old);
	if (nmoved > 0)
		unclaim_moved(moved, nmoved);
	if (nclaimed < n)
		handle_unclaimed(ws, picks, n, claimed, now_ms);
	jf_xact_commit();
	if (ws->dispatch->cron_skipped > 0)
		jf_metrics_count(JF_COUNT_CRON_SKIPPED, ws->dispatch->cron_skipped);
	claim_replicated_or_exit(nclaimed);
	ws->dispatch->nclaiming = 0;
	ws->dispatch->committed = reqs;
	ws->dispatch->ncommitted = nclaimed;
	ws->dispatch->nsubmitted = 0;
	jf_fault("after_claim");

	/* only now: a claim that failed to commit must send nothing */
	submit_requests(ws, reqs, nclaimed);
	wipe_client_keys(reqs, nclaimed);
	ws->dispatch->ncommitted = 0;
	pg_atomic_fetch_add_u64(&jf_figures->fired, nclaimed);
	MemoryContextReset(ws->dispatch->claim_cxt);
	return nclaimed;
}

/*
 * Move the wheel's due entries into the fair share.  True when more are
 * due than one turn moves.
 */
static bool
park_due(JfWorkerState *ws, int64 now_ms, JfWheelExpired *expired, int batch)
{
	size_t		parked = 0;

	for (;;)
	{
		size_t		n = jf_wheel_advance(ws->wheel, now_ms, expired, batch);
		size_t		i;

		for (i = 0; i < n; i++)
			(void) jf_feed_park(ws, (int64) expired[i].id, expired[i].due_ms);
		parked += n;
		if (n < (size_t) batch)
			return false;
		if (parked >= MAX_PARKED_PER_TURN)
			return true;
	}
}

/*
 * Fire what is due: park the wheel's due entries in the fair share, then
 * claim one batch of what it lets go now.  One claim a turn: while a
 * backlog drains, the loop comes back at once, and a task to another host
 * falling due meanwhile is parked and picked at the next turn, not after
 * the whole backlog.  Returns true when the loop should not sleep.
 */
bool
jf_dispatch_due(JfWorkerState *ws, int64 now_ms)
{
	static JfWheelExpired *expired = NULL;
	static JfFairPick *picks = NULL;
	static int	allocated = 0;
	int			batch = jobflow_claim_batch_size;
	bool		more;
	int			n;

	if (ws->stopping)
		return false;
	/* kept across turns (and errors): a turn allocates nothing here */
	if (allocated < batch)
	{
		if (expired != NULL)
		{
			pfree(expired);
			pfree(picks);
		}
		expired = MemoryContextAlloc(ws->cxt, sizeof(JfWheelExpired) * batch);
		picks = MemoryContextAlloc(ws->cxt, sizeof(JfFairPick) * batch);
		allocated = batch;
	}
	more = park_due(ws, now_ms, expired, batch);
	ws->dispatch->places_freed = false;
	n = jf_fair_pick(ws->fair, picks, batch, jf_rate_clock_us(), jf_feed_take, ws);
	if (n > 0)
	{
		/*
		 * Picks the claim did not take (cancelled while parked) used places
		 * for nothing: come back at once for what they kept waiting.
		 */
		if (claim_and_submit(ws, picks, n, now_ms) < n)
			more = true;
		/* start these requests before anything else */
		jf_dispatch_collect(ws);
	}
	return more || n == batch;
}

/*
 * Whether parked tasks may have a place since the last pick: the loop must
 * then come back at once rather than sleep.  Only a freed place counts, so
 * tasks parked for a full origin never make the loop spin.
 */
/*
 * The log writer wrote the outcomes it held: ordered keys that waited for
 * their last task's outcome may send their next one at once.
 */
void
jf_dispatch_outcomes_written(JfWorkerState *ws)
{
	if (ws->fair != NULL && jf_fair_written(ws->fair))
		ws->dispatch->places_freed = true;
}

bool
jf_dispatch_room_freed(JfWorkerState *ws)
{
	return ws->dispatch->places_freed && jf_fair_parked(ws->fair) > 0;
}

/*
 * The ids of the tasks with a request in flight (or a result waiting to be
 * recorded), sorted, in the current memory context: what housekeeping's
 * check for stray running tasks must leave alone.
 */
static int
in_flight_ids(JfWorkerState *ws, int64 **ids)
{
	dlist_iter	it;
	int			n = 0;

	dlist_foreach(it, &ws->dispatch->in_flight)
		n++;
	*ids = palloc(sizeof(int64) * Max(n, 1));
	n = 0;
	dlist_foreach(it, &ws->dispatch->in_flight)
		(*ids)[n++] = dlist_container(InFlightEntry, node, it.cur)->task.id;
	qsort(*ids, n, sizeof(int64), jf_compare_int64);
	return n;
}

/*
 * Running tasks the worker holds no request or outcome for: an ERROR
 * between a claim and its requests, or between a result and its outcome
 * row, can leave them.  They go back to pending, the attempt logged as
 * interrupted (it may have been delivered), now rather than at the next
 * start.  Looked for after an error only: a partial index on running tasks
 * would make this cheap at all times, but every claim and outcome then
 * updates it, and its dead entries slow the outcome writes of a burst down.
 */
void
jf_dispatch_rescue_strays(JfWorkerState *ws)
{
	int64	   *held;
	int			nheld = in_flight_ids(ws, &held);
	int64	   *strays = NULL;
	int			nstrays = 0;
	uint64		i;
	MemoryContext caller = CurrentMemoryContext;

	jf_xact_begin("jobflow: look for running tasks without a request");
	if (SPI_execute("SELECT t.id, t.cron_id IS NOT NULL, " JF_ROUTE_SQL
					"  FROM jobflow.tasks t WHERE t.state = 'running'",
					true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read running tasks");
	jf_xact_count_statements(1);
	/* in the caller's context: it outlives this transaction */
	strays = MemoryContextAlloc(caller, sizeof(int64) * (SPI_processed + 1));
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													 SPI_tuptable->tupdesc, 1, &isnull));

		if (jf_worker_owns(DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 3, &isnull)),
						   DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
													  SPI_tuptable->tupdesc, 2, &isnull))) &&
			bsearch(&id, held, nheld, sizeof(int64), jf_compare_int64) == NULL &&
			!jf_log_writer_holds(ws->log, id))
			strays[nstrays++] = id;
	}
	jf_xact_commit();
	pfree(held);
	ws->strays_look_ms = INT64_MAX;
	if (nstrays > 0)
		jf_feed_rescue_running(ws, strays, nstrays,
							"the worker lost track of this attempt after an error; it may have been delivered");
	pfree(strays);
	if (nstrays == 0)
		return;
	/* back to pending, overdue: the next rescan loads them */
	ws->rescan_soon = true;
	ws->full_rescan_soon = true;
}

/*
 * When the loop must come back for a rate's next token or a circuit's next
 * probe (jobflow's ms clock); INT64_MAX when no parked task waits for one.
 */
int64
jf_dispatch_deadline(JfWorkerState *ws)
{
	int64		at = jf_fair_next_deadline(ws->fair);
	int64		now = jf_now_ms();
	int64		probe = jf_circuits_next_probe(ws->circuits, now);

	if (at == INT64_MAX)
		return probe;
	return Min(probe, now + Max((int64) 0, (at - jf_rate_clock_us() + 999) / 1000));
}

/*
 * After an ERROR: picks whose claim never committed are released, or their
 * origins and owners would keep fewer places for good.  Their tasks left
 * the wheel; the full rescan that follows an error finds them.
 */
void
jf_dispatch_recover(JfWorkerState *ws)
{
	int			k;

	for (k = 0; k < ws->dispatch->nclaiming; k++)
	{
		circuit_unsent(ws, ws->dispatch->claiming[k].queue,
					   (int64) ws->dispatch->claiming[k].id);
		release_place(ws, ws->dispatch->claiming[k].queue);
	}
	ws->dispatch->nclaiming = 0;
	/* committed but never handed to libcurl: nothing was sent */
	for (k = ws->dispatch->nsubmitted; k < ws->dispatch->ncommitted; k++)
		unsend(ws, (InFlightEntry *) ws->dispatch->committed[k].user);
	ws->dispatch->ncommitted = 0;
	MemoryContextReset(ws->dispatch->claim_cxt);
}

/* Full jitter on the upper half: spreads retries of a failed burst. */
static int64
retry_delay_ms(int attempt, int64 retry_after_ms)
{
	int64		delay = jobflow_retry_base_ms;
	int			i;

	if (retry_after_ms >= 0)
		delay = Min(retry_after_ms, (int64) jobflow_retry_max_ms);
	else
	{
		for (i = 1; i < attempt && delay < jobflow_retry_max_ms; i++)
			delay *= 2;
		delay = Min(delay, (int64) jobflow_retry_max_ms);
		delay = delay / 2 + (int64) jf_random_range(0, delay / 2);
	}
	/* the retry's pending state must be written before it falls due */
	return Max(delay, 2 * (int64) jobflow_log_flush_ms);
}

/*
 * What docs/receivers.md promises: connection errors (an answerless closed
 * connection and transport failures included), timeouts, 408, 429 and
 * 5xx are retried; a refused address and a redirect not followed (too
 * many, another scheme or origin) are final, as retrying cannot change
 * them.  A request that may have been delivered is retried as a new
 * attempt, never re-sent under the old number.
 */
static bool
retryable(const JfHttpResult *r)
{
	switch ((JfHttpErrorKind) r->error_kind)
	{
		case JF_HTTP_OK:
			return r->http_status == 408 || r->http_status == 429 ||
				(r->http_status >= 500 && r->http_status <= 599);
		case JF_HTTP_CONNECT:
		case JF_HTTP_TIMEOUT:
		case JF_HTTP_NO_ANSWER:
		case JF_HTTP_OTHER:
			return true;
		case JF_HTTP_INVALID:
		case JF_HTTP_REDIRECT:
			return false;
	}
	return false;
}

/* A circuit changed state: its owner is told at the next turn. */
static void
note_change(JfWorkerState *ws, Oid owner, const char *origin, bool open)
{
	int			k;

	ws->circuits_changed = true;
	if (ws->dispatch->nchanges == ws->dispatch->maxchanges)
	{
		int			grown = Max(64, ws->dispatch->maxchanges * 2);
		CircuitChange *more;

		/* out of memory or beyond the cap: this change is not told */
		if (grown > CIRCUIT_CHANGES_MAX)
			return;
		more = MemoryContextAllocExtended(ws->cxt, sizeof(CircuitChange) * grown,
										  MCXT_ALLOC_NO_OOM);
		if (more == NULL)
			return;
		if (ws->dispatch->changes != NULL)
		{
			memcpy(more, ws->dispatch->changes, sizeof(CircuitChange) * ws->dispatch->nchanges);
			pfree(ws->dispatch->changes);
		}
		ws->dispatch->changes = more;
		ws->dispatch->maxchanges = grown;
	}
	k = ws->dispatch->nchanges++;
	ws->dispatch->changes[k].owner = owner;
	ws->dispatch->changes[k].open = open;
	strlcpy(ws->dispatch->changes[k].origin, origin, sizeof(ws->dispatch->changes[k].origin));
}

/*
 * jobflow.reset_circuit() asked to close the circuits of origin, of owner
 * (InvalidOid: of every owner): closed at once, their held tasks go at
 * the next pick, and each owner whose circuit was open is told.
 */
void
jf_dispatch_reset_circuits(JfWorkerState *ws, Oid owner, const char *origin)
{
	int			max = (int) Min(jf_circuits_count(ws->circuits) + 1, (size_t) CIRCUIT_CHANGES_MAX);
	uint32	   *closed = palloc(sizeof(uint32) * max);
	int			n = jf_circuits_reset(ws->circuits, owner, origin, closed, max);
	int			k;

	ws->circuits_changed = true;
	for (k = 0; k < Min(n, max); k++)
		note_change(ws, closed[k], origin, false);
	pfree(closed);
	if (n > 0)
		ereport(LOG,
				(errmsg("jobflow: %d circuit(s) to %s closed by jobflow.reset_circuit()",
						n, origin)));
}

/*
 * Tell the circuit of a finished request's (owner, origin) what its result
 * says.  A change of state is logged, and counted for the metrics
 * (jobflow_circuits_open is published with the circuits).
 */
static void
circuit_result(JfWorkerState *ws, InFlightEntry *e, const JfHttpResult *r)
{
	const char *origin = jf_fair_lane_origin(ws->fair, e->task.queue);
	JfCircuitResult cls = circuit_class(r);
	int			before = jf_circuits_open(ws->circuits);

	if (!jf_circuits_result(ws->circuits, e->task.owner, origin, (uint64) e->task.id,
							cls, jf_now_ms()))
		return;
	note_change(ws, e->task.owner, origin, jf_circuits_open(ws->circuits) > before);
	if (jf_circuits_open(ws->circuits) > before)
		ereport(LOG,
				(errmsg("jobflow: the circuit of role %u to %s opened after %d consecutive failures; its tasks there are held but for a probe",
						e->task.owner, origin, jobflow_circuit_failures)));
	else
		ereport(LOG,
				(errmsg("jobflow: the circuit of role %u to %s closed: it answered again",
						e->task.owner, origin)));
}

/* Turn one finished request into an outcome row (and maybe a retry). */
static void
record_result(JfWorkerState *ws, JfHttpResult *r)
{
	InFlightEntry *e = (InFlightEntry *) r->user;
	JfOutcomeRow	row;
	char		status_error[64];

	/*
	 * What the task's queue logs, asked of its lane while the request
	 * still holds it.
	 */
	bool		log_first_success = jf_queues_log_first_success(ws, e->task.queue);

	/*
	 * Out of flight first: an error below leaves the task running with no
	 * request, which the stray rescue after the error puts back.  The
	 * circuit of its (owner, origin) hears of it before: the lane is
	 * alive while the request is claimed.
	 */
	if (e->task.generation == jf_guard_generation())
		circuit_result(ws, e, r);
	/* its flow key sent a request: no back-off any more */
	jf_fair_key_done(ws->fair, e->task.queue);
	release_place(ws, e->task.queue);
	dlist_delete(&e->node);
	/* claimed from a dropped extension: its outcome belongs to no task */
	if (e->task.generation != jf_guard_generation())
	{
		free_entry(e);
		return;
	}
	memset(&row, 0, sizeof(row));
	row.id = e->task.id;
	row.attempt = e->task.attempt;
	row.owner = e->task.owner;
	row.scheduled_at = e->task.scheduled_at;
	row.started_at = jf_ms_to_ts(r->started_at_ms);
	row.finished_at = jf_ms_to_ts(r->finished_at_ms);
	jf_metrics_observe(JF_HIST_LATENESS, row.started_at - row.scheduled_at);
	jf_metrics_outcome(jf_http_result_class(r));
	row.http_status = r->http_status;
	mask_secrets(e, r->body, r->body_len, r->body_truncated);
	row.response = r->body;
	row.response_len = r->body_len;
	if (r->error_kind != JF_HTTP_OK)
	{
		mask_secrets(e, r->error, strlen(r->error), false);
		row.error = r->error;
	}
	else if (r->http_status < 200 || r->http_status > 299)
	{
		snprintf(status_error, sizeof(status_error), "HTTP status %d", r->http_status);
		row.error = status_error;
	}

	if (r->error_kind == JF_HTTP_OK && r->http_status >= 200 && r->http_status <= 299)
	{
		row.outcome = OUTCOME_SUCCEEDED;
		row.state = "succeeded";
		/*
		 * Quiet logging: a task done at its first attempt leaves no log
		 * row (attempts never go back, so 1 means no attempt before it,
		 * failed or interrupted, even after a retry()); its row in
		 * jobflow.tasks says succeeded, with the status.
		 */
		row.unlogged = e->task.attempt == 1 && !log_first_success;
		pg_atomic_fetch_add_u64(&jf_figures->succeeded, 1);
	}
	else if (retryable(r) && e->task.attempt < e->task.max_attempts)
	{
		int64		next_ms = r->finished_at_ms + retry_delay_ms(e->task.attempt, r->retry_after_ms);

		row.outcome = OUTCOME_RETRY;
		row.state = "pending";
		row.next_run_at = jf_ms_to_ts(next_ms);
		/*
		 * An ordered key waits for its head's retry, sending nothing else
		 * meanwhile: until a second after the retry is due, and no longer
		 * than a reconcile interval (a retry an hour later may be
		 * cancelled meanwhile, which the worker does not hear of); then the
		 * claim's check of the order decides, and the key waits for the
		 * retry, checked by the housekeeping (feed.c, check_waited_heads).
		 */
		if (jf_fair_lane_ordered(ws->fair, e->task.queue))
			jf_fair_key_wait(ws->fair, e->task.queue, (uint64) e->task.id,
							 jf_rate_clock_us() +
							 Min(Max(next_ms - jf_now_ms(), 0) + 1000,
								 (int64) jobflow_reconcile_ms) * 1000);
		if (next_ms < ws->loaded_until_ms)
			jf_feed_upsert(ws, e->task.id, next_ms, e->task.queue);
		pg_atomic_fetch_add_u64(&jf_figures->retried, 1);
	}
	else
	{
		row.outcome = OUTCOME_FAILED;
		row.state = "failed";
		pg_atomic_fetch_add_u64(&jf_figures->failed, 1);
	}
	/* an ordered key's next task goes once this outcome is written */
	if (row.outcome != OUTCOME_RETRY)
		jf_fair_key_await_write(ws->fair, e->task.queue);
	jf_log_writer_add(ws->log, &row);
	free_entry(e);
}

/*
 * Tell each owner whose circuit opened or closed, on its outcome channel
 * (jobflow.outcome_channel(): only it, its members and jobflow_admin can
 * listen there), with the payload "circuit:open:<origin>" or
 * "circuit:closed:<origin>".  One transaction for the changes of a turn;
 * they are rare (a circuit opens after jobflow.circuit_failures failures).
 */
void
jf_dispatch_notify_circuits(JfWorkerState *ws)
{
	Oid			types[2] = {OIDOID, TEXTOID};
	int			k;
	int			n;

	if (ws->dispatch == NULL || ws->dispatch->nchanges == 0)
		return;
	/* told once at most: an error here must not repeat at every turn */
	n = ws->dispatch->nchanges;
	ws->dispatch->nchanges = 0;
	jf_xact_begin("jobflow: notify circuit changes");
	for (k = 0; k < n; k++)
	{
		Datum		values[2];

		values[0] = ObjectIdGetDatum(ws->dispatch->changes[k].owner);
		values[1] = CStringGetTextDatum(psprintf("circuit:%s:%s",
												 ws->dispatch->changes[k].open ? "open" : "closed",
												 ws->dispatch->changes[k].origin));
		if (SPI_execute_with_args("SELECT pg_catalog.pg_notify(jobflow._outcome_channel($1::pg_catalog.regrole), $2)",
								  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not notify a circuit change");
	}
	jf_xact_count_statements(n);
	jf_xact_commit();
	/* a burst of changes keeps no memory beyond it */
	if (ws->dispatch->maxchanges > 64)
	{
		pfree(ws->dispatch->changes);
		ws->dispatch->changes = NULL;
		ws->dispatch->maxchanges = 0;
	}
}

/* Drive libcurl and record every finished request. */
void
jf_dispatch_collect(JfWorkerState *ws)
{
	JfHttpResult r;

	uint64_t	stale;

	jf_http_perform(ws->http);
	stale = jf_http_stale_restarts(ws->http);
	if (stale != ws->dispatch->stale_seen)
	{
		jf_metrics_count(JF_COUNT_STALE_CONNECTIONS, stale - ws->dispatch->stale_seen);
		ws->dispatch->stale_seen = stale;
	}
	while (jf_http_next_result(ws->http, &r))
	{
		record_result(ws, &r);
		jf_http_result_free(&r);
	}
}

static void
mark_unsent(void *user, void *arg)
{
	((InFlightEntry *) user)->unsent = true;
}

/*
 * Stopping: requests never sent (still queued behind the caps) are handed
 * back: their claim is undone and nothing is logged.  Requests still in
 * flight after the grace period are dropped: their tasks go back to
 * pending with the attempt logged as interrupted.  It may or may not have
 * been delivered, so it is not held against the task as a failure; only a
 * task interrupted beyond max_attempts (one spare attempt, against a task
 * that kills every worker that sends it) fails.
 */
void
jf_dispatch_abandon(JfWorkerState *ws)
{
	dlist_mutable_iter it;
	TimestampTz now = GetCurrentTimestamp();

	jf_http_foreach_queued(ws->http, mark_unsent, NULL);
	dlist_foreach_modify(it, &ws->dispatch->in_flight)
	{
		InFlightEntry *e = dlist_container(InFlightEntry, node, it.cur);
		JfOutcomeRow	row;

		if (e->task.generation != jf_guard_generation())
		{
			dlist_delete(&e->node);
			free_entry(e);
			continue;
		}
		memset(&row, 0, sizeof(row));
		row.id = e->task.id;
		row.attempt = e->task.attempt;
		row.owner = e->task.owner;
		row.scheduled_at = e->task.scheduled_at;
		row.finished_at = now;
		if (e->unsent)
		{
			/* never left the queue: as if it had not been claimed */
			row.outcome = OUTCOME_UNSENT;
			row.state = "pending";
		}
		else
		{
			row.outcome = OUTCOME_INTERRUPTED;
			row.state = e->task.attempt <= e->task.max_attempts ? "pending" : "failed";
			row.error = "the worker stopped during this attempt; it may have been delivered";
		}
		jf_log_writer_add(ws->log, &row);
		dlist_delete(&e->node);
		free_entry(e);
	}
	jf_http_destroy(ws->http);
	ws->http = NULL;
}
