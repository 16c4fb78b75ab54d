// SPDX-License-Identifier: GPL-2.0
/*
 * hostile_peer: a misbehaving echo-mode peer for cmecho's selftests.
 *
 *   hostile_peer server ADDR PORT MODE [SECONDS [LAST]]
 *
 * Listens on ADDR:PORT (RDMA_PS_TCP), accepts one connection and answers each
 * message a cmecho echo-mode client sends, the wrong way:
 *
 *   dup          every echo is sent twice
 *   unsolicited  a message is sent as soon as the connection is up, before any
 *                echo is asked for, then every message is echoed once
 *   short        every echo is one byte shorter than the message
 *   corrupt      every echo has its last byte flipped
 *   good         every message is echoed once, as sent (the control)
 *   burst        every message is echoed once, and the LAST-th one (default
 *                20) is followed at once by four more copies of its echo,
 *                arriving right after the client has what it asked for
 *   silent       no message is echoed: each is received (and so acknowledged
 *                by the device) and dropped; the first prints
 *                "hostile_peer: silent: got a message, not echoed"
 *
 * It exits 0 once the connection ended (the peer disconnected), 1 on a setup
 * error, 2 when nothing happened for SECONDS (default 120).
 *
 *   hostile_peer client ADDR PORT vanish N
 *
 * N times: sends a connect request, waits for the server's reply (REP), and
 * goes away without the RTU that would establish the connection: the server's
 * new connection fails before it is ever established. Prints how many replies
 * and rejections it got; exits 0 when every request got an answer.
 *
 *   hostile_peer client ADDR PORT hold N SECONDS LO HI
 *
 * Sends N connect requests at once, each without a QP, so that the server's
 * reply comes to this program, which never answers it with the RTU and keeps
 * its ids: the server's N connections stay accepted and not established for as
 * long as the server lets them (the CM alone would wait as long as the request
 * asks: about 65 s). Prints how many replies it got, how many of those the
 * server rejected, and the shortest and longest wait from a reply to its
 * reject; exits 0 when every request got a reply that the server rejected
 * between LO and HI seconds after it (decimal fractions allowed), all within
 * SECONDS; 2 when not; 1 on a setup error.
 *
 * Its requests carry the hello of a client of 64 bytes, depth 1 (see below).
 *
 *   hostile_peer client ADDR PORT hello MODE
 *
 * Sends one connect request to an echo-mode server with the given hello (the
 * 16 bytes of private data a cmecho echo client states its size and depth in:
 * "CMEC", version 1, kind 1, two zero bytes, size and depth, big endian):
 *
 *   good    a size of 64 and a depth of 1 (the control)
 *   none    no private data at all
 *   v2      version 2
 *   zero    a size of 0
 *   big     a size of 65536 and a depth of 256
 *
 * Prints the answer: "replied" (the server accepted; this program then goes
 * away), or "rejected (reason R)" followed by the refusal the reject carries,
 * decoded ("refused 0xW: size S depth D", W the refused bits), or "no
 * refusal". Exits 0 on an answer, 2 on none within 30 s, 1 on a setup error.
 *
 *   hostile_peer rping ADDR PORT MODE
 *
 * Connects to an rping-mode server as an rping client would, then breaks the
 * protocol with its first message (16 bytes: buffer address, rkey and size, big
 * endian; see RPING-PROTOCOL):
 *
 *   short   a message of 15 bytes
 *   long    a message of 17 bytes
 *   zero    a size of 0
 *   huge    a size of 1 MiB (rping allows at most 64 KiB)
 *   badkey  a valid buffer with a wrong rkey: the server's RDMA READ fails
 *   twice   two valid messages back to back, the second before any answer;
 *           the server may end the connection (a message out of turn) or
 *           carry on: after 2 s it disconnects itself
 *   idle    no message at all: once established it prints "hostile_peer:
 *           rping idle: established" and waits up to 60 s for the server to
 *           end the connection (its request carries an echo client's hello,
 *           so an echo-mode server takes it too)
 *
 * Prints what happened; exits 0 when the server ended the connection (for
 * twice: either way), 2 when it did not within 30 s, 1 on a setup error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define SLOTS 16
#define BUF_SIZE 65536

enum mode { DUP, UNSOLICITED, SHORT, CORRUPT, GOOD, BURST, SILENT };

struct peer {
	enum mode mode;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;		/* SLOTS receive buffers, then SLOTS send buffers */
	unsigned int next_send;
	unsigned long received, sent, last;
};

