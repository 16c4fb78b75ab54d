// SPDX-License-Identifier: GPL-2.0
/*
 * Verbs helpers for cmecho's Rust layer (rust/rdma/verbs/, cq.rs).
 *
 * Only what Rust cannot call: macros (ib_alloc_pd, ib_alloc_cq, INIT_WORK),
 * static inlines (the ib_dma_* family, ib_post_send/ib_post_recv,
 * ib_req_notify_cq, queue_work, need_resched, local_bh_disable/enable, the
 * rkey update of a registration), and the fields of a QP and a CQ, whose structs Rust has no
 * layout for (a QP's number, a busy-polled CQ's completion handler).
 * Rust builds the work requests, reads completions, queries QPs and frees PDs
 * and MRs itself. The helpers keep nothing between calls; the objects, their
 * bounds checks and their teardown order belong to rust/rdma/verbs/.
 */
#include <linux/dma-mapping.h>
#include <linux/bottom_half.h>
#include <linux/err.h>
#include <linux/sched.h>
#include <linux/workqueue.h>
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

/*
 * A CQ that rust/rdma/verbs/ polls itself (busy polling): allocated for direct
 * polling, so that the core neither arms nor polls it, with @handler as the
 * handler the provider calls on a completion once it is armed, and @ctx as its
 * context. Not armed yet.
 */
struct ib_cq *cmecho_cq_alloc_polled(struct ib_device *dev, u32 nr_cqe,
				     void (*handler)(struct ib_cq *cq, void *ctx), void *ctx)
{
	struct ib_cq *cq = ib_alloc_cq(dev, ctx, nr_cqe, 0, IB_POLL_DIRECT);

	if (!IS_ERR(cq))
		cq->comp_handler = handler;
	return cq;
}

/* Arms @cq for its next completion; > 0 if completions may have come unseen. */
int cmecho_cq_arm(struct ib_cq *cq)
{
	return ib_req_notify_cq(cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
}

void cmecho_work_init(struct work_struct *work, void (*func)(struct work_struct *work))
{
	INIT_WORK(work, func);
}

bool cmecho_queue_work(struct workqueue_struct *wq, struct work_struct *work)
{
	return queue_work(wq, work);
}

/*
 * Whether another task waits for this CPU: need_resched(), or the lazy flag a
 * wakeup of a fair-class task sets instead under lazy preemption, which the
 * scheduler turns into need_resched() only at the next tick (and under which
 * cond_resched() does nothing). A poller that looked at need_resched() alone
 * would hold the CPU for up to a tick while the provider's task that makes the
 * next completion waits for it.
 */
bool cmecho_need_resched(void)
{
	return need_resched() || tif_test_bit(TIF_NEED_RESCHED_LAZY);
}

/*
 * Bottom halves off and on again (local_bh_disable/enable, static inlines):
 * around a busy-polled CQ's fast path, which then runs as in softirq, not
 * preempted while it holds the connection's resources.
 */
void cmecho_bh_disable(void)
{
	local_bh_disable();
}

void cmecho_bh_enable(void)
{
	local_bh_enable();
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
