// SPDX-License-Identifier: GPL-2.0
/*
 * RDMA CM helpers for cmecho's Rust layer (rust/rdma/id.rs, event.rs, netns.rs,
 * conn/, listener.rs, workqueue.rs).
 *
 * rdma_create_id() and alloc_workqueue() are macros, get_net()/put_net() static
 * inlines; struct net and the id's route (its path record, its address as
 * printk prints it) have no Rust layout. The helpers here make those calls
 * (with the port space and QP type Rust chooses) and read single fields; none
 * keeps anything between calls. Events and the id's context, device and QP
 * Rust reads from bindgen's layouts. The order of the CM calls, the meaning of
 * event codes, the addresses and the connection parameters are Rust's
 * (rust/rdma/), from the kernel's own declarations.
 */
#include <linux/err.h>
#include <linux/minmax.h>
#include <linux/nsproxy.h>
#include <linux/ratelimit.h>
#include <linux/sched.h>
#include <linux/string.h>
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

struct rdma_cm_id *cmecho_cm_create_id(struct net *net, void *ctx, u32 ps, u32 qp_type)
{
	return rdma_create_id(net, cmecho_cm_handler, ctx, ps, qp_type);
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

/*
 * DEFINE_RATELIMIT_STATE() and __ratelimit() are macros: one state for the
 * module's messages at the kernel's default rate (DEFAULT_RATELIMIT_BURST
 * messages per DEFAULT_RATELIMIT_INTERVAL, 10 per 5 s). When it resumes after
 * refusing, the kernel logs how many it refused. rust/rdma/error.rs wraps it.
 */
static DEFINE_RATELIMIT_STATE(cmecho_log_rs, DEFAULT_RATELIMIT_INTERVAL,
			      DEFAULT_RATELIMIT_BURST);

bool cmecho_log_ratelimit(void)
{
	return __ratelimit(&cmecho_log_rs);
}
