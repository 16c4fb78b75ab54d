// SPDX-License-Identifier: GPL-2.0
/*
 * Verbs helpers for cmecho's Rust layer (rust/rdma/verbs/, cq.rs).
 *
 * Only what Rust cannot call: macros (ib_alloc_pd, ib_alloc_cq), static inlines
 * (ib_dealloc_pd, ib_dereg_mr, the ib_dma_* family, ib_post_send/ib_post_recv)
 * and fields of structs the Rust side has no layout for (the CM id's device and
 * QP, the PD's lkey, a work completion, the attributes ib_query_qp fills in, the
 * work requests Rust has no layout for). The helpers keep nothing between
 * calls; the objects, their bounds checks and their teardown order belong to
 * rust/rdma/verbs/.
 */
#include <linux/dma-mapping.h>
#include <linux/err.h>
#include <linux/scatterlist.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "cmecho_helpers.h"

struct ib_device *cmecho_cm_device(struct rdma_cm_id *id)
{
	return id->device;
}

struct ib_qp *cmecho_cm_qp(struct rdma_cm_id *id)
{
	return id->qp;
}

struct ib_pd *cmecho_pd_alloc(struct ib_device *dev)
{
	return ib_alloc_pd(dev, 0);
}

void cmecho_pd_free(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

u32 cmecho_pd_lkey(const struct ib_pd *pd)
{
	return pd->local_dma_lkey;
}

/* A CQ whose completions run in @poll_ctx, each through its ib_cqe. */
struct ib_cq *cmecho_cq_alloc(struct ib_device *dev, u32 nr_cqe, u32 poll_ctx)
{
	return ib_alloc_cq(dev, NULL, nr_cqe, 0, poll_ctx);
}

struct ib_cqe *cmecho_wc_cqe(const struct ib_wc *wc)
{
	return wc->wr_cqe;
}

int cmecho_wc_status(const struct ib_wc *wc)
{
	return wc->status;
}

u32 cmecho_wc_byte_len(const struct ib_wc *wc)
{
	return wc->byte_len;
}

/*
 * What a QP really got, as the provider reports it. Out parameters: QP number,
 * state (enum ib_qp_state), ack timeout exponent, retry count, RNR retry count,
 * min RNR timer code, path MTU in bytes.
 */
int cmecho_qp_query(struct ib_qp *qp, u32 *qp_num, u8 *state, u8 *timeout, u8 *retry_cnt,
		    u8 *rnr_retry, u8 *min_rnr_timer, u32 *path_mtu)
{
	struct ib_qp_init_attr init;
	struct ib_qp_attr attr;
	int ret;

	ret = ib_query_qp(qp, &attr,
			  IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
			  IB_QP_MIN_RNR_TIMER | IB_QP_PATH_MTU, &init);
	if (ret)
		return ret;
	*qp_num = qp->qp_num;
	*state = attr.qp_state;
	*timeout = attr.timeout;
	*retry_cnt = attr.retry_cnt;
	*rnr_retry = attr.rnr_retry;
	*min_rnr_timer = attr.min_rnr_timer;
	*path_mtu = ib_mtu_enum_to_int(attr.path_mtu);
	return 0;
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

int cmecho_mr_free(struct ib_mr *mr)
{
	return ib_dereg_mr(mr);
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

/* Posts a receive of @len bytes at DMA address @addr, completing through @cqe. */
int cmecho_post_recv(struct ib_qp *qp, struct ib_cqe *cqe, u64 addr, u32 len, u32 lkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_recv_wr wr = { .wr_cqe = cqe, .sg_list = &sge, .num_sge = 1 };

	return ib_post_recv(qp, &wr, NULL);
}

/*
 * Posts a send-queue work request of @opcode (enum ib_wr_opcode) with
 * @send_flags (enum ib_send_flags) on @len bytes at DMA address @addr; for an
 * RDMA READ or WRITE, between them and the peer's @raddr/@rkey (ignored
 * otherwise).
 */
int cmecho_post_send(struct ib_qp *qp, struct ib_cqe *cqe, u32 opcode, int send_flags, u64 addr,
		     u32 len, u32 lkey, u64 raddr, u32 rkey)
{
	struct ib_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ib_rdma_wr wr = {
		.wr = {
			.wr_cqe = cqe, .sg_list = &sge, .num_sge = 1,
			.opcode = opcode, .send_flags = send_flags,
		},
		.remote_addr = raddr,
		.rkey = rkey,
	};

	return ib_post_send(qp, &wr.wr, NULL);
}
