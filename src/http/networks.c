/*-------------------------------------------------------------------------
 *
 * networks.c
 *	  The denied and allowed networks of jobflow's HTTP dispatcher: the
 *	  parser of jobflow.deny_networks and jobflow.allow_networks, and the
 *	  checks of an address (and port) against them.
 *
 * A list is addr[/bits][:port] entries, IPv4 or IPv6 (between brackets
 * when a port follows).  An address is denied when a deny entry matches it
 * and no allow entry does; unspecified addresses are refused whatever the
 * lists, and IPv4 addresses embedded in IPv6 ones are checked as IPv4.
 * The request's callbacks (request.c) check every connection here.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <strings.h>
#include <sys/socket.h>

#include "http/internal.h"

static void
net_error(char *errbuf, size_t errlen, const char *what, const char *item, size_t len)
{
	if (errbuf && errlen > 0)
		snprintf(errbuf, errlen, "%s: \"%.*s\"", what, (int) (len > 64 ? 64 : len), item);
}

/*
 * A decimal number from lo to hi, digits only (strtol would take signs
 * and blanks); -1 if it is not one.
 */
static long
parse_bounded(const char *s, long lo, long hi)
{
	long		v = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++)
	{
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (*s - '0');
		if (v > hi)
			return -1;
	}
	return v < lo ? -1 : v;
}

/*
 * One entry: addr[/bits][:port], an IPv6 address between brackets when a
 * port follows ([addr][/bits][:port]; "::1:443" is an IPv6 address, so
 * an unbracketed IPv6 entry never has a port).  Returns NULL, or what is
 * wrong with it.
 */
static const char *
parse_net(char *item, JfNet *net)
{
	char	   *rest;
	char	   *port;
	int			maxbits;

	memset(net, 0, sizeof(*net));
	if (*item == '[')
	{
		char	   *close = strchr(item, ']');

		if (close == NULL)
			return "entry with an unclosed bracket";
		*close = '\0';
		rest = close + 1;
		if (inet_pton(AF_INET6, item + 1, net->addr) != 1)
			return "entry with no IPv6 address between its brackets";
		net->family = AF_INET6;
	}
	else
	{
		size_t		alen = strcspn(item, "/");
		char		save = item[alen];

		item[alen] = '\0';
		if (inet_pton(AF_INET6, item, net->addr) == 1)
		{
			net->family = AF_INET6;
			item[alen] = save;
			rest = item + alen;
			if (strchr(rest, ':') != NULL)
				return "entry with a port after an IPv6 address not between brackets";
		}
		else
		{
			item[alen] = save;
			alen = strcspn(item, "/:");
			save = item[alen];
			item[alen] = '\0';
			if (inet_pton(AF_INET, item, net->addr) != 1)
				return "entry that is not an address";
			net->family = AF_INET;
			item[alen] = save;
			rest = item + alen;
		}
	}
	maxbits = net->family == AF_INET ? 32 : 128;
	net->bits = maxbits;
	port = strchr(rest, ':');
	if (port)
		*port++ = '\0';
	if (*rest == '/')
	{
		long		bits = parse_bounded(rest + 1, 0, maxbits);

		if (bits < 0)
			return "entry with an invalid prefix length";
		net->bits = (int) bits;
	}
	else if (*rest != '\0')
		return "entry with something after its address";
	if (port)
	{
		long		p = parse_bounded(port, 1, 65535);

		if (p < 0)
			return "entry with an invalid port";
		net->port = (int) p;
	}
	return NULL;
}

/*
 * Parse a deny_networks or allow_networks list into prefixes.  NULL or
 * blank gives none.  A malformed entry fails the whole list, with the
 * entry in errbuf.
 */
