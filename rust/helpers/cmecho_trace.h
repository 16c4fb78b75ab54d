/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cmecho's tracepoints (Documentation/cmecho.rst, "Tracepoints"). trace.c
 * defines them (with the functions Rust calls, rust_do_trace_*); Rust reads the
 * declarations through bindgen (cmecho_bindgen.h) and tests each tracepoint's
 * static key itself (rust/rdma/trace.rs), so a disabled event costs one
 * patched-out jump and no call.
 *
 * Strings are NUL-terminated and copied into the event: the endpoint's name
 * (a configfs directory's, or what a ULP of the layer calls itself), and the
 * names of states, inputs and steps, which are static.
 * A connection is the number the layer gave it at creation.
 */
#undef TRACE_SYSTEM
#ifdef CMECHO_TRACE_SYSTEM
/* A module other than cmecho.ko that builds the layer: its own events. */
#define TRACE_SYSTEM CMECHO_TRACE_SYSTEM
#else
#define TRACE_SYSTEM cmecho
#endif

#if !defined(_CMECHO_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _CMECHO_TRACE_H

#include <linux/tracepoint.h>

/* A connection's state changed: from, to, and what changed it. */
TRACE_EVENT(cmecho_conn_state,
	TP_PROTO(const char *endpoint, u32 conn, const char *from,
		 const char *to, const char *input, int status),
	TP_ARGS(endpoint, conn, from, to, input, status),
	TP_STRUCT__entry(
		__string(endpoint, endpoint)
		__field(u32, conn)
		__string(from, from)
		__string(to, to)
		__string(input, input)
		__field(int, status)
	),
	TP_fast_assign(
		__assign_str(endpoint);
		__entry->conn = conn;
		__assign_str(from);
		__assign_str(to);
		__assign_str(input);
		__entry->status = status;
	),
	TP_printk("endpoint=%s conn=%u from=%s to=%s input=%s status=%d",
		  __get_str(endpoint), __entry->conn, __get_str(from),
		  __get_str(to), __get_str(input), __entry->status)
);

/*
 * One step of a connection's setup ended (active side: each CM call until its
 * event; passive side: the accept), after duration_us, with err 0 or a
 * negative errno.
 */
TRACE_EVENT(cmecho_cm_step,
	TP_PROTO(const char *endpoint, u32 conn, const char *step,
		 u64 duration_us, int err),
	TP_ARGS(endpoint, conn, step, duration_us, err),
	TP_STRUCT__entry(
		__string(endpoint, endpoint)
		__field(u32, conn)
		__string(step, step)
		__field(u64, duration_us)
		__field(int, err)
	),
	TP_fast_assign(
		__assign_str(endpoint);
		__entry->conn = conn;
		__assign_str(step);
		__entry->duration_us = duration_us;
		__entry->err = err;
	),
	TP_printk("endpoint=%s conn=%u step=%s duration_us=%llu err=%d",
		  __get_str(endpoint), __entry->conn, __get_str(step),
		  __entry->duration_us, __entry->err)
);

/*
 * A native echo client detected its peer's failure: a work completion failed
 * (wc_status, enum ib_wc_status) detect_us after the last one that
 * succeeded, on a QP with this ack timeout and retry count (read back).
 */
TRACE_EVENT(cmecho_detect,
	TP_PROTO(const char *endpoint, u32 conn, u8 ack_timeout,
		 u8 retry_count, u64 detect_us, u32 wc_status),
	TP_ARGS(endpoint, conn, ack_timeout, retry_count, detect_us,
		wc_status),
	TP_STRUCT__entry(
		__string(endpoint, endpoint)
		__field(u32, conn)
		__field(u8, ack_timeout)
		__field(u8, retry_count)
		__field(u64, detect_us)
		__field(u32, wc_status)
	),
	TP_fast_assign(
		__assign_str(endpoint);
		__entry->conn = conn;
		__entry->ack_timeout = ack_timeout;
		__entry->retry_count = retry_count;
		__entry->detect_us = detect_us;
		__entry->wc_status = wc_status;
	),
	TP_printk("endpoint=%s conn=%u ack_timeout=%u retry_count=%u detect_us=%llu wc_status=%u",
		  __get_str(endpoint), __entry->conn, __entry->ack_timeout,
		  __entry->retry_count, __entry->detect_us, __entry->wc_status)
);

/* An echo client's message came back: its size and round-trip time. */
TRACE_EVENT(cmecho_echo_rtt,
	TP_PROTO(const char *endpoint, u32 conn, u32 size, u64 rtt_ns),
	TP_ARGS(endpoint, conn, size, rtt_ns),
	TP_STRUCT__entry(
		__string(endpoint, endpoint)
		__field(u32, conn)
		__field(u32, size)
		__field(u64, rtt_ns)
	),
	TP_fast_assign(
		__assign_str(endpoint);
		__entry->conn = conn;
		__entry->size = size;
		__entry->rtt_ns = rtt_ns;
	),
	TP_printk("endpoint=%s conn=%u size=%u rtt_ns=%llu",
		  __get_str(endpoint), __entry->conn, __entry->size,
		  __entry->rtt_ns)
);

/*
 * A connection was released: how long each part took, in us. disconnect_us:
 * rdma_disconnect (nothing when the connection was not connected);
 * destroy_qp_us: rdma_destroy_qp; free_us: the CQ (ib_free_cq waits for its
 * completion work), the buffers, their MRs and the PD; destroy_id_us:
 * rdma_destroy_id, which waits for the id's CM handlers. A part the
 * connection did not have (no QP yet) is 0.
 */
TRACE_EVENT(cmecho_release,
	TP_PROTO(const char *endpoint, u32 conn, u64 disconnect_us,
		 u64 destroy_qp_us, u64 free_us, u64 destroy_id_us),
	TP_ARGS(endpoint, conn, disconnect_us, destroy_qp_us, free_us,
		destroy_id_us),
	TP_STRUCT__entry(
		__string(endpoint, endpoint)
		__field(u32, conn)
		__field(u64, disconnect_us)
		__field(u64, destroy_qp_us)
		__field(u64, free_us)
		__field(u64, destroy_id_us)
	),
	TP_fast_assign(
		__assign_str(endpoint);
		__entry->conn = conn;
		__entry->disconnect_us = disconnect_us;
		__entry->destroy_qp_us = destroy_qp_us;
		__entry->free_us = free_us;
		__entry->destroy_id_us = destroy_id_us;
	),
	TP_printk("endpoint=%s conn=%u disconnect_us=%llu destroy_qp_us=%llu free_us=%llu destroy_id_us=%llu",
		  __get_str(endpoint), __entry->conn, __entry->disconnect_us,
		  __entry->destroy_qp_us, __entry->free_us,
		  __entry->destroy_id_us)
);

#endif /* _CMECHO_TRACE_H */

/* Outside the guard: read again by define_trace.h in trace.c. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE cmecho_trace
#include <trace/define_trace.h>
