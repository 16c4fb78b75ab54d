// SPDX-License-Identifier: GPL-2.0
/*
 * Verbs helpers for cmecho's Rust layer (rust/rdma/verbs.rs).
 *
 * One struct cmecho_res bundles what an RC connection needs below the CM id: a
 * PD, a CQ whose completions go to a Rust callback, the QP (rdma_create_qp),
 * DMA-mapped buffers and, for buffers the peer may access, fast-registration
 * MRs. It is opaque to Rust. ib_post_send()/ib_post_recv() and ib_alloc_cq()
 * are static inlines or macros, hence C; and struct ib_send_wr has no Rust
 * binding. The helpers check every index and length they are given.
 */
#include <linux/dma-mapping.h>
#include <linux/err.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>
#include <rdma/rdma_cm.h>

#include "cmecho_helpers.h"

struct cmecho_buf {
	void *cpu;
	u64 dma;
	u32 len;
	struct ib_mr *mr;	/* fast-registration MR, for remote access only */
};

struct cmecho_tag {
	struct ib_cqe cqe;
	struct cmecho_res *res;
	u32 tag;
};

struct cmecho_res {
	struct rdma_cm_id *id;
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	bool qp_created;
	cmecho_completion_fn done;
	void *ctx;
	u32 nbufs;
	u32 ntags;
	struct cmecho_buf *bufs;
	struct cmecho_tag *tags;
	/* The unsignaled IB_WR_REG_MR: completes only when it fails. */
	struct ib_cqe reg_cqe;
};

static void cmecho_wc_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct cmecho_tag *t = container_of(wc->wr_cqe, struct cmecho_tag, cqe);

	t->res->done(t->res->ctx, t->tag, wc->status, wc->byte_len);
}

/* A failed (or flushed) memory registration, reported as tag CMECHO_TAG_REG. */
static void cmecho_reg_done(struct ib_cq *cq, struct ib_wc *wc)
{
	struct cmecho_res *res = container_of(wc->wr_cqe, struct cmecho_res, reg_cqe);

	if (wc->status != IB_WC_SUCCESS)
		res->done(res->ctx, CMECHO_TAG_REG, wc->status, 0);
}

struct cmecho_res *cmecho_res_create(struct rdma_cm_id *id, cmecho_completion_fn done,
				     void *ctx, u32 ntags, u32 nbufs, u32 max_send_wr,
				     u32 max_recv_wr)
{
	struct ib_qp_init_attr init = {};
	struct cmecho_res *res;
	u32 i;
	int ret;

	if (!id->device)
		return ERR_PTR(-ENODEV);
	res = kzalloc(sizeof(*res), GFP_KERNEL);
	if (!res)
		return ERR_PTR(-ENOMEM);
	res->id = id;
	res->dev = id->device;
	res->done = done;
	res->ctx = ctx;
	res->reg_cqe.done = cmecho_reg_done;
	res->nbufs = nbufs;
	res->ntags = ntags;
	res->bufs = kcalloc(nbufs, sizeof(*res->bufs), GFP_KERNEL);
	res->tags = kcalloc(ntags, sizeof(*res->tags), GFP_KERNEL);
	if (!res->bufs || !res->tags) {
		ret = -ENOMEM;
		goto err_free;
	}
	for (i = 0; i < ntags; i++) {
		res->tags[i].cqe.done = cmecho_wc_done;
		res->tags[i].res = res;
		res->tags[i].tag = i;
	}

	res->pd = ib_alloc_pd(res->dev, 0);
	if (IS_ERR(res->pd)) {
		ret = PTR_ERR(res->pd);
		res->pd = NULL;
		goto err_free;
	}
	res->cq = ib_alloc_cq(res->dev, res, max_send_wr + max_recv_wr + 2, 0, IB_POLL_WORKQUEUE);
	if (IS_ERR(res->cq)) {
		ret = PTR_ERR(res->cq);
		res->cq = NULL;
		goto err_free;
	}

	init.qp_type = IB_QPT_RC;
	init.sq_sig_type = IB_SIGNAL_REQ_WR;
	init.send_cq = res->cq;
	init.recv_cq = res->cq;
	/* One more in each queue for the drain work requests of ib_drain_qp(). */
	init.cap.max_send_wr = max_send_wr + 1;
	init.cap.max_recv_wr = max_recv_wr + 1;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.cap.max_rdma_ctxs = 0;
	ret = rdma_create_qp(id, res->pd, &init);
	if (ret)
		goto err_free;
	res->qp_created = true;
	return res;

err_free:
	cmecho_res_destroy(res);
	return ERR_PTR(ret);
}