bool
jf_http_parse_networks(const char *list, JfNet **out, int *n, char *errbuf, size_t errlen)
{
	const char *p = list ? list : "";
	int			cap = 0;
	JfNet	   *nets = NULL;

	*out = NULL;
	*n = 0;
	for (;;)
	{
		char		item[INET6_ADDRSTRLEN + 16];
		const char *start;
		const char *problem;
		size_t		len;
		JfNet		net;

		while (*p == ',' || isspace((unsigned char) *p))
			p++;
		if (*p == '\0')
			break;
		start = p;
		while (*p && *p != ',' && !isspace((unsigned char) *p))
			p++;
		len = (size_t) (p - start);
		if (len >= sizeof(item))
		{
			net_error(errbuf, errlen, "entry too long", start, len);
			free(nets);
			return false;
		}
		memcpy(item, start, len);
		item[len] = '\0';
		if ((problem = parse_net(item, &net)) != NULL)
		{
			net_error(errbuf, errlen, problem, start, len);
			free(nets);
			return false;
		}
		if (*n == cap)
		{
			JfNet	   *more;

			cap = cap ? cap * 2 : 8;
			more = realloc(nets, sizeof(JfNet) * cap);
			if (more == NULL)
			{
				if (errbuf && errlen > 0)
					snprintf(errbuf, errlen, "out of memory");
				free(nets);
				return false;
			}
			nets = more;
		}
		nets[(*n)++] = net;
	}
	*out = nets;
	return true;
}

bool
jf_http_check_networks(const char *list, char *errbuf, size_t errlen)
{
	JfNet	   *nets;
	int			n;

	if (!jf_http_parse_networks(list, &nets, &n, errbuf, errlen))
		return false;
	free(nets);
	return true;
}

static bool
prefix_match(const unsigned char *addr, const JfNet *net)
{
	int			full = net->bits / 8;
	int			rest = net->bits % 8;

	if (memcmp(addr, net->addr, full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((addr[full] ^ net->addr[full]) & (0xFF << (8 - rest))) == 0;
}

/* Whether an entry of nets covers this address and port. */
static bool
in_networks(const JfNet *nets, int n, int family, const unsigned char *addr, int port)
{
	for (int i = 0; i < n; i++)
		if (nets[i].family == family && (nets[i].port == 0 || nets[i].port == port) &&
			prefix_match(addr, &nets[i]))
			return true;
	return false;
}

/*
 * The IPv4 addresses an IPv6 address carries, so that each is checked as
 * itself: a packet to any of these forms ends up at (or is tunnelled to)
 * that IPv4 host.  Recognised: IPv4-mapped ::ffff:0:0/96 (the kernel
 * connects to the IPv4 address), SIIT's IPv4-translated ::ffff:0:0:0/96,
 * IPv4-compatible ::/96 (deprecated; :: and ::1 are IPv6's own), NAT64's
 * well-known prefix 64:ff9b::/96 (RFC 6052), 6to4 2002::/16 (the relay
 * and the site's router at bits 16-47) and Teredo 2001:0::/32 (server at
 * bits 32-63, client obfuscated in the last 32).  Network-specific NAT64
 * prefixes cannot be recognised: list them in deny_networks.  Returns how
 * many were stored in v4 (at most 2).
 */
static int
embedded_ipv4(const unsigned char *a, unsigned char v4[2][4])
{
	static const unsigned char zero[12] = {0};
	static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const unsigned char translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
	static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, translated, 12) == 0 ||
		memcmp(a, nat64, 12) == 0)
	{
		memcpy(v4[0], a + 12, 4);
		return 1;
	}
	if (memcmp(a, zero, 12) == 0)
	{
		/* :: is refused as unspecified, ::1 is IPv6 loopback itself */
		if (a[12] == 0 && a[13] == 0 && a[14] == 0 && a[15] <= 1)
			return 0;
		memcpy(v4[0], a + 12, 4);
		return 1;
	}
	if (a[0] == 0x20 && a[1] == 0x02)
	{
		memcpy(v4[0], a + 2, 4);
		return 1;
	}
	if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0)
	{
		memcpy(v4[0], a + 4, 4);
		for (int i = 0; i < 4; i++)
			v4[1][i] = a[12 + i] ^ 0xff;
		return 2;
	}
	return 0;
}

