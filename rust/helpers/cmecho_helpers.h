/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of cmecho: the RDMA CM and verbs entry points the Rust side cannot
 * call directly (macros, static inlines, fields of structs without a Rust
 * layout). Scalars and pointers cross the boundary; the structs Rust lays out
 * (events, work completions and requests, the id, the QP's attributes, the
 * connection parameters) it takes from the kernel's headers. The kernel's exported
 * functions, enums and plain structs need no helper: bindgen takes them from the
 * kernel's headers (cmecho_bindgen.h), and Rust calls and builds them itself.
 *
 * This header is the only declaration of the helpers: the build runs bindgen over
 * it (Kbuild) and rust/rdma/ffi.rs includes the result, so the Rust callers see
 * every prototype and enum value as it is here, and a change they no longer fit
 * fails the build. Of this header only cmecho_* names are taken
 * (rust/helpers/cmecho_bindgen.h adds the kernel's). The two functions Rust
 * implements, cmecho_rs_cm_event and cmecho_rs_debugfs_show, are checked the
 * other way: rust/rdma/id.rs and debugfs.rs fail to build if a definition does
 * not have the prototype below.
 */
#ifndef CMECHO_HELPERS_H
#define CMECHO_HELPERS_H

#include <linux/types.h>

struct net;
struct rdma_cm_id;
struct rdma_cm_event;
struct ib_device;
struct ib_pd;
struct ib_cq;
struct ib_qp;
struct ib_mr;
struct ib_cqe;
struct ib_recv_wr;
struct ib_send_wr;
struct workqueue_struct;
struct work_struct;
struct dentry;
struct seq_file;

/* Implemented in Rust (rust/rdma/id.rs): every CM event of every cmecho id. */
int cmecho_rs_cm_event(void *ctx, struct rdma_cm_id *id, struct rdma_cm_event *event);

/* Implemented in Rust (rust/rdma/debugfs.rs): the text of a cmecho debugfs file. */
int cmecho_rs_debugfs_show(void *ctx, struct seq_file *m);

/* debugfs.c */
struct dentry *cmecho_debugfs_dir(const char *name, struct dentry *parent);
struct dentry *cmecho_debugfs_file(const char *name, struct dentry *parent, void *ctx);
void cmecho_debugfs_remove(struct dentry *dentry);

/* cm.c */
struct workqueue_struct *cmecho_wq_alloc(const char *name, unsigned int flags,
					 int max_active);
bool cmecho_log_ratelimit(void);
struct net *cmecho_net_get_current(void);
void cmecho_net_put(struct net *net);
u32 cmecho_net_inum(const struct net *net);
/* @ps: enum rdma_ucm_port_space; @qp_type: enum ib_qp_type. */
struct rdma_cm_id *cmecho_cm_create_id(struct net *net, void *ctx, u32 ps, u32 qp_type);
int cmecho_cm_peer_addr(struct rdma_cm_id *id, char *buf, int len);
int cmecho_cm_route_plt(struct rdma_cm_id *id);
int cmecho_cm_route_tclass(struct rdma_cm_id *id);

/* verbs.c */
u32 cmecho_qp_num(const struct ib_qp *qp);
struct ib_pd *cmecho_pd_alloc(struct ib_device *dev);
/* @poll_ctx: enum ib_poll_context. */
struct ib_cq *cmecho_cq_alloc(struct ib_device *dev, u32 nr_cqe, u32 poll_ctx);
struct ib_cq *cmecho_cq_alloc_polled(struct ib_device *dev, u32 nr_cqe,
				     void (*handler)(struct ib_cq *cq, void *ctx), void *ctx);
int cmecho_cq_arm(struct ib_cq *cq);
void cmecho_work_init(struct work_struct *work, void (*func)(struct work_struct *work));
bool cmecho_queue_work(struct workqueue_struct *wq, struct work_struct *work);
bool cmecho_need_resched(void);
void cmecho_bh_disable(void);
void cmecho_bh_enable(void);
int cmecho_dma_map(struct ib_device *dev, void *cpu, u32 len, u64 *dma);
void cmecho_dma_unmap(struct ib_device *dev, u64 dma, u32 len);
void cmecho_dma_sync(struct ib_device *dev, u64 dma, u32 len, bool for_cpu);
/* @access: enum ib_access_flags. */
int cmecho_post_reg(struct ib_qp *qp, struct ib_mr *mr, u64 dma, u32 len, u32 access,
		    struct ib_cqe *cqe, u32 *rkey, u64 *addr);
int cmecho_post_recv(struct ib_qp *qp, const struct ib_recv_wr *wr);
int cmecho_post_send(struct ib_qp *qp, const struct ib_send_wr *wr);

#endif /* CMECHO_HELPERS_H */
