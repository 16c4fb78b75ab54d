// SPDX-License-Identifier: GPL-2.0
/*
 * RDMA CM helpers for cmecho's Rust layer.
 *
 * rdma_create_id() is a macro that passes KBUILD_MODNAME, which only a C
 * translation unit of this module has; the helpers here call it on Rust's behalf.
 */
#include <linux/err.h>
#include <net/net_namespace.h>
#include <rdma/rdma_cm.h>

#include "cmecho_helpers.h"

static int cmecho_probe_handler(struct rdma_cm_id *id, struct rdma_cm_event *event)
{
	/* The probe id is never bound, resolved or connected: no event can arrive. */
	return 0;
}

/**
 * cmecho_probe_cm_id() - prove the RDMA CM is usable from this module
 * @ack_timeout: the ack timeout exponent to set on the probe id
 *
 * Creates an RC id in the initial network namespace, sets its ack timeout
 * (the one call cmecho exists to get right) and destroys it again.
 *
 * Return: 0 on success, a negative errno from rdma_create_id() or
 * rdma_set_ack_timeout() otherwise.
 */
int cmecho_probe_cm_id(u8 ack_timeout)
{
	struct rdma_cm_id *id;
	int ret;

	id = rdma_create_id(&init_net, cmecho_probe_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id))
		return PTR_ERR(id);
	ret = rdma_set_ack_timeout(id, ack_timeout);
	rdma_destroy_id(id);
	return ret;
}
