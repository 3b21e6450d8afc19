/*-------------------------------------------------------------------------
 *
 * client_certs.c
 *	  Client certificates for mutual TLS: a named certificate and private
 *	  key per role, the https origins each may be presented to, and the
 *	  queues that present one.
 *
 * set_client_certificate() and drop_client_certificate() write
 * jobflow.client_certificates as the table's owner after checking the
 * caller; the table has row-level security and no policy, so no tenant
 * (not even the certificate's own role, nor jobflow_admin) reads it back:
 * the view jobflow.client_certificate_names shows names and origins.  A
 * queue names the certificate its tasks present
 * (set_queue_client_certificate(), in queues.c, which locks it here); the
 * worker's claim reads the certificate and key with the task, for the
 * origins the certificate is bound to, and hands them to libcurl from
 * memory (http/request.c).  The key never goes into a message: errors
 * about it say what is wrong, not what it holds.
 *
 * A certificate is bound to origins given with its key, as a header secret
 * is (secrets.c): whoever could point a queue's tasks at a receiver of its
 * own (the owner, jobflow_admin) must hold the key already to present it
 * there.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "api/client_certs.h"
#include "api/as_owner.h"
#include "api/secrets.h"
#include "api/tenant_api.h"

#define CERT_NAME_MAX 63
#define CERT_PEM_MAX (64 * 1024)

/* Names: 1 to 63 letters, digits, '_', '-' or '.'; echoed in errors. */
static void
check_certificate_name(const char *name)
{
	int			len = strlen(name);
	int			i;

	if (len == 0 || len > CERT_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("client certificate name must have 1 to %d characters", CERT_NAME_MAX)));
	for (i = 0; i < len; i++)
		if (!isalnum((unsigned char) name[i]) && strchr("_-.", name[i]) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid character in client certificate name at position %d", i + 1),
					 errdetail("Client certificate names may contain letters, digits, \"_\", \"-\" and \".\" only.")));
}

/* Whether the text of len bytes at s contains needle. */
static bool
contains(const char *s, int len, const char *needle)
{
	int			n = strlen(needle);

	for (int i = 0; i + n <= len; i++)
		if (memcmp(s + i, needle, n) == 0)
			return true;
	return false;
}

/*
 * A PEM text's shape, checked without quoting it: what is wrong is said,
 * never what it holds.  Whether the key fits the certificate, and whether
 * the receiver accepts it, shows at the first handshake as a TLS outcome.
 */
static void
check_pem(text *pem, bool key)
{
	const char *s = VARDATA_ANY(pem);
	int			len = VARSIZE_ANY_EXHDR(pem);
	const char *what = key ? "private key" : "certificate";

	if (len == 0 || len > CERT_PEM_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("client %s must have 1 to %d bytes", what, CERT_PEM_MAX)));
	if (!key && !(contains(s, len, "-----BEGIN CERTIFICATE-----") &&
				  contains(s, len, "-----END CERTIFICATE-----")))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("client certificate is not in PEM form"),
				 errhint("Give the certificate (and the intermediates after it) as PEM text, \"-----BEGIN CERTIFICATE-----\" ...")));
	if (key && !(contains(s, len, "-----BEGIN ") && contains(s, len, "PRIVATE KEY-----")))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("client private key is not in PEM form"),
				 errhint("Give the key as PEM text, \"-----BEGIN PRIVATE KEY-----\" ...")));
	if (key && (contains(s, len, "ENCRYPTED") || contains(s, len, "Proc-Type:")))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("client private key is encrypted"),
				 errdetail("The worker has no passphrase to decrypt it with."),
				 errhint("Store the key unencrypted (openssl pkey -in key.pem): jobflow keeps it where no role but the extension's owner can read it.")));
}

/*
 * jobflow.set_client_certificate(name text, certificate text, private_key
 * text, origins text[], for_role regrole) RETURNS void: stores or replaces
 * a client certificate and its key, with the https origins it may be
 * presented to.  The origins come with the key, always.
 */
