/*-------------------------------------------------------------------------
 *
 * signing.c
 *	  Standard Webhooks 1.0 signatures of callbacks, the SQL functions that
 *	  create, rotate and revoke the signing secrets.  The named secrets
 *	  that header values refer to are secrets.c's.
 *
 * A role with a signing secret has every callback signed: webhook-id
 * ("jf_<installation>_<task id>", the same on every attempt of a task),
 * webhook-timestamp (Unix seconds when the request is built, right after
 * its claim; requests go out at once) and webhook-signature ("v1,<base64
 * HMAC-SHA256 of id.timestamp.body>", one per secret in use, separated by
 * spaces during a rotation).  The installation part is a random token made
 * by CREATE EXTENSION and kept by dumps (jobflow.installation): task ids
 * restart after DROP/CREATE EXTENSION, and the token keeps those ids from
 * colliding with the ids of an earlier incarnation at a receiver.
 *
 * Secrets live in jobflow.signing_secrets, which no tenant and no jobflow
 * role may read: the functions below check the caller's rights and then
 * write as the table's owner; the worker reads the secrets in its claim
 * statement.  A secret is made here, from pg_strong_random(), so it never
 * appears in a statement's text; it is shown once, as the result of
 * create_signing_secret().  The HMAC and base64 are PostgreSQL's own.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "api/as_owner.h"
#include "api/tenant_api.h"
#include "base/signing.h"

#define SECRET_PREFIX "whsec_"
#define SECRET_BYTES 32

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
		const char *why = pg_hmac_error(ctx);

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

/* The secret's key bytes from "whsec_<base64>" (or plain base64). */
static bytea *
decode_secret(const char *secret)
{
	int			len;
	int			n;
	bytea	   *key;

	if (strncmp(secret, SECRET_PREFIX, strlen(SECRET_PREFIX)) == 0)
		secret += strlen(SECRET_PREFIX);
	len = strlen(secret);
	key = palloc(VARHDRSZ + pg_b64_dec_len(len) + 1);
	n = pg_b64_decode(secret, len, (void *) VARDATA(key), pg_b64_dec_len(len) + 1);
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("signing secret is not valid base64"),
				 errhint("A Standard Webhooks secret is \"whsec_\" followed by base64.")));
	SET_VARSIZE(key, VARHDRSZ + n);
	return key;
}

/*
 * jobflow._webhook_signature(secret, msg_id, timestamp, body) RETURNS
 * text: the signature a receiver expects, for checking jobflow against the
 * specification's test vector.  Superuser only (no grants).
 */
PG_FUNCTION_INFO_V1(jobflow_webhook_signature);
Datum
jobflow_webhook_signature(PG_FUNCTION_ARGS)
{
	bytea	   *key = decode_secret(text_to_cstring(PG_GETARG_TEXT_PP(0)));
	char	   *msg_id = text_to_cstring(PG_GETARG_TEXT_PP(1));
	int64		ts = PG_GETARG_INT64(2);
	bytea	   *body = PG_GETARG_BYTEA_PP(3);

	PG_RETURN_TEXT_P(cstring_to_text(jf_sign_v1((const uint8 *) VARDATA(key),
												VARSIZE(key) - VARHDRSZ, msg_id, ts,
												VARDATA_ANY(body),
												VARSIZE_ANY_EXHDR(body))));
}



/*
 * jobflow.create_signing_secret(for_role regrole, grace interval) RETURNS
 * text: a new secret for the role, returned this once.  Secrets the role
 * had keep signing beside it until the grace period ends (at the latest).
 * Rotations of one role are serialised by the table lock.
 */
