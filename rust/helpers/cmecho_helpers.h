/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C helpers of cmecho: the RDMA CM and verbs entry points the Rust side cannot
 * call directly (macros, static inlines, structs without Rust bindings). Only
 * scalars and opaque pointers cross the boundary.
 *
 * This header is the only declaration of the helpers: the build runs bindgen over
 * it (Kbuild) and rust/rdma/ffi.rs includes the result, so the Rust callers see
 * every prototype and enum value as it is here, and a change they no longer fit
 * fails the build (as does a CMECHO_TAG_REG other than rust/rdma/verbs.rs's
 * TAG_REG). Only cmecho_* and CMECHO_* names are taken. The one function Rust
 * implements, cmecho_rs_cm_event, is checked the other way: rust/rdma/id.rs
 * fails to build if its definition does not have the prototype below.
 */
#ifndef CMECHO_HELPERS_H
#define CMECHO_HELPERS_H

#include <linux/types.h>

struct net;
struct rdma_cm_id;
struct rdma_cm_event;
struct cmecho_res;
struct workqueue_struct;
struct dentry;
struct seq_file;

/* CM events as cmecho distinguishes them (mapped from enum rdma_cm_event_type). */
enum cmecho_ev {
	CMECHO_EV_OTHER = 0,
	CMECHO_EV_ADDR_RESOLVED = 1,
	CMECHO_EV_ADDR_ERROR = 2,
	CMECHO_EV_ROUTE_RESOLVED = 3,
	CMECHO_EV_ROUTE_ERROR = 4,
	CMECHO_EV_CONNECT_REQUEST = 5,
	CMECHO_EV_CONNECT_ERROR = 6,
	CMECHO_EV_UNREACHABLE = 7,
	CMECHO_EV_REJECTED = 8,
	CMECHO_EV_ESTABLISHED = 9,
	CMECHO_EV_DISCONNECTED = 10,
	CMECHO_EV_DEVICE_REMOVAL = 11,
	CMECHO_EV_TIMEWAIT_EXIT = 12,
};

/* Reject reasons as cmecho names them (mapped to enum ib_cm_rej_reason). */
enum cmecho_rej {
	CMECHO_REJ_CONSUMER = 0,
	CMECHO_REJ_VENDOR_OPTION = 1,
};

/* Implemented in Rust (rust/rdma/id.rs): every CM event of every cmecho id. */
int cmecho_rs_cm_event(void *ctx, struct rdma_cm_id *id, struct rdma_cm_event *event);

/* Implemented in Rust (rust/rdma/debugfs.rs): the text of a cmecho debugfs file. */
int cmecho_rs_debugfs_show(void *ctx, struct seq_file *m);

/* debugfs.c */
struct dentry *cmecho_debugfs_dir(const char *name, struct dentry *parent);
struct dentry *cmecho_debugfs_file(const char *name, struct dentry *parent, void *ctx);
void cmecho_debugfs_remove(struct dentry *dentry);
int cmecho_seq_write(struct seq_file *m, const char *s, size_t len);

/* cm.c */
int cmecho_probe_cm_id(u8 ack_timeout);
int cmecho_wq_init(void);
void cmecho_wq_exit(void);
struct workqueue_struct *cmecho_wq_get(void);
struct net *cmecho_net_get_current(void);
void cmecho_net_put(struct net *net);
u32 cmecho_net_inum(const struct net *net);
struct rdma_cm_id *cmecho_cm_create_id(struct net *net, void *ctx);
void cmecho_cm_set_context(struct rdma_cm_id *id, void *ctx);
void cmecho_cm_destroy_id(struct rdma_cm_id *id);
int cmecho_parse_addr(struct net *net, const char *addr);
int cmecho_cm_resolve_addr(struct rdma_cm_id *id, struct net *net, const char *addr,
			   u16 port, int timeout_ms);
int cmecho_cm_listen(struct rdma_cm_id *id, struct net *net, const char *addr, u16 port,
		     int backlog);
int cmecho_cm_resolve_route(struct rdma_cm_id *id, int timeout_ms);
int cmecho_cm_set_ack_timeout(struct rdma_cm_id *id, u8 timeout);
int cmecho_cm_set_min_rnr_timer(struct rdma_cm_id *id, u8 timer);
void cmecho_cm_set_tos(struct rdma_cm_id *id, u8 tos);
int cmecho_cm_connect(struct rdma_cm_id *id, u8 resp_res, u8 init_depth, u8 retry,
		      u8 rnr_retry, u32 ece_vendor_id, u32 ece_attr_mod);
int cmecho_cm_accept(struct rdma_cm_id *id, u8 resp_res, u8 init_depth, u8 rnr_retry,
		     u32 ece_vendor_id, u32 ece_attr_mod);
int cmecho_cm_reject(struct rdma_cm_id *id, u8 reason);
int cmecho_cm_disconnect(struct rdma_cm_id *id);
int cmecho_ev_type(const struct rdma_cm_event *event);
int cmecho_ev_status(const struct rdma_cm_event *event);
u32 cmecho_ev_ece_vendor_id(const struct rdma_cm_event *event);
u32 cmecho_ev_ece_attr_mod(const struct rdma_cm_event *event);
u8 cmecho_ev_initiator_depth(const struct rdma_cm_event *event);
u8 cmecho_ev_responder_resources(const struct rdma_cm_event *event);
const char *cmecho_reject_msg(struct rdma_cm_id *id, int status);
int cmecho_cm_peer_addr(struct rdma_cm_id *id, char *buf, int len);
int cmecho_cm_route_plt(struct rdma_cm_id *id);
int cmecho_cm_route_tclass(struct rdma_cm_id *id);

/* verbs.c */
/* The tag of a failed memory registration (cmecho_res_buf_reg). */
#define CMECHO_TAG_REG 0xffffffffU
typedef void (*cmecho_completion_fn)(void *ctx, u32 tag, int status, u32 byte_len);
struct cmecho_res *cmecho_res_create(struct rdma_cm_id *id, cmecho_completion_fn done,
				     void *ctx, u32 ntags, u32 nbufs, u32 max_send_wr,
				     u32 max_recv_wr);
void cmecho_res_destroy(struct cmecho_res *res);
void *cmecho_res_ctx(struct cmecho_res *res);
bool cmecho_wc_is_flush(int status);
const char *cmecho_wc_status_str(int status);
const char *cmecho_qp_state_str(u8 state);
int cmecho_res_query_qp(struct cmecho_res *res, u32 *qp_num, u8 *state, u8 *timeout,
			u8 *retry_cnt, u8 *rnr_retry, u8 *min_rnr_timer, u32 *path_mtu);
int cmecho_res_buf_alloc(struct cmecho_res *res, u32 idx, u32 len, bool remote);
u8 *cmecho_res_buf_cpu(struct cmecho_res *res, u32 idx, u32 *len);
void cmecho_res_buf_sync(struct cmecho_res *res, u32 idx, bool for_cpu);
int cmecho_res_buf_reg(struct cmecho_res *res, u32 idx, bool remote_write, u32 *rkey,
		       u64 *addr);
int cmecho_post_recv(struct cmecho_res *res, u32 tag, u32 idx, u32 off, u32 len);
int cmecho_post_send(struct cmecho_res *res, u32 tag, u32 idx, u32 off, u32 len);
int cmecho_post_rdma(struct cmecho_res *res, u32 tag, bool write, u32 idx, u32 off,
		     u32 len, u64 raddr, u32 rkey);

#endif /* CMECHO_HELPERS_H */
