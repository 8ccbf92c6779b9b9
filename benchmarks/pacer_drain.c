/* pacer_drain.c: a tiny load client for measuring the pacer alone (benchmarks/pacer_capacity.py).
 *
 * Opens N keep-alive connections; each sends llama.cpp POST /completion requests (streamed, a
 * nonce "Request XXXXXX" in the prompt, n_predict tokens) one after the other until the run's
 * time is up, reads every response and throws it away, counting its `data: ` events (one per
 * token, plus the final timings event). One thread, epoll, non-blocking sockets: it costs far
 * less per token than the pacer, so the pacer is what is measured. Connection i sends its first
 * request at i/N of --stagger-ms, so the streams are not in lock-step.
 *
 * Prints one JSON object: connections, requests done, events, tokens, errors, the run's start
 * and end (CLOCK_MONOTONIC seconds, comparable with the truth log) and tokens/s.
 *
 *   cc -O2 -o pacer_drain pacer_drain.c
 *   pacer_drain --url http://127.0.0.1:PORT --conns 256 --seconds 5 --tokens 64 [--cpu 1]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { S_IDLE, S_SEND, S_HDR, S_SIZE, S_DATA, S_DATA_CRLF, S_END_CRLF, S_DONE };

typedef struct {
    int fd, state;
    char req[512];
    size_t req_len, req_off;
    char hdr[4096];
    size_t hdr_len;
    size_t chunk_left, size_val;
    int size_digits;
    int match; /* bytes of "data: " matched so far */
    long long events; /* in the current response */
    double start_at;
} conn_t;

static const char PAT[] = "data: ";
static struct sockaddr_in addr;
static int tokens = 64, words = 8;
static long long nonce_counter, requests, events_total, tokens_total, errors;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *msg) {
    fprintf(stderr, "pacer_drain: %s: %s\n", msg, strerror(errno));
    exit(2);
}

static void make_request(conn_t *c) {
    char body[256];
    int n = snprintf(body, sizeof body, "{\"prompt\":\"Request %06llx", nonce_counter++ % 0x1000000);
    for (int i = 1; i < words; i++) n += snprintf(body + n, sizeof body - (size_t)n, " w");
    n += snprintf(body + n, sizeof body - (size_t)n, "\",\"n_predict\":%d,\"stream\":true}", tokens);
    c->req_len = (size_t)snprintf(c->req, sizeof c->req,
                                  "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                                  n, body);
    c->req_off = 0;
    c->state = S_SEND;
    c->hdr_len = 0;
    c->match = 0;
    c->events = 0;
}

static int open_conn(conn_t *c, int ep) {
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS)
        die("connect");
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    make_request(c);
    return 0;
}