/* The hello of an echo client of SIZE bytes, depth DEPTH, version VERSION. */
static void hello(struct rdma_conn_param *cp, unsigned char *b, unsigned int version,
		  uint32_t size, uint32_t depth)
{
	memset(b, 0, 16);
	memcpy(b, "CMEC", 4);
	b[4] = version;
	b[5] = 1;
	size = htonl(size);
	depth = htonl(depth);
	memcpy(b + 8, &size, 4);
	memcpy(b + 12, &depth, 4);
	cp->private_data = b;
	cp->private_data_len = 16;
}

static void die(const char *what)
{
	fprintf(stderr, "hostile_peer: %s: %s\n", what, strerror(errno));
	exit(1);
}

static char *rbuf(struct peer *p, unsigned int k)
{
	return p->buf + (size_t)k * BUF_SIZE;
}

static char *sbuf(struct peer *p, unsigned int k)
{
	return p->buf + (size_t)(SLOTS + k) * BUF_SIZE;
}

static void post_recv(struct peer *p, unsigned int k)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)rbuf(p, k), .length = BUF_SIZE, .lkey = p->mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = k, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(p->id->qp, &wr, &bad))
		die("ibv_post_recv");
}

/* Sends len bytes of data from the next send slot. */
static void post_send(struct peer *p, const char *data, unsigned int len)
{
	unsigned int k = p->next_send++ % SLOTS;
	struct ibv_sge sge = {
		.addr = (uintptr_t)sbuf(p, k), .length = len, .lkey = p->mr->lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = SLOTS + k, .sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;

	memcpy(sbuf(p, k), data, len);
	if (ibv_post_send(p->id->qp, &wr, &bad))
		die("ibv_post_send");
	p->sent++;
}

static void answer(struct peer *p, unsigned int k, unsigned int len)
{
	char *m = rbuf(p, k);

	switch (p->mode) {
	case DUP:
		post_send(p, m, len);
		post_send(p, m, len);
		break;
	case SHORT:
		post_send(p, m, len ? len - 1 : 0);
		break;
	case CORRUPT:
		if (len)
			m[len - 1] ^= 0x5a;
		post_send(p, m, len);
		break;
	case BURST:
		post_send(p, m, len);
		if (p->received == p->last) {
			int i;

			for (i = 0; i < 4; i++)
				post_send(p, m, len);
		}
		break;
	case SILENT:
		if (p->received == 1) {
			printf("hostile_peer: silent: got a message, not echoed\n");
			fflush(stdout);
		}
		break;
	default:
		post_send(p, m, len);
	}
	post_recv(p, k);
}

static void setup_conn(struct peer *p, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr qa = { 0 };
	struct rdma_conn_param cp = { 0 };
	unsigned int k;

	p->id = id;
	p->pd = ibv_alloc_pd(id->verbs);
	if (!p->pd)
		die("ibv_alloc_pd");
	p->cq = ibv_create_cq(id->verbs, 4 * SLOTS, NULL, NULL, 0);
	if (!p->cq)
		die("ibv_create_cq");
	p->buf = calloc(2 * SLOTS, BUF_SIZE);
	if (!p->buf)
		die("calloc");
	p->mr = ibv_reg_mr(p->pd, p->buf, (size_t)2 * SLOTS * BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	if (!p->mr)
		die("ibv_reg_mr");
	qa.send_cq = p->cq;
	qa.recv_cq = p->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 2 * SLOTS;
	qa.cap.max_recv_wr = SLOTS;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, p->pd, &qa))
		die("rdma_create_qp");
	for (k = 0; k < SLOTS; k++)
		post_recv(p, k);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(id, &cp))
		die("rdma_accept");
}

static void poll_cq(struct peer *p)
{
	struct ibv_wc wc[16];
	int n, i;

	while ((n = ibv_poll_cq(p->cq, 16, wc)) > 0) {
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				continue;	/* flushed at the end, or the peer failed us */
			if (wc[i].wr_id < SLOTS) {
				p->received++;
				answer(p, wc[i].wr_id, wc[i].byte_len);
			}
		}
	}
}

static int parse_addr(const char *addr, const char *port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		ss->ss_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons(atoi(port));
	} else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		ss->ss_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons(atoi(port));
	} else {
		fprintf(stderr, "hostile_peer: bad address %s\n", addr);
		return -1;
	}
	return 0;
}

