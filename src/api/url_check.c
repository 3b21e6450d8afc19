/*-------------------------------------------------------------------------
 *
 * url_check.c
 *	  What a callback URL may be: an absolute http(s) URL with a valid
 *	  host, and nothing that could smuggle a request line or credentials.
 *
 * The row triggers of tasks and timers (task_check.c) check every URL
 * that enters jobflow's tables, and secrets (secrets.c) the origins a
 * secret may be sent to.  Error messages never echo a URL: a URL may
 * carry secrets in its query string, and errors end up in the server log.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>

#include "mb/pg_wchar.h"

#include "api/url_check.h"

#define URL_MAX_LENGTH		8192
#define HOST_MAX_LENGTH		253		/* RFC 1035: a name in text form */
#define LABEL_MAX_LENGTH	63

static void check_ipv6_host(const char *start, const char *end);
static void check_name_host(const char *start, const char *end);

/*
 * Accept only absolute http(s) URLs with a host, and nothing that could
 * smuggle a second request line, credentials or another protocol past
 * libcurl.  This is deliberately stricter than RFC 3986: callback URLs are
 * machine-made, and an odd one is more likely an attack than a need.
 */
void
jf_check_url(const char *url)
{
	const char *p;
	const char *authority;
	const char *host_end;
	size_t		len = strlen(url);

	if (len > URL_MAX_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("callback URL is too long"),
				 errdetail("The URL has %zu bytes; the limit is %d.", len, URL_MAX_LENGTH)));

	for (p = url; *p; p++)
	{
		unsigned char c = (unsigned char) *p;

		if (c <= 0x20 || c >= 0x7f)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL contains a space, control or non-ASCII character at byte %d",
							(int) (p - url) + 1),
					 errhint("Percent-encode such characters.")));
	}

	if (pg_strncasecmp(url, "http://", 7) == 0)
		authority = url + 7;
	else if (pg_strncasecmp(url, "https://", 8) == 0)
		authority = url + 8;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("callback URL must be an absolute http or https URL"),
				 errdetail("Other schemes, such as file, ftp or gopher, and relative URLs are not accepted.")));

	host_end = authority + strcspn(authority, "/?#");
	for (p = authority; p < host_end; p++)
	{
		if (*p == '@')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL must not contain credentials"),
					 errhint("Send credentials in a header, for example Authorization.")));
		if (*p == '\\')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL contains a backslash in its host part")));
	}

	p = authority;
	if (*p == '[')
	{
		/* IPv6 literal: hex digits, colons and dots up to ']' */
		p++;
		while (p < host_end && (isxdigit((unsigned char) *p) || *p == ':' || *p == '.'))
			p++;
		if (p >= host_end || *p != ']' || p == authority + 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL has an invalid IPv6 host")));
		check_ipv6_host(authority + 1, p);
		p++;
	}
	else
	{
		const char *start = p;

		while (p < host_end && (isalnum((unsigned char) *p) || *p == '-' ||
								*p == '.' || *p == '_'))
			p++;
		if (p == start)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL has no host")));
		if (p == host_end || *p == ':')
			check_name_host(start, p);
	}

	if (p < host_end && *p == ':')
	{
		long		port = 0;
		const char *digits = ++p;

		while (p < host_end && isdigit((unsigned char) *p) && port <= 65535)
			port = port * 10 + (*p++ - '0');
		if (p == digits || p != host_end || port < 1 || port > 65535)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL has an invalid port"),
					 errdetail("A port is a number from 1 to 65535.")));
	}
	if (p != host_end)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("callback URL has an invalid character in its host at byte %d",
						(int) (p - url) + 1)));
}

/*
 * An IP-literal of RFC 3986 must hold an IPv6 address: inet_pton() is the
 * grammar of RFC 4291 section 2.2.  IPvFuture and zone identifiers (RFC
 * 6874) are refused by the character scan in jf_check_url already.
 */
static void
check_ipv6_host(const char *start, const char *end)
{
	char		buf[INET6_ADDRSTRLEN + 1];
	unsigned char addr[16];

	if (end - start >= (ptrdiff_t) sizeof(buf))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("callback URL has an invalid IPv6 host"),
				 errdetail("The address between brackets is too long for an IPv6 address.")));
	memcpy(buf, start, end - start);
	buf[end - start] = '\0';
	if (inet_pton(AF_INET6, buf, addr) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("callback URL has an invalid IPv6 host"),
				 errdetail("The host between brackets must be an IPv6 address as in RFC 4291, such as [2001:db8::1].")));
}

/*
 * A host that is not bracketed is an IPv4 address or a DNS name.  RFC 3986
 * would take any run of unreserved characters as a reg-name, but a
 * resolver only ever finds names made of labels (RFC 1123 section 2.1: 1
 * to 63 letters, digits or hyphens, neither first nor last a hyphen; at
 * most 253 characters; underscores are kept, as some service names use
 * them), and a name whose last label is numeric is no DNS name at all
 * (RFC 3696 section 2): resolvers and libcurl take "1.2.3.4.5", "127.1",
 * "0" or "0x7f.1" as legacy IPv4 forms, so only the dotted-decimal form of
 * RFC 3986 is accepted there.  A single trailing dot (a fully qualified
 * name) is allowed.
 */
static void
check_name_host(const char *start, const char *end)
{
	const char *label = start;
	const char *last_label = start;
	const char *p;
	bool		numeric = true;
	bool		hex;

	if (end > start && end[-1] == '.' && end - 1 > start)
		end--;
	if (end - start > HOST_MAX_LENGTH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("callback URL has an invalid host"),
				 errdetail("A host name has at most %d characters.", HOST_MAX_LENGTH)));
	for (p = start; p <= end; p++)
	{
		if (p < end && *p != '.')
			continue;
		if (p == label || p - label > LABEL_MAX_LENGTH ||
			*label == '-' || p[-1] == '-')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL has an invalid host"),
					 errdetail("A host name is made of labels of 1 to %d letters, digits, hyphens or underscores, separated by dots, none beginning or ending with a hyphen.",
							   LABEL_MAX_LENGTH)));
		last_label = label;
		label = p + 1;
	}

	/* numeric last label: decimal, or the 0x hex a resolver would accept */
	p = last_label;
	hex = (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'));
	for (p += hex ? 2 : 0; p < end; p++)
	{
		if (!(hex ? isxdigit((unsigned char) *p) : isdigit((unsigned char) *p)))
			numeric = false;
	}
	if (numeric)
	{
		char		buf[HOST_MAX_LENGTH + 1];
		struct in_addr addr;

		memcpy(buf, start, end - start);
		buf[end - start] = '\0';
		/* glibc's inet_pton takes exactly four decimal parts, no leading 0 */
		if (inet_pton(AF_INET, buf, &addr) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("callback URL has an invalid IPv4 host"),
					 errdetail("A host whose last label is a number must be an IPv4 address in dotted-decimal form, such as 192.0.2.1.")));
	}
}
