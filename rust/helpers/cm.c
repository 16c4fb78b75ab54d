// SPDX-License-Identifier: GPL-2.0
/*
 * RDMA CM helpers for cmecho's Rust layer (rust/rdma/id.rs, event.rs, netns.rs,
 * conn.rs, listener.rs, workqueue.rs).
 *
 * rdma_create_id() and alloc_workqueue() are macros, get_net()/put_net() static
 * inlines; the structs the CM hands out (events, ids with their routes) and
 * struct sockaddr_storage have no Rust layout. The helpers here make those calls,
 * read single fields, and turn an address string into the sockaddr the CM takes
 * (parse, then bind and listen, or resolve). None keeps anything between calls.
 * The order of the CM calls that matter for the connection parameters, the
 * meaning of event codes and the connection parameters themselves are Rust's
 * (rust/rdma/id.rs, event.rs, conn.rs), from the kernel's own declarations.
 */
#include <linux/ctype.h>
#include <linux/err.h>
#include <linux/inet.h>
#include <linux/nsproxy.h>
#include <linux/sched.h>
#include <linux/workqueue.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "cmecho_helpers.h"

struct net *cmecho_net_get_current(void)
{
	return get_net(current->nsproxy->net_ns);
}

void cmecho_net_put(struct net *net)
{
	put_net(net);
}

u32 cmecho_net_inum(const struct net *net)
{
	return net->ns.inum;
}

/* Every event of every cmecho id goes to Rust, with the id's context. */
static int cmecho_cm_handler(struct rdma_cm_id *id, struct rdma_cm_event *event)
{
	return cmecho_rs_cm_event(id->context, id, event);
}

struct rdma_cm_id *cmecho_cm_create_id(struct net *net, void *ctx)
{
	return rdma_create_id(net, cmecho_cm_handler, ctx, RDMA_PS_TCP, IB_QPT_RC);
}

void cmecho_cm_set_context(struct rdma_cm_id *id, void *ctx)
{
	id->context = ctx;
}

static int cmecho_parse(struct net *net, const char *addr, u16 port,
			struct sockaddr_storage *ss)
{
	char port_str[8];

	snprintf(port_str, sizeof(port_str), "%u", port);
	return inet_pton_with_scope(net, AF_UNSPEC, addr, port_str, ss);
}

/*
 * Whether @addr is exactly one address, a scope naming an interface of @net.
 * in4_pton() stops at a colon or a newline, so an IPv4 address is also checked
 * to be nothing but digits and dots ("10.0.0.1:80" is not an address).
 */
int cmecho_parse_addr(struct net *net, const char *addr)
{
	struct sockaddr_storage ss;
	const char *c;
	int ret;

	ret = cmecho_parse(net, addr, 0, &ss);
	if (ret)
		return ret;
	if (ss.ss_family == AF_INET) {
		for (c = addr; *c; c++)
			if (!isdigit(*c) && *c != '.')
				return -EINVAL;
	}
	return 0;
}

int cmecho_cm_resolve_addr(struct rdma_cm_id *id, struct net *net, const char *addr,
			   u16 port, unsigned long timeout_ms)
{
	struct sockaddr_storage ss;
	int ret;

	ret = cmecho_parse(net, addr, port, &ss);
	if (ret)
		return ret;
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, timeout_ms);
}

int cmecho_cm_listen(struct rdma_cm_id *id, struct net *net, const char *addr, u16 port,
		     int backlog)
{
	struct sockaddr_storage ss;
	int ret;

	ret = cmecho_parse(net, addr, port, &ss);
	if (ret)
		return ret;
	ret = rdma_bind_addr(id, (struct sockaddr *)&ss);
	if (ret)
		return ret;
	return rdma_listen(id, backlog);
}

/* The event's enum rdma_cm_event_type: rust/rdma/event.rs tells the codes apart. */
int cmecho_ev_type(const struct rdma_cm_event *event)
{
	return event->event;
}

int cmecho_ev_status(const struct rdma_cm_event *event)
{
	return event->status;
}

u32 cmecho_ev_ece_vendor_id(const struct rdma_cm_event *event)
{
	return event->ece.vendor_id;
}

u32 cmecho_ev_ece_attr_mod(const struct rdma_cm_event *event)
{
	return event->ece.attr_mod;
}

/*
 * The peer's initiator depth and responder resources: meaningful on a connect
 * request only, which rust/rdma/event.rs checks before reading them.
 */
u8 cmecho_ev_initiator_depth(const struct rdma_cm_event *event)
{
	return event->param.conn.initiator_depth;
}

u8 cmecho_ev_responder_resources(const struct rdma_cm_event *event)
{
	return event->param.conn.responder_resources;
}

/* The peer's address and port, as text ("10.77.0.2:41234", "[fe80::1]:7174"). */
int cmecho_cm_peer_addr(struct rdma_cm_id *id, char *buf, int len)
{
	return snprintf(buf, len, "%pISpc", &id->route.addr.dst_addr);
}

int cmecho_cm_route_plt(struct rdma_cm_id *id)
{
	if (!id->route.path_rec || !id->route.num_pri_alt_paths)
		return -ENODATA;
	return id->route.path_rec->packet_life_time;
}

int cmecho_cm_route_tclass(struct rdma_cm_id *id)
{
	if (!id->route.path_rec || !id->route.num_pri_alt_paths)
		return -ENODATA;
	return id->route.path_rec->traffic_class;
}

/*
 * alloc_workqueue() is a macro (allocation profiling hooks); rust/rdma/workqueue.rs
 * chooses the name and flags, owns the workqueue and destroys it.
 */
struct workqueue_struct *cmecho_wq_alloc(const char *name, unsigned int flags,
					 int max_active)
{
	return alloc_workqueue("%s", flags, max_active, name);
}