/* Waits up to 30 s for the next CM event on ch; returns its type, or -1. */
static int next_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	int i, type;

	for (i = 0; i < 30000; i++) {
		if (!rdma_get_cm_event(ch, &ev)) {
			type = ev->event;
			rdma_ack_cm_event(ev);
			return type;
		}
		if (errno != EAGAIN)
			die("rdma_get_cm_event");
		usleep(1000);
	}
	return -1;
}

/* Connect requests that never finish: see the comment at the top. */
static int vanish(const char *addr, const char *port, int n)
{
	int i, replies = 0, rejects = 0, ev;
	struct sockaddr_storage ss;

	if (parse_addr(addr, port, &ss))
		return 1;
	for (i = 0; i < n; i++) {
		struct rdma_event_channel *ch = rdma_create_event_channel();
		struct rdma_conn_param cp = { 0 };
		unsigned char hb[16];
		struct rdma_cm_id *id;

		if (!ch)
			die("rdma_create_event_channel");
		if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
			die("fcntl");
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 5000))
			die("rdma_resolve_addr");
		if (next_event(ch) != RDMA_CM_EVENT_ADDR_RESOLVED)
			die("address resolution");
		if (rdma_resolve_route(id, 5000))
			die("rdma_resolve_route");
		if (next_event(ch) != RDMA_CM_EVENT_ROUTE_RESOLVED)
			die("route resolution");
		/* No QP: the reply comes to us instead of being answered with an RTU. */
		cp.qp_num = 0x1234 + i;
		hello(&cp, hb, 1, 64, 1);
		cp.responder_resources = 1;
		cp.initiator_depth = 1;
		cp.retry_count = 7;
		cp.rnr_retry_count = 7;
		if (rdma_connect(id, &cp))
			die("rdma_connect");
		ev = next_event(ch);
		if (ev == RDMA_CM_EVENT_CONNECT_RESPONSE)
			replies++;
		else if (ev == RDMA_CM_EVENT_REJECTED)
			rejects++;
		else
			fprintf(stderr, "hostile_peer: request %d: event %d\n", i, ev);
		rdma_destroy_id(id);
		rdma_destroy_event_channel(ch);
	}
	printf("hostile_peer: %d requests: %d replies left without an RTU, %d rejected\n",
	       n, replies, rejects);
	return replies + rejects == n ? 0 : 1;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Connect requests whose replies are held: see the comment at the top. */
static int hold(const char *addr, const char *port, int n, int seconds, double lo, double hi)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id **ids = calloc(n, sizeof(*ids));
	double *replied = calloc(n, sizeof(*replied));
	int i, replies = 0, ended = 0, failed = 0, other = 0;
	double end, shortest = 1e9, longest = 0;
	struct sockaddr_storage ss;

	if (parse_addr(addr, port, &ss))
		return 1;
	if (!ch || !ids || !replied)
		die("setup");
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl");
	for (i = 0; i < n; i++) {
		if (rdma_create_id(ch, &ids[i], (void *)(long)i, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&ss, 5000))
			die("rdma_resolve_addr");
	}
	end = now_s() + seconds;
	while (ended + failed + other < n && now_s() < end) {
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		struct rdma_conn_param cp = { 0 };
		struct rdma_cm_event *ev;
		unsigned char hb[16];
		int type, status;

		if (rdma_get_cm_event(ch, &ev)) {
			if (errno != EAGAIN)
				die("rdma_get_cm_event");
			poll(&pfd, 1, 100);
			continue;
		}
		i = (long)ev->id->context;
		type = ev->event;
		status = ev->status;
		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(ids[i], 5000))
				die("rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			/* No QP: the reply comes to us, and no RTU answers it. */
			cp.qp_num = 0x2234 + i;
			hello(&cp, hb, 1, 64, 1);
			cp.responder_resources = 1;
			cp.initiator_depth = 1;
			cp.retry_count = 7;
			cp.rnr_retry_count = 7;
			if (rdma_connect(ids[i], &cp))
				die("rdma_connect");
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			replies++;
			replied[i] = now_s();
			break;
		case RDMA_CM_EVENT_REJECTED:
			if (replied[i] > 0) {
				double w = now_s() - replied[i];

				ended++;
				if (w > longest)
					longest = w;
				if (w < shortest)
					shortest = w;
				break;
			}
			/* fall through */
		default:
			if (replied[i] > 0) {
				other++;
				fprintf(stderr, "hostile_peer: request %d: event %d (status %d) after the reply\n",
					i, type, status);
			} else {
				failed++;
				fprintf(stderr, "hostile_peer: request %d: event %d before a reply\n",
					i, type);
			}
		}
	}
	printf("hostile_peer: hold: %d requests, %d replies held, %d rejected by the server after %.2f to %.2f s (wanted %.2f to %.2f), %d other ends, %d failed before a reply\n",
	       n, replies, ended, ended ? shortest : 0, longest, lo, hi, other, failed);
	for (i = 0; i < n; i++)
		rdma_destroy_id(ids[i]);
	rdma_destroy_event_channel(ch);
	free(ids);
	free(replied);
	return replies == n && ended == n && shortest >= lo && longest <= hi ? 0 : 2;
}