/*
 * Drains and destroys the QP, then frees MRs, buffers, CQ and PD, in that order.
 * After it returns no completion callback runs for @res any more. It must not be
 * called from one of @res's own completion callbacks (ib_drain_qp() waits for
 * them).
 */
void cmecho_res_destroy(struct cmecho_res *res)
{
	u32 i;

	if (res->qp_created) {
		ib_drain_qp(res->id->qp);
		rdma_destroy_qp(res->id);
	}
	for (i = 0; res->bufs && i < res->nbufs; i++) {
		struct cmecho_buf *b = &res->bufs[i];

		if (b->mr)
			ib_dereg_mr(b->mr);
		if (b->cpu) {
			ib_dma_unmap_single(res->dev, b->dma, b->len, DMA_BIDIRECTIONAL);
			kfree(b->cpu);
		}
	}
	if (res->cq)
		ib_free_cq(res->cq);
	if (res->pd)
		ib_dealloc_pd(res->pd);
	kfree(res->bufs);
	kfree(res->tags);
	kfree(res);
}

void *cmecho_res_ctx(struct cmecho_res *res)
{
	return res->ctx;
}

bool cmecho_wc_is_flush(int status)
{
	return status == IB_WC_WR_FLUSH_ERR;
}

const char *cmecho_wc_status_str(int status)
{
	return ib_wc_status_msg(status);
}

const char *cmecho_qp_state_str(u8 state)
{
	static const char *const names[] = {
		[IB_QPS_RESET] = "RESET", [IB_QPS_INIT] = "INIT", [IB_QPS_RTR] = "RTR",
		[IB_QPS_RTS] = "RTS", [IB_QPS_SQD] = "SQD", [IB_QPS_SQE] = "SQE",
		[IB_QPS_ERR] = "ERR",
	};

	return state < ARRAY_SIZE(names) && names[state] ? names[state] : "?";
}

/*
 * What the QP of @res really got, as the provider reports it. Out parameters: QP
 * number, state (enum ib_qp_state), ack timeout exponent, retry count, RNR retry
 * count, min RNR timer code, path MTU in bytes.
 */