PG_FUNCTION_INFO_V1(jobflow_create_signing_secret);
Datum
jobflow_create_signing_secret(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 0, "manage the secrets of");
	Interval   *grace;
	uint8		raw[SECRET_BYTES];
	bytea	   *key;
	char	   *secret;
	int			n;
	Oid			types[3] = {OIDOID, INTERVALOID, BYTEAOID};
	Datum		values[3];
	JfAsOwner	as_owner;

	jf_check_owner_role(role);
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("grace must not be null"),
				 errhint("Give interval '0' to stop signing with the old secrets at once.")));
	grace = PG_GETARG_INTERVAL_P(1);
	if (grace->time < 0 || grace->day < 0 || grace->month < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("grace must not be negative")));
	if (grace->month > 12 || (grace->month == 12 && (grace->day > 0 || grace->time > 0)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("grace must be at most one year")));

	if (!pg_strong_random(raw, sizeof(raw)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random signing secret")));
	key = palloc(VARHDRSZ + sizeof(raw));
	SET_VARSIZE(key, VARHDRSZ + sizeof(raw));
	memcpy(VARDATA(key), raw, sizeof(raw));
	n = pg_b64_enc_len(sizeof(raw));
	secret = palloc(strlen(SECRET_PREFIX) + n + 1);
	strcpy(secret, SECRET_PREFIX);
	n = pg_b64_encode((void *) raw, sizeof(raw), secret + strlen(SECRET_PREFIX), n);
	if (n < 0)
		elog(ERROR, "could not encode a signing secret");
	secret[strlen(SECRET_PREFIX) + n] = '\0';
	explicit_bzero(raw, sizeof(raw));

	values[0] = ObjectIdGetDatum(role);
	values[1] = IntervalPGetDatum(grace);
	values[2] = PointerGetDatum(key);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("signing_secrets", &as_owner);
	/* an error aborts the transaction, which restores the user */
	if (SPI_execute("LOCK TABLE jobflow.signing_secrets IN SHARE ROW EXCLUSIVE MODE",
					false, 0) != SPI_OK_UTILITY ||
		SPI_execute_with_args("DELETE FROM jobflow.signing_secrets"
							  " WHERE owner OPERATOR(pg_catalog.=) $1"
							  "   AND expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE ||
		SPI_execute_with_args("UPDATE jobflow.signing_secrets"
							  "   SET expires_at = pg_catalog.now() OPERATOR(pg_catalog.+) $2"
							  " WHERE owner OPERATOR(pg_catalog.=) $1 AND (expires_at IS NULL"
							  "        OR expires_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.+) $2))",
							  2, types, values, NULL, false, 0) != SPI_OK_UPDATE ||
		SPI_execute_with_args("INSERT INTO jobflow.signing_secrets (owner, secret)"
							  " VALUES ($1, $3)",
							  3, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not store the signing secret");
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_TEXT_P(cstring_to_text(secret));
}

/*
 * jobflow.revoke_signing_secret(for_role regrole, only_previous boolean)
 * RETURNS integer: removes the role's secrets (its callbacks are no longer
 * signed), or only those a rotation kept for the grace period.  Returns
 * how many were removed.
 */
PG_FUNCTION_INFO_V1(jobflow_revoke_signing_secret);
Datum
jobflow_revoke_signing_secret(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 0, "manage the secrets of");
	bool		only_previous = PG_ARGISNULL(1) ? false : PG_GETARG_BOOL(1);
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(role)};
	JfAsOwner	as_owner;
	uint64		n;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("signing_secrets", &as_owner);
	if (SPI_execute("LOCK TABLE jobflow.signing_secrets IN SHARE ROW EXCLUSIVE MODE",
					false, 0) != SPI_OK_UTILITY ||
		SPI_execute_with_args(only_previous ?
							  "DELETE FROM jobflow.signing_secrets"
							  " WHERE owner OPERATOR(pg_catalog.=) $1 AND expires_at IS NOT NULL" :
							  "DELETE FROM jobflow.signing_secrets WHERE owner OPERATOR(pg_catalog.=) $1",
							  1, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not revoke the signing secrets");
	n = SPI_processed;
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_INT32((int32) n);
}

