/*-------------------------------------------------------------------------
 *
 * signing.c
 *	  Standard Webhooks 1.0 signatures of callbacks: the headers the worker
 *	  adds to the request of a role that has signing secrets.
 *
 * A role with a signing secret has every callback signed: webhook-id
 * ("jf_<installation>_<task id>", the same on every attempt of a task),
 * webhook-timestamp (Unix seconds when the request is built, right after
 * its claim; requests go out at once) and webhook-signature ("v1,<base64
 * HMAC-SHA256 of id.timestamp.body>", one per secret in use, separated by
 * spaces during a rotation).  The installation part is a random token made
 * by CREATE EXTENSION and kept by dumps (jobflow.installation): task ids
 * restart after DROP/CREATE EXTENSION, and the token keeps those ids from
 * colliding with the ids of an earlier incarnation at a receiver.  The
 * HMAC and base64 are PostgreSQL's own.  The SQL functions that make and
 * revoke the secrets are api/signing.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/signing.h"
#include "base/compat.h"

/* The Standard Webhooks message id of a task: the same on every attempt. */
char *
jf_webhook_id(const char *installation, int64 task_id)
{
	return psprintf("jf_%s_%lld", installation, (long long) task_id);
}

/*
 * "v1,<base64 of HMAC-SHA256(key, msg_id.timestamp.body)>", palloc'd.
 * Errors of the HMAC implementation (out of memory in OpenSSL) are
 * reported without any of the data.
 */
char *
jf_sign_v1(const uint8 *key, size_t keylen, const char *msg_id,
		   int64 timestamp, const char *body, size_t body_len)
{
	pg_hmac_ctx *ctx = pg_hmac_create(PG_SHA256);
	uint8		mac[PG_SHA256_DIGEST_LENGTH];
	char	   *prefix = psprintf("%s.%lld.", msg_id, (long long) timestamp);
	int			enc_len = pg_b64_enc_len(PG_SHA256_DIGEST_LENGTH);
	char	   *out = palloc(enc_len + 4);
	int			n;

	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory signing a callback")));
	if (pg_hmac_init(ctx, key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) prefix, strlen(prefix)) < 0 ||
		(body_len > 0 && pg_hmac_update(ctx, (const uint8 *) body, body_len) < 0) ||
		pg_hmac_final(ctx, mac, sizeof(mac)) < 0)
	{
		const char *why = jf_hmac_error(ctx);

		pg_hmac_free(ctx);
		elog(ERROR, "could not compute the HMAC of a callback: %s", why);
	}
	pg_hmac_free(ctx);
	memcpy(out, "v1,", 3);
	n = pg_b64_encode((void *) mac, sizeof(mac), out + 3, enc_len);
	if (n < 0)
		elog(ERROR, "could not encode the signature of a callback");
	out[3 + n] = '\0';
	pfree(prefix);
	return out;
}

/*
 * The headers of a request plus the three Standard Webhooks headers, signed
 * with each key of keys (bytea[], newest first).  Returns a new array;
 * *nheaders is updated.
 */
const char **
jf_sign_headers(const char *const *headers, int *nheaders, ArrayType *keys,
				const char *installation, int64 task_id, const char *body,
				size_t body_len)
{
	const char **lines = palloc(sizeof(char *) * (*nheaders + JF_SIGNING_HEADERS));
	char	   *msg_id = jf_webhook_id(installation, task_id);
	int64		now = (int64) timestamptz_to_time_t(GetCurrentTimestamp());
	StringInfoData sig;
	Datum	   *elems;
	bool	   *nulls;
	int			nkeys;
	int			i;

	memcpy(lines, headers, sizeof(char *) * *nheaders);
	deconstruct_array(keys, BYTEAOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nkeys);
	initStringInfo(&sig);
	appendStringInfoString(&sig, "webhook-signature: ");
	for (i = 0; i < nkeys; i++)
	{
		bytea	   *key;
		char	   *one;

		if (nulls[i])
			continue;
		key = DatumGetByteaPP(elems[i]);
		one = jf_sign_v1((const uint8 *) VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key),
						 msg_id, now, body, body_len);
		if (i > 0)
			appendStringInfoChar(&sig, ' ');
		appendStringInfoString(&sig, one);
		pfree(one);
	}
	lines[(*nheaders)++] = psprintf("webhook-id: %s", msg_id);
	lines[(*nheaders)++] = psprintf("webhook-timestamp: %lld", (long long) now);
	lines[(*nheaders)++] = sig.data;
	return lines;
}