static void set_events(conn_t *c, int ep, uint32_t e) {
    struct epoll_event ev = {.events = e, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void finish(conn_t *c, int ep) {
    close(c->fd);
    (void)ep;
    c->fd = -1;
    c->state = S_DONE;
}

/* feed response bytes; returns 1 when the response has ended */
static int feed(conn_t *c, const char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        switch (c->state) {
        case S_HDR: {
            char ch = p[i++];
            if (c->hdr_len < sizeof c->hdr) c->hdr[c->hdr_len++] = ch;
            if (c->hdr_len >= 4 && !memcmp(c->hdr + c->hdr_len - 4, "\r\n\r\n", 4)) {
                if (c->hdr_len < 12 || memcmp(c->hdr + 9, "200", 3) ||
                    !memmem(c->hdr, c->hdr_len, "chunked", 7))
                    return -1;
                c->state = S_SIZE;
                c->size_val = 0;
                c->size_digits = 0;
            }
            break;
        }
        case S_SIZE: {
            char ch = p[i++];
            if (ch == '\n') {
                if (c->size_val == 0) {
                    c->state = S_END_CRLF;
                    c->chunk_left = 2;
                } else {
                    c->state = S_DATA;
                    c->chunk_left = c->size_val;
                }
            } else if (ch != '\r') {
                int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                        : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
                if (d < 0) return -1;
                c->size_val = c->size_val * 16 + (size_t)d;
            }
            break;
        }
        case S_DATA: {
            size_t take = n - i < c->chunk_left ? n - i : c->chunk_left;
            for (size_t k = 0; k < take; k++) {
                char ch = p[i + k];
                if (ch == PAT[c->match]) {
                    if (++c->match == 6) {
                        c->events++;
                        c->match = 0;
                    }
                } else {
                    c->match = ch == 'd';
                }
            }
            i += take;
            c->chunk_left -= take;
            if (!c->chunk_left) {
                c->state = S_DATA_CRLF;
                c->chunk_left = 2;
            }
            break;
        }
        case S_DATA_CRLF:
            i++;
            if (!--c->chunk_left) {
                c->state = S_SIZE;
                c->size_val = 0;
            }
            break;
        case S_END_CRLF:
            i++;
            if (!--c->chunk_left) return i == n ? 1 : -1;
            break;
        default: return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *host = "127.0.0.1";
    int port = 0, nconns = 256, cpu = -1;
    double seconds = 5, stagger_ms = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--url")) {
            static char h[256];
            const char *s = strstr(v, "//");
            s = s ? s + 2 : v;
            const char *colon = strrchr(s, ':');
            if (!colon) {
                fprintf(stderr, "pacer_drain: --url needs a port\n");
                return 2;
            }
            snprintf(h, sizeof h, "%.*s", (int)(colon - s), s);
            host = h;
            port = atoi(colon + 1);
        } else if (!strcmp(a, "--conns")) nconns = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--tokens")) tokens = atoi(v);
        else if (!strcmp(a, "--words")) words = atoi(v);
        else if (!strcmp(a, "--cpu")) cpu = atoi(v);
        else if (!strcmp(a, "--stagger-ms")) stagger_ms = atof(v);
        else {
            fprintf(stderr, "usage: pacer_drain --url http://127.0.0.1:PORT [--conns N] "
                            "[--seconds S] [--tokens N] [--words N] [--stagger-ms MS] [--cpu N]\n");
            return 2;
        }
    }
    if (words < 1) words = 1;
    if (words > 40) words = 40;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) die("sched_setaffinity");
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "pacer_drain: host must be an IPv4 address, not %s\n", host);
        return 2;
    }
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    conn_t *cs = calloc((size_t)nconns, sizeof *cs);
    double t0 = now_s(), t_stop = t0 + seconds, t_last = t0;
    for (int i = 0; i < nconns; i++) {
        cs[i].fd = -1;
        cs[i].state = S_IDLE;
        cs[i].start_at = t0 + stagger_ms / 1000.0 * i / nconns;
    }
    int live = nconns, started = 0;
    struct epoll_event evs[512];
    char buf[65536];
    while (live > 0) {
        double now = now_s();
        while (started < nconns && cs[started].start_at <= now) open_conn(&cs[started++], ep);
        if (now > t_stop + 60) break; /* something is stuck */
        int timeout = started < nconns ? 1 : 100;
        int n = epoll_wait(ep, evs, 512, timeout);
        if (n < 0 && errno != EINTR) die("epoll_wait");
        for (int k = 0; k < n; k++) {
            conn_t *c = evs[k].data.ptr;
            if (c->state == S_DONE) continue;
            if (evs[k].events & (EPOLLERR | EPOLLHUP)) {
                errors++;
                finish(c, ep);
                live--;
                continue;
            }
            if (c->state == S_SEND && (evs[k].events & EPOLLOUT)) {
                ssize_t w = send(c->fd, c->req + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL);
                if (w > 0) c->req_off += (size_t)w;
                if (c->req_off == c->req_len) {
                    c->state = S_HDR;
                    set_events(c, ep, EPOLLIN);
                }
                continue;
            }
            if (!(evs[k].events & EPOLLIN)) continue;
            ssize_t r = recv(c->fd, buf, sizeof buf, 0);
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r <= 0) {
                errors++;
                finish(c, ep);
                live--;
                continue;
            }
            int rc = feed(c, buf, (size_t)r);
            if (rc < 0) {
                errors++;
                finish(c, ep);
                live--;
                continue;
            }
            if (rc == 1) {
                requests++;
                events_total += c->events;
                tokens_total += c->events > 0 ? c->events - 1 : 0; /* less the final event */
                t_last = now_s();
                if (t_last >= t_stop) {
                    finish(c, ep);
                    live--;
                } else {
                    make_request(c);
                    ssize_t w = send(c->fd, c->req, c->req_len, MSG_NOSIGNAL);
                    if (w > 0) c->req_off = (size_t)w;
                    if (c->req_off == c->req_len)
                        c->state = S_HDR;
                    else
                        set_events(c, ep, EPOLLOUT);
                }
            }
        }
    }
    double elapsed = t_last - t0;
    printf("{\"conns\":%d,\"requests\":%lld,\"events\":%lld,\"tokens\":%lld,\"errors\":%lld,"
           "\"t_start\":%.9f,\"t_stop\":%.9f,\"t_end\":%.9f,\"seconds\":%.6f,"
           "\"tokens_per_s\":%.1f}\n",
           nconns, requests, events_total, tokens_total, errors, t0, t_stop, t_last, elapsed,
           elapsed > 0 ? (double)tokens_total / elapsed : 0.0);
    return 0;
}
