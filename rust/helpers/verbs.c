// SPDX-License-Identifier: GPL-2.0
/*
 * Verbs helpers for cmecho's Rust layer (rust/rdma/verbs/, cq.rs).
 *
 * Only what Rust cannot call: macros (ib_alloc_pd, ib_alloc_cq), static inlines
 * (the ib_dma_* family, ib_post_send/ib_post_recv, the rkey update of a
 * registration) and the number of a QP, whose struct Rust has no layout for.
 * Rust builds the work requests, reads completions, queries QPs and frees PDs
 * and MRs itself. The helpers keep nothing between calls; the objects, their
 * bounds checks and their teardown order belong to rust/rdma/verbs/.
 */
#include <linux/dma-mapping.h>
#include <linux/err.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "cmecho_helpers.h"

struct ib_pd *cmecho_pd_alloc(struct ib_device *dev)
{
	return ib_alloc_pd(dev, 0);
}

/*
 * struct ib_qp embeds its locks, lists and restrack entry: a Rust layout of it
 * would take in some twenty more kernel types for this one field.
 */
u32 cmecho_qp_num(const struct ib_qp *qp)
{
	return qp->qp_num;
}

/* A CQ whose completions run in @poll_ctx, each through its ib_cqe. */
struct ib_cq *cmecho_cq_alloc(struct ib_device *dev, u32 nr_cqe, u32 poll_ctx)
{
	return ib_alloc_cq(dev, NULL, nr_cqe, 0, poll_ctx);
}

/* Maps @len bytes at @cpu both ways; -ENOMEM if the mapping failed. */
int cmecho_dma_map(struct ib_device *dev, void *cpu, u32 len, u64 *dma)
{
	*dma = ib_dma_map_single(dev, cpu, len, DMA_BIDIRECTIONAL);
	return ib_dma_mapping_error(dev, *dma) ? -ENOMEM : 0;
}

void cmecho_dma_unmap(struct ib_device *dev, u64 dma, u32 len)
{
	ib_dma_unmap_single(dev, dma, len, DMA_BIDIRECTIONAL);
}

void cmecho_dma_sync(struct ib_device *dev, u64 dma, u32 len, bool for_cpu)
{
	if (for_cpu)
		ib_dma_sync_single_for_cpu(dev, dma, len, DMA_BIDIRECTIONAL);
	else
		ib_dma_sync_single_for_device(dev, dma, len, DMA_BIDIRECTIONAL);
}

/*
 * Maps @mr to the @len DMA-mapped bytes at @dma, gives it the next rkey (the
 * static inlines ib_inc_rkey and ib_update_fast_reg_key) and posts the
 * IB_WR_REG_MR that grants @access (enum ib_access_flags) with that rkey,
 * unsignaled: @cqe sees its completion only when it fails. Returns the rkey and
 * address to advertise.
 */
int cmecho_post_reg(struct ib_qp *qp, struct ib_mr *mr, u64 dma, u32 len, u32 access,
		    struct ib_cqe *cqe, u32 *rkey, u64 *addr)
{
	struct ib_reg_wr wr = {};
	struct scatterlist sg;
	int n;

	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = dma;
	sg_dma_len(&sg) = len;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1)
		return n < 0 ? n : -EINVAL;
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	wr.wr.opcode = IB_WR_REG_MR;
	wr.wr.wr_cqe = cqe;
	wr.mr = mr;
	wr.key = mr->rkey;
	wr.access = access;
	n = ib_post_send(qp, &wr.wr, NULL);
	if (n)
		return n;
	*rkey = mr->rkey;
	*addr = mr->iova;
	return 0;
}

/* ib_post_recv() and ib_post_send(): Rust builds the requests. */
int cmecho_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr)
{
	return ib_post_recv(qp, wr, NULL);
}

int cmecho_post_send(struct ib_qp *qp, const struct ib_send_wr *wr)
{
	return ib_post_send(qp, wr, NULL);
}
