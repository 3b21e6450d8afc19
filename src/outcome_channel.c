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
 * owner alone (jobflow.outcome_key).  jobflow.outcome_channel() tells a
 * role its channel (or that of a role whose privileges it has; any, for
 * jobflow_admin); no other role can compute it, so none can listen to it
 * or forge a notification on it.  The key is not dumped: a restored
 * database has a new one, and applications ask for their channel again.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hmac.h"
#include "common/sha2.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/syscache.h"

#include "as_owner.h"

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
 * channel to LISTEN on for the outcomes of the caller's tasks (notify =>
 * true), or of a role whose privileges it has; members of jobflow_admin
 * may ask for any role's.
 */
PG_FUNCTION_INFO_V1(jobflow_outcome_channel);
Datum
jobflow_outcome_channel(PG_FUNCTION_ARGS)
{
	Oid			me = GetUserId();
	Oid			role = PG_ARGISNULL(0) ? me : PG_GETARG_OID(0);
	Oid			admin = get_role_oid("jobflow_admin", true);

	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
	if (!has_privs_of_role(me, role) &&
		!(OidIsValid(admin) && has_privs_of_role(me, admin)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to hear the outcomes of role \"%s\"",
						GetUserNameFromId(role, false)),
				 errdetail("Only the role itself, roles that have its privileges and members of jobflow_admin may.")));
	PG_RETURN_TEXT_P(channel_of(role));
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