/* One connect request with a chosen hello: see the comment at the top. */
static int hello_client(const char *addr, const char *port, const char *mode)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param cp = { 0 };
	struct sockaddr_storage ss;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	unsigned char hb[16], r[16];
	double end;
	int type = -1, status = 0, rlen = 0;

	if (parse_addr(addr, port, &ss))
		return 1;
	if (!ch)
		die("rdma_create_event_channel");
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl");
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 5000))
		die("rdma_resolve_addr");
	if (next_event(ch) != RDMA_CM_EVENT_ADDR_RESOLVED)
		die("address resolution");
	if (rdma_resolve_route(id, 5000))
		die("rdma_resolve_route");
	if (next_event(ch) != RDMA_CM_EVENT_ROUTE_RESOLVED)
		die("route resolution");
	cp.qp_num = 0x3234;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (!strcmp(mode, "good"))
		hello(&cp, hb, 1, 64, 1);
	else if (!strcmp(mode, "v2"))
		hello(&cp, hb, 2, 64, 1);
	else if (!strcmp(mode, "zero"))
		hello(&cp, hb, 1, 0, 1);
	else if (!strcmp(mode, "big"))
		hello(&cp, hb, 1, 65536, 256);
	else if (strcmp(mode, "none")) {
		fprintf(stderr, "hostile_peer: unknown hello %s\n", mode);
		return 1;
	}
	if (rdma_connect(id, &cp))
		die("rdma_connect");
	end = now_s() + 30;
	while (type < 0 && now_s() < end) {
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };

		if (rdma_get_cm_event(ch, &ev)) {
			if (errno != EAGAIN)
				die("rdma_get_cm_event");
			poll(&pfd, 1, 100);
			continue;
		}
		type = ev->event;
		status = ev->status;
		if (type == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
		    ev->param.conn.private_data_len >= 16) {
			memcpy(r, ev->param.conn.private_data, 16);
			rlen = 16;
		}
		rdma_ack_cm_event(ev);
	}
	if (type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
		printf("hostile_peer: hello %s: replied\n", mode);
	} else if (type == RDMA_CM_EVENT_REJECTED) {
		uint32_t size, depth;

		printf("hostile_peer: hello %s: rejected (reason %d): ", mode, status);
		if (rlen && !memcmp(r, "CMEC", 4) && r[4] == 1 && r[5] == 2) {
			memcpy(&size, r + 8, 4);
			memcpy(&depth, r + 12, 4);
			printf("refused 0x%x: size %u depth %u\n", r[6], ntohl(size), ntohl(depth));
		} else {
			printf("no refusal\n");
		}
	} else {
		printf("hostile_peer: hello %s: event %d (status %d)\n", mode, type, status);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return type == RDMA_CM_EVENT_CONNECT_RESPONSE || type == RDMA_CM_EVENT_REJECTED ? 0 : 2;
}

/* The first message of an rping client: where its buffer is, and how big. */
static void rping_msg(char *m, uint64_t addr, uint32_t rkey, uint32_t size)
{
	uint32_t hi = htonl(addr >> 32), lo = htonl((uint32_t)addr);

	rkey = htonl(rkey);
	size = htonl(size);
	memcpy(m, &hi, 4);
	memcpy(m + 4, &lo, 4);
	memcpy(m + 8, &rkey, 4);
	memcpy(m + 12, &size, 4);
}