PG_FUNCTION_INFO_V1(jobflow_set_client_certificate);
Datum
jobflow_set_client_certificate(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 4, "manage the client certificates of");
	char	   *name;
	ArrayType  *origins;
	Oid			types[5] = {OIDOID, TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID};
	Datum		values[5];
	JfAsOwner	as_owner;

	jf_check_owner_role(role);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("client certificate name, certificate and private key must not be null")));
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a client certificate needs the origins it may be presented to"),
				 errhint("Give them as origins => ARRAY['https://api.example.com'].")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	check_certificate_name(name);
	check_pem(PG_GETARG_TEXT_PP(1), false);
	check_pem(PG_GETARG_TEXT_PP(2), true);
	origins = jf_secret_origins(PG_GETARG_ARRAYTYPE_P(3), "client certificate", true);

	values[0] = ObjectIdGetDatum(role);
	values[1] = CStringGetTextDatum(name);
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(1));
	values[3] = PointerGetDatum(PG_GETARG_TEXT_PP(2));
	values[4] = PointerGetDatum(origins);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("client_certificates", &as_owner);
	if (SPI_execute_with_args("INSERT INTO jobflow.client_certificates"
							  " (owner, name, certificate, private_key, origins)"
							  " VALUES ($1, $2, $3, $4, $5)"
							  " ON CONFLICT (owner, name) DO UPDATE"
							  " SET certificate = excluded.certificate,"
							  "     private_key = excluded.private_key,"
							  "     origins = excluded.origins,"
							  "     updated_at = pg_catalog.clock_timestamp()",
							  5, types, values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not store the client certificate");
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * jobflow.drop_client_certificate(name text, for_role regrole) RETURNS
 * boolean: true when it existed.  Refused while a queue of the role names
 * it: its tasks would go out without it.  The delete comes first, so that
 * it waits for a transaction naming it in a queue (which locks it), and
 * the check after it sees that queue.
 */
PG_FUNCTION_INFO_V1(jobflow_drop_client_certificate);
Datum
jobflow_drop_client_certificate(PG_FUNCTION_ARGS)
{
	Oid			role = jf_managed_role(fcinfo, 1, "manage the client certificates of");
	char	   *name;
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	JfAsOwner	as_owner;
	bool		found;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	values[0] = ObjectIdGetDatum(role);
	values[1] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("client_certificates", &as_owner);
	if (SPI_execute_with_args("DELETE FROM jobflow.client_certificates"
							  " WHERE owner OPERATOR(pg_catalog.=) $1 AND name OPERATOR(pg_catalog.=) $2",
							  2, types, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not drop the client certificate");
	found = SPI_processed > 0;
	if (found)
	{
		if (SPI_execute_with_args("SELECT q.name FROM jobflow.queues q"
								  " WHERE q.owner OPERATOR(pg_catalog.=) $1"
								  "   AND q.client_certificate OPERATOR(pg_catalog.=) $2"
								  " ORDER BY q.name LIMIT 1",
								  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look for uses of the client certificate");
		if (SPI_processed > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("client certificate \"%s\" is in use", name),
					 errdetail("Queue \"%s\" presents it.",
							   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1)),
					 errhint("Set that queue's certificate to another one or to NULL with jobflow.set_queue_client_certificate() first.")));
	}
	jf_as_owner_end(&as_owner);
	SPI_finish();
	PG_RETURN_BOOL(found);
}

/*
 * ERROR unless owner has a client certificate of that name; it is locked
 * (KEY SHARE) until the end of the transaction, so that
 * drop_client_certificate() waits and then sees the queue naming it.  A
 * certificate of another role is as missing as one nobody has.
 */
void
jf_lock_client_certificate(Oid owner, const char *name)
{
	Oid			types[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	JfAsOwner	as_owner;

	check_certificate_name(name);
	values[0] = ObjectIdGetDatum(owner);
	values[1] = CStringGetTextDatum(name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	jf_as_owner_begin("client_certificates", &as_owner);
	if (SPI_execute_with_args("SELECT 1 FROM jobflow.client_certificates c"
							  " WHERE c.owner OPERATOR(pg_catalog.=) $1"
							  "   AND c.name OPERATOR(pg_catalog.=) $2 FOR KEY SHARE",
							  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not look up a client certificate");
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("client certificate \"%s\" does not exist", name),
				 errhint("Store it first with jobflow.set_client_certificate('%s', ...), as the role the queue belongs to.",
						 name)));
	jf_as_owner_end(&as_owner);
	SPI_finish();
}
