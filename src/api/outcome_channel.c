/*-------------------------------------------------------------------------
 *
 * outcome_channel.c
 *	  The channel on which each role hears the outcomes of its tasks.
 *
 * NOTIFY knows no privileges: any role may LISTEN on any channel of its
 * database and NOTIFY any payload on it.  One channel for every tenant
 * (0.2.0's jobflow_outcome) told every listener the ids and outcomes of
 * everyone's tasks, and let any role announce an outcome that never
 * happened.  So each role has a channel of its own: "jobflow_outcome_" and
 * the first 32 hex digits of HMAC-SHA256(key, the role's OID), where the
 * key is random, made by CREATE EXTENSION, and readable by the extension's
 * owner alone (jobflow.outcome_key).  jobflow.listen_outcomes() listens on
 * a role's channel (or that of a role whose privileges it has; any, for
 * jobflow_admin) and returns its name; no other role can compute it, so
 * none can listen to it or forge a notification on it.  A LISTEN
 * statement naming it would show it in pg_stat_activity and statement logs
 * to monitoring roles: the function listens itself, so that the name stays
 * in its result.  jobflow.outcome_channel() returns the name alone.  The key is not dumped: a restored
 * database has a new one, and applications ask for their channel again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "api/as_owner.h"
#include "api/tenant_api.h"

#define CHANNEL_PREFIX "jobflow_outcome_"
#define CHANNEL_HEX 32

/*
 * The channel of role, computed with the key as the table's owner: the
 * worker calls it inside its outcome write, tenants through
 * jobflow.outcome_channel().
 */
static text *
channel_of(Oid role)
{
	JfAsOwner	as_owner;
	bool		isnull;
	bytea	   *key;
	pg_hmac_ctx *ctx;
	uint8		mac[PG_SHA256_DIGEST_LENGTH];
	char		msg[16];
	char		out[sizeof(CHANNEL_PREFIX) + CHANNEL_HEX];
	int			i;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("outcome_key", &as_owner);
	if (SPI_execute("SELECT k.key FROM jobflow.outcome_key k", true, 2) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "jobflow.outcome_key must hold one key");
	key = DatumGetByteaPCopy(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	jf_as_owner_end(&as_owner);
	SPI_finish();

	snprintf(msg, sizeof(msg), "%u", role);
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL ||
		pg_hmac_init(ctx, (const uint8 *) VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) msg, strlen(msg)) < 0 ||
		pg_hmac_final(ctx, mac, sizeof(mac)) < 0)
		elog(ERROR, "could not compute an outcome channel");
	pg_hmac_free(ctx);
	strcpy(out, CHANNEL_PREFIX);
	for (i = 0; i < CHANNEL_HEX / 2; i++)
		snprintf(out + strlen(CHANNEL_PREFIX) + 2 * i, 3, "%02x", mac[i]);
	return cstring_to_text(out);
}

/*
 * jobflow.outcome_channel(for_role regrole DEFAULT NULL) RETURNS text: the
 * name of the channel of the outcomes of the caller's tasks (notify =>
 * true), or of for_role's.
 */
PG_FUNCTION_INFO_V1(jobflow_outcome_channel);
Datum
jobflow_outcome_channel(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(channel_of(jf_managed_role(fcinfo, 0, "hear the outcomes of")));
}

/*
 * jobflow.listen_outcomes(for_role regrole DEFAULT NULL) RETURNS text:
 * LISTEN on that channel, from the commit of the calling transaction on
 * (as LISTEN does), and return its name, which notifications carry.
 */
PG_FUNCTION_INFO_V1(jobflow_listen_outcomes);
Datum
jobflow_listen_outcomes(PG_FUNCTION_ARGS)
{
	text	   *channel = channel_of(jf_managed_role(fcinfo, 0, "hear the outcomes of"));

	/* what LISTEN refuses, refused alike */
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot listen for outcomes during recovery")));
	if (InSecurityRestrictedOperation())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot listen for outcomes within security-restricted operation")));
	Async_Listen(text_to_cstring(channel));
	PG_RETURN_TEXT_P(channel);
}

/*
 * jobflow._outcome_channel(owner regrole) RETURNS text: the same, without
 * the check, for the worker's outcome write; no role but a superuser may
 * execute it.
 */
PG_FUNCTION_INFO_V1(jobflow_outcome_channel_of);
Datum
jobflow_outcome_channel_of(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(channel_of(PG_GETARG_OID(0)));
}