/* A protocol-breaking rping client: see the comment at the top. */
static int rping_client(const char *addr, const char *port, const char *mode)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { 0 };
	struct ibv_qp_init_attr qa = { 0 };
	struct sockaddr_storage ss;
	struct peer p = { 0 };
	char m[32];
	unsigned int len = 16, k;
	int ev, i;
	bool twice = !strcmp(mode, "twice"), idle = !strcmp(mode, "idle"), ended = false;
	unsigned char hb[16];

	if (parse_addr(addr, port, &ss))
		return 1;
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl");
	if (rdma_create_id(ch, &p.id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(p.id, NULL, (struct sockaddr *)&ss, 5000))
		die("rdma_resolve_addr");
	if (next_event(ch) != RDMA_CM_EVENT_ADDR_RESOLVED)
		die("address resolution");
	if (rdma_resolve_route(p.id, 5000))
		die("rdma_resolve_route");
	if (next_event(ch) != RDMA_CM_EVENT_ROUTE_RESOLVED)
		die("route resolution");
	p.pd = ibv_alloc_pd(p.id->verbs);
	if (!p.pd)
		die("ibv_alloc_pd");
	p.cq = ibv_create_cq(p.id->verbs, 4 * SLOTS, NULL, NULL, 0);
	if (!p.cq)
		die("ibv_create_cq");
	p.buf = calloc(2 * SLOTS, BUF_SIZE);
	if (!p.buf)
		die("calloc");
	p.mr = ibv_reg_mr(p.pd, p.buf, (size_t)2 * SLOTS * BUF_SIZE,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!p.mr)
		die("ibv_reg_mr");
	qa.send_cq = p.cq;
	qa.recv_cq = p.cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 2 * SLOTS;
	qa.cap.max_recv_wr = SLOTS;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(p.id, p.pd, &qa))
		die("rdma_create_qp");
	for (k = 0; k < SLOTS; k++)
		post_recv(&p, k);
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (idle)
		hello(&cp, hb, 1, 64, 1);
	if (rdma_connect(p.id, &cp))
		die("rdma_connect");
	ev = next_event(ch);
	if (ev != RDMA_CM_EVENT_ESTABLISHED) {
		fprintf(stderr, "hostile_peer: rping %s: not established (event %d)\n", mode, ev);
		return 1;
	}
	if (idle) {
		printf("hostile_peer: rping idle: established\n");
		fflush(stdout);
	}
	/* The source buffer: the first send slot's memory, 64 bytes of it. */
	rping_msg(m, (uintptr_t)sbuf(&p, SLOTS - 1), p.mr->rkey, 64);
	if (!strcmp(mode, "short")) {
		len = 15;
	} else if (!strcmp(mode, "long")) {
		len = 17;
	} else if (!strcmp(mode, "zero")) {
		rping_msg(m, (uintptr_t)sbuf(&p, SLOTS - 1), p.mr->rkey, 0);
	} else if (!strcmp(mode, "huge")) {
		rping_msg(m, (uintptr_t)sbuf(&p, SLOTS - 1), p.mr->rkey, 1 << 20);
	} else if (!strcmp(mode, "badkey")) {
		rping_msg(m, (uintptr_t)sbuf(&p, SLOTS - 1), p.mr->rkey ^ 0x5a5a00, 64);
	} else if (!twice && !idle) {
		fprintf(stderr, "hostile_peer: unknown rping mode %s\n", mode);
		return 1;
	}
	if (!idle)
		post_send(&p, m, len);
	if (twice)
		post_send(&p, m, len);
	/* Up to 30 s (2 s for twice, 60 s idle) for the server to end the connection. */
	for (i = 0; i < (twice ? 2000 : idle ? 60000 : 30000) && !ended; i++) {
		struct ibv_wc wc[16];
		struct rdma_cm_event *e;

		while (ibv_poll_cq(p.cq, 16, wc) > 0)
			;	/* answers, errors and flushes alike: only the end counts */
		if (!rdma_get_cm_event(ch, &e)) {
			ended = e->event == RDMA_CM_EVENT_DISCONNECTED;
			rdma_ack_cm_event(e);
			continue;
		}
		if (errno != EAGAIN)
			die("rdma_get_cm_event");
		usleep(1000);
	}
	if (twice)
		printf("hostile_peer: rping twice: %s after 2 s\n",
		       ended ? "the server disconnected" : "still connected");
	else
		printf("hostile_peer: rping %s: %s\n", mode,
		       ended ? "the server ended the connection" : "still connected at the end");
	rdma_disconnect(p.id);
	rdma_destroy_qp(p.id);
	ibv_dereg_mr(p.mr);
	ibv_destroy_cq(p.cq);
	ibv_dealloc_pd(p.pd);
	free(p.buf);
	rdma_destroy_id(p.id);
	rdma_destroy_event_channel(ch);
	if (twice)
		return 0;
	return ended ? 0 : 2;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		"dup", "unsolicited", "short", "corrupt", "good", "burst", "silent"
	};
	struct rdma_event_channel *ch;
	struct sockaddr_storage ss;
	struct rdma_cm_id *listen_id;
	struct rdma_cm_event *ev;
	struct peer p = { 0 };
	time_t idle_since;
	int seconds = 120;
	unsigned int i;
	bool done = false;

	if (argc == 6 && !strcmp(argv[1], "client") && !strcmp(argv[4], "vanish"))
		return vanish(argv[2], argv[3], atoi(argv[5]));
	if (argc == 9 && !strcmp(argv[1], "client") && !strcmp(argv[4], "hold"))
		return hold(argv[2], argv[3], atoi(argv[5]), atoi(argv[6]), atof(argv[7]),
			    atof(argv[8]));
	if (argc == 6 && !strcmp(argv[1], "client") && !strcmp(argv[4], "hello"))
		return hello_client(argv[2], argv[3], argv[5]);
	if (argc == 5 && !strcmp(argv[1], "rping"))
		return rping_client(argv[2], argv[3], argv[4]);
	if (argc < 5 || strcmp(argv[1], "server")) {
		fprintf(stderr, "usage: %s server ADDR PORT dup|unsolicited|short|corrupt|good|burst|silent [SECONDS [LAST]]\n"
			"       %s client ADDR PORT vanish N\n"
			"       %s client ADDR PORT hold N SECONDS LO HI\n"
			"       %s client ADDR PORT hello good|none|v2|zero|big\n"
			"       %s rping ADDR PORT short|long|zero|huge|badkey|twice|idle\n",
			argv[0], argv[0], argv[0], argv[0], argv[0]);
		return 1;
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(argv[4], names[i]))
			break;
	if (i == sizeof(names) / sizeof(names[0])) {
		fprintf(stderr, "hostile_peer: unknown mode %s\n", argv[4]);
		return 1;
	}
	p.mode = i;
	if (argc > 5)
		seconds = atoi(argv[5]);
	p.last = argc > 6 ? strtoul(argv[6], NULL, 0) : 20;

	if (parse_addr(argv[2], argv[3], &ss))
		return 1;

	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &listen_id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listen_id, (struct sockaddr *)&ss))
		die("rdma_bind_addr");
	if (rdma_listen(listen_id, 4))
		die("rdma_listen");
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		die("fcntl");
	printf("hostile_peer: listening on %s port %s, mode %s\n", argv[2], argv[3], argv[4]);
	fflush(stdout);

	idle_since = time(NULL);
	while (!done) {
		if (p.cq)
			poll_cq(&p);
		if (rdma_get_cm_event(ch, &ev)) {
			if (errno != EAGAIN)
				die("rdma_get_cm_event");
			if (time(NULL) - idle_since > seconds) {
				fprintf(stderr, "hostile_peer: nothing happened for %d s\n", seconds);
				return 2;
			}
			usleep(1000);
			continue;
		}
		idle_since = time(NULL);
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			if (p.id) {
				rdma_reject(ev->id, NULL, 0);	/* one connection at a time */
				break;
			}
			setup_conn(&p, ev->id);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (p.mode == UNSOLICITED) {
				char junk[64];

				memset(junk, 0xa5, sizeof(junk));
				post_send(&p, junk, sizeof(junk));
			}
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
			if (ev->id == p.id)
				done = true;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
	printf("hostile_peer: connection ended: %lu messages received, %lu sent\n",
	       p.received, p.sent);
	rdma_disconnect(p.id);
	rdma_destroy_qp(p.id);
	ibv_dereg_mr(p.mr);
	ibv_destroy_cq(p.cq);
	ibv_dealloc_pd(p.pd);
	free(p.buf);
	rdma_destroy_id(p.id);
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	return 0;
}