int cmecho_res_query_qp(struct cmecho_res *res, u32 *qp_num, u8 *state, u8 *timeout,
			u8 *retry_cnt, u8 *rnr_retry, u8 *min_rnr_timer, u32 *path_mtu)
{
	struct ib_qp *qp = res->id->qp;
	struct ib_qp_init_attr init;
	struct ib_qp_attr attr;
	int ret;

	if (!qp)
		return -ENOTCONN;
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

static struct cmecho_buf *cmecho_buf_get(struct cmecho_res *res, u32 idx, u32 off, u32 len)
{
	struct cmecho_buf *b;

	if (idx >= res->nbufs)
		return NULL;
	b = &res->bufs[idx];
	if (!b->cpu || off > b->len || len > b->len - off)
		return NULL;
	return b;
}

int cmecho_res_buf_alloc(struct cmecho_res *res, u32 idx, u32 len, bool remote)
{
	struct cmecho_buf *b;
	int ret;

	if (idx >= res->nbufs || !len)
		return -EINVAL;
	b = &res->bufs[idx];
	if (b->cpu)
		return -EBUSY;
	b->cpu = kzalloc(len, GFP_KERNEL);
	if (!b->cpu)
		return -ENOMEM;
	b->dma = ib_dma_map_single(res->dev, b->cpu, len, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(res->dev, b->dma)) {
		kfree(b->cpu);
		b->cpu = NULL;
		return -ENOMEM;
	}
	b->len = len;
	if (remote) {
		u32 pages = DIV_ROUND_UP(len, PAGE_SIZE) + 1;

		b->mr = ib_alloc_mr(res->pd, IB_MR_TYPE_MEM_REG, pages);
		if (IS_ERR(b->mr)) {
			ret = PTR_ERR(b->mr);
			b->mr = NULL;
			return ret;
		}
	}
	return 0;
}

u8 *cmecho_res_buf_cpu(struct cmecho_res *res, u32 idx, u32 *len)
{
	struct cmecho_buf *b = cmecho_buf_get(res, idx, 0, 0);

	if (!b)
		return NULL;
	*len = b->len;
	return b->cpu;
}

void cmecho_res_buf_sync(struct cmecho_res *res, u32 idx, bool for_cpu)
{
	struct cmecho_buf *b = cmecho_buf_get(res, idx, 0, 0);

	if (!b)
		return;
	if (for_cpu)
		ib_dma_sync_single_for_cpu(res->dev, b->dma, b->len, DMA_BIDIRECTIONAL);
	else
		ib_dma_sync_single_for_device(res->dev, b->dma, b->len, DMA_BIDIRECTIONAL);
}

/*
 * Registers buffer @idx for remote access (read, or write when @remote_write)
 * with an IB_WR_REG_MR posted unsignaled ahead of whatever the caller posts
 * next; the send queue executes it first. Only a failure completes it: the
 * completion function then sees tag CMECHO_TAG_REG with the error status.
 * Returns the rkey and address to advertise.
 */
int cmecho_res_buf_reg(struct cmecho_res *res, u32 idx, bool remote_write, u32 *rkey,
		       u64 *addr)
{
	struct cmecho_buf *b = cmecho_buf_get(res, idx, 0, 0);
	struct ib_reg_wr wr = {};
	struct scatterlist sg;
	int n;

	if (!b || !b->mr)
		return -EINVAL;
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = b->dma;
	sg_dma_len(&sg) = b->len;
	n = ib_map_mr_sg(b->mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1)
		return n < 0 ? n : -EINVAL;
	ib_update_fast_reg_key(b->mr, ib_inc_rkey(b->mr->rkey));
	wr.wr.opcode = IB_WR_REG_MR;
	wr.wr.send_flags = 0;
	wr.wr.wr_cqe = &res->reg_cqe;
	wr.mr = b->mr;
	wr.key = b->mr->rkey;
	wr.access = IB_ACCESS_LOCAL_WRITE |
		    (remote_write ? IB_ACCESS_REMOTE_WRITE : IB_ACCESS_REMOTE_READ);
	n = ib_post_send(res->id->qp, &wr.wr, NULL);
	if (n)
		return n;
	*rkey = b->mr->rkey;
	*addr = b->mr->iova;
	return 0;
}

static struct cmecho_tag *cmecho_tag_get(struct cmecho_res *res, u32 tag)
{
	return tag < res->ntags ? &res->tags[tag] : NULL;
}

/* Looks up tag and buffer range and fills @sge; -EINVAL if either is bad. */
static int cmecho_prep(struct cmecho_res *res, u32 tag, u32 idx, u32 off, u32 len,
		       struct ib_sge *sge, struct ib_cqe **cqe)
{
	struct cmecho_buf *b = cmecho_buf_get(res, idx, off, len);
	struct cmecho_tag *t = cmecho_tag_get(res, tag);

	if (!b || !t)
		return -EINVAL;
	sge->addr = b->dma + off;
	sge->length = len;
	sge->lkey = res->pd->local_dma_lkey;
	*cqe = &t->cqe;
	return 0;
}

int cmecho_post_recv(struct cmecho_res *res, u32 tag, u32 idx, u32 off, u32 len)
{
	struct ib_recv_wr wr = {};
	struct ib_sge sge;
	int ret;

	ret = cmecho_prep(res, tag, idx, off, len, &sge, &wr.wr_cqe);
	if (ret)
		return ret;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ib_post_recv(res->id->qp, &wr, NULL);
}

int cmecho_post_send(struct cmecho_res *res, u32 tag, u32 idx, u32 off, u32 len)
{
	struct ib_send_wr wr = {};
	struct ib_sge sge;
	int ret;

	ret = cmecho_prep(res, tag, idx, off, len, &sge, &wr.wr_cqe);
	if (ret)
		return ret;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IB_WR_SEND;
	wr.send_flags = IB_SEND_SIGNALED;
	return ib_post_send(res->id->qp, &wr, NULL);
}

int cmecho_post_rdma(struct cmecho_res *res, u32 tag, bool write, u32 idx, u32 off,
		     u32 len, u64 raddr, u32 rkey)
{
	struct ib_rdma_wr wr = {};
	struct ib_sge sge;
	int ret;

	if (!len)
		return -EINVAL;
	ret = cmecho_prep(res, tag, idx, off, len, &sge, &wr.wr.wr_cqe);
	if (ret)
		return ret;
	wr.wr.sg_list = &sge;
	wr.wr.num_sge = 1;
	wr.wr.opcode = write ? IB_WR_RDMA_WRITE : IB_WR_RDMA_READ;
	wr.wr.send_flags = IB_SEND_SIGNALED;
	wr.remote_addr = raddr;
	wr.rkey = rkey;
	return ib_post_send(res->id->qp, &wr.wr, NULL);
}
