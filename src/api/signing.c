/*-------------------------------------------------------------------------
 *
 * signing.c
 *	  The SQL functions that create, rotate and revoke the signing secrets
 *	  of Standard Webhooks signatures (base/signing.c signs).  The named
 *	  secrets that header values refer to are secrets.c's.
 *
 * Secrets live in jobflow.signing_secrets, which no tenant and no jobflow
 * role may read: the functions below check the caller's rights and then
 * write as the table's owner; the worker reads the secrets in its claim
 * statement.  A secret is made here, from pg_strong_random(), so it never
 * appears in a statement's text; it is shown once, as the result of
 * create_signing_secret().
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