/*
 * Whether a connection to one IPv4 or IPv6 address (network byte order)
 * and port is refused.  The IPv6 address and each IPv4 address it carries
 * are judged one by one, and all must pass: an address passes if no deny
 * entry covers it or an allow entry does.  So allowing 127.0.0.0/8 also
 * allows ::ffff:127.0.0.1 (the same host), while allowing 64:ff9b::/96
 * (NAT64) still refuses the private IPv4 addresses behind it.  Unspecified
 * addresses never pass, whatever the lists.
 */
static bool
raw_address_denied(const JfHttp *h, int family, const unsigned char *addr, int port)
{
	static const unsigned char any6[16] = {0};
	unsigned char v4[2][4];
	int			nv4 = 0;

	if (family == AF_INET)
	{
		memcpy(v4[0], addr, 4);
		nv4 = 1;
	}
	else
	{
		if (memcmp(addr, any6, 16) == 0)
			return true;		/* ::, unspecified: this host */
		nv4 = embedded_ipv4(addr, v4);
		if (in_networks(h->deny, h->ndeny, AF_INET6, addr, port) &&
			!in_networks(h->allow, h->nallow, AF_INET6, addr, port))
			return true;
	}
	for (int k = 0; k < nv4; k++)
	{
		/* 0.0.0.0/8, "this network": connecting there reaches this host */
		if (v4[k][0] == 0)
			return true;
		if (in_networks(h->deny, h->ndeny, AF_INET, v4[k], port) &&
			!in_networks(h->allow, h->nallow, AF_INET, v4[k], port))
			return true;
	}
	return false;
}

/* A socket address, as curl hands it to the open-socket callback. */
bool
jf_http_sockaddr_denied(const JfHttp *h, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
	{
		const struct sockaddr_in *in = (const struct sockaddr_in *) sa;

		return raw_address_denied(h, AF_INET, (const unsigned char *) &in->sin_addr,
								  ntohs(in->sin_port));
	}
	if (sa->sa_family == AF_INET6)
	{
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;

		return raw_address_denied(h, AF_INET6, (const unsigned char *) &in6->sin6_addr,
								  ntohs(in6->sin6_port));
	}
	return false;
}

/*
 * A numeric address as text (curl's primary IP, or a caller's); anything
 * that does not parse is refused, since it cannot be checked.
 */
static bool
text_address_denied(const JfHttp *h, const char *text, int port)
{
	unsigned char addr[16];

	if (text != NULL && inet_pton(AF_INET, text, addr) == 1)
		return raw_address_denied(h, AF_INET, addr, port);
	if (text != NULL && inet_pton(AF_INET6, text, addr) == 1)
		return raw_address_denied(h, AF_INET6, addr, port);
	return true;
}

/*
 * Whether allow_networks lists a numeric address (and port) itself, or
 * the IPv4 address an IPv6 one carries.
 */
static bool
text_address_allowed(const JfHttp *h, const char *text, int port)
{
	unsigned char addr[16];
	unsigned char v4[2][4];
	int			nv4;

	if (text != NULL && inet_pton(AF_INET, text, addr) == 1)
		return in_networks(h->allow, h->nallow, AF_INET, addr, port);
	if (text == NULL || inet_pton(AF_INET6, text, addr) != 1)
		return false;
	if (in_networks(h->allow, h->nallow, AF_INET6, addr, port))
		return true;
	nv4 = embedded_ipv4(addr, v4);
	for (int k = 0; k < nv4; k++)
		if (!in_networks(h->allow, h->nallow, AF_INET, v4[k], port))
			return false;
	return nv4 > 0;
}

/*
 * A connection whose local address is its remote one went to an address
 * of this host (the kernel answers a local address from itself); as
 * loopback, it is refused when loopback is, unless allow_networks names
 * the address.
 */
bool
jf_http_own_host_denied(const JfHttp *h, const char *primary, const char *local, int port)
{
	if (primary == NULL || local == NULL || strcmp(primary, local) != 0)
		return false;
	return text_address_denied(h, strchr(primary, ':') ? "::1" : "127.0.0.1", port) &&
		!text_address_allowed(h, primary, port);
}

bool
jf_http_address_denied(const JfHttp *h, const char *address, int port)
{
	return text_address_denied(h, address, port);
}

