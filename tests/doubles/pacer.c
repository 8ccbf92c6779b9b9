/* pacer.c: the deterministic pacing server (a fake LLM whose every timing is known), in C.
 *
 * tests/doubles/pacer.py builds and runs this file; its docstring describes the server. In short:
 * one-word tokens (" tok") on an exact schedule in four wire formats (llama.cpp /completion
 * SSE, Ollama /api/generate NDJSON, OpenAI /v1/completions and /v1/chat/completions SSE), the
 * info routes the backends fingerprint, and a truth log: one JSON line per generation request
 * with the CLOCK_MONOTONIC moment (seconds, = Python's time.monotonic()) its body's last byte
 * arrived in the socket (the kernel's software receive timestamp), its body was read, it got a
 * slot, each token was due and each token's bytes were fully handed to the kernel.
 *
 * Design: one thread, one epoll loop, non-blocking sockets with TCP_NODELAY, one
 * send(MSG_NOSIGNAL) per token (tokens are never coalesced: a token that cannot be sent at
 * once is buffered and finished, still as its own send, on EPOLLOUT), a min-heap of absolute
 * due times (token k is due at due(k-1) + gap; no drift) and a timerfd armed at the earliest
 * one with an absolute CLOCK_MONOTONIC deadline (no timer slack, no millisecond rounding).
 *
 * Arrival times: every socket asks for kernel software receive timestamps (SO_TIMESTAMPING
 * RX_SOFTWARE, else SO_TIMESTAMPNS); each recvmsg() returns the CLOCK_REALTIME time of the last
 * skb whose data it returned, kept per received byte range, converted to CLOCK_MONOTONIC with an
 * offset measured on every epoll wake (both clocks read back to back, the tighter of two reads).
 *
 * C11 + glibc (Linux), libc and libm only:  cc -O2 -o pacer pacer.c -lm
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <wctype.h>
#include <linux/net_tstamp.h>

#define MAX_HEADER (1 << 16)
#define MAX_BODY (256u << 20)
#define MAX_TOKENS 100000000LL /* a request asking for more gets this many */
#define PAUSE_INPUT (1u << 20) /* stop reading a busy connection holding this much input */
#define HIST_N 100000          /* lateness histograms: 1 us buckets to 100 ms, 1 ms to 100 s */
#define BATCH 1024             /* tokens written before the loop looks at sockets again */
#define RX_SPANS 64            /* received byte ranges remembered per connection (arrival times) */

/* ---------------------------------------------------------------------------------------- */
/* configuration */

static struct {
    const char *host;
    int port;
    double ttft_ms, gap_ms, alpha;
    long long tokens; /* 0: the request's count */
    long long default_tokens;
    int slots; /* 0: unlimited */
    const char *model;
    const char *truth_log;
    int nodelay;
    int n_ctx;
    int cpu; /* -1: no pinning */
} cfg = {"127.0.0.1", 0, 50.0, 10.0, 0.0, 0, 16, 0, "pacer", NULL, 1, 4096, -1};

static int64_t ttft_ns;
static long long started_wall; /* int(time.time()) at start (/v1/models "created") */

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("pacer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}
static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die("out of memory");
    return p;
}
static void *xcalloc(size_t a, size_t b) {
    void *p = calloc(a ? a : 1, b ? b : 1);
    if (!p) die("out of memory");
    return p;
}
static char *xstrndup(const char *s, size_t n) {
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CLOCK_REALTIME - CLOCK_MONOTONIC in ns: the kernel stamps received data with the real-time
 * clock. Measured by reading monotonic, real, monotonic back to back (the real read is taken to
 * sit midway); of two such reads the tighter one is kept. Refreshed on every epoll wake: the
 * offset moves only when the wall clock is stepped (NTP slews both clocks alike). */
static int64_t real_minus_mono;
static void clock_offset_refresh(void) {
    int64_t best_w = INT64_MAX;
    for (int i = 0; i < 2; i++) {
        struct timespec a, r, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_REALTIME, &r);
        clock_gettime(CLOCK_MONOTONIC, &b);
        int64_t m1 = (int64_t)a.tv_sec * 1000000000LL + a.tv_nsec;
        int64_t m2 = (int64_t)b.tv_sec * 1000000000LL + b.tv_nsec;
        int64_t rt = (int64_t)r.tv_sec * 1000000000LL + r.tv_nsec;
        if (m2 - m1 < best_w) {
            best_w = m2 - m1;
            real_minus_mono = rt - (m1 + (m2 - m1) / 2);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* growable byte buffer and the JSON output Python's json.dumps(separators=(",", ":")) makes */

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void b_reserve(buf_t *b, size_t extra) {
    if (b->len + extra + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + extra + 1) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
}
static void b_add(buf_t *b, const void *d, size_t n) {
    b_reserve(b, n);
    memcpy(b->p + b->len, d, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void b_adds(buf_t *b, const char *s) { b_add(b, s, strlen(s)); }
static void b_addc(buf_t *b, char c) { b_add(b, &c, 1); }
static void b_free(buf_t *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
static void b_printf(buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        b_add(b, tmp, (size_t)n);
        return;
    }
    b_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}
static void b_int(buf_t *b, long long v) {
    char tmp[24];
    int i = sizeof tmp;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    b_add(b, tmp + i, sizeof tmp - i);
}
/* a CLOCK_MONOTONIC time in ns as seconds with 9 decimals (exact; parses to the nearest double) */
static void b_secs(buf_t *b, int64_t ns) {
    if (ns < 0) {
        b_addc(b, '-');
        ns = -ns;
    }
    b_int(b, ns / 1000000000LL);
    char tmp[10];
    long long f = ns % 1000000000LL;
    tmp[0] = '.';
    for (int i = 9; i >= 1; i--) {
        tmp[i] = (char)('0' + f % 10);
        f /= 10;
    }
    b_add(b, tmp, 10);
}

/* Python's repr(float): the shortest string that round-trips, exponent below 1e-4 and from 1e16 */
static void b_pyfloat(buf_t *b, double x) {
    if (isnan(x)) {
        b_adds(b, "NaN");
        return;
    }
    if (isinf(x)) {
        b_adds(b, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (x == 0) {
        b_adds(b, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char tmp[64];
    int lo = 1, hi = 17;
    while (lo < hi) { /* round-tripping is monotone in the number of digits */
        int mid = (lo + hi) / 2;
        snprintf(tmp, sizeof tmp, "%.*e", mid - 1, x);
        if (strtod(tmp, NULL) == x)
            hi = mid;
        else
            lo = mid + 1;
    }
    snprintf(tmp, sizeof tmp, "%.*e", lo - 1, x);
    char digits[32];
    int nd = 0, neg = 0;
    const char *s = tmp;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    for (; *s && *s != 'e'; s++)
        if (isdigit((unsigned char)*s)) digits[nd++] = *s;
    int e = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) b_addc(b, '-');
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) b_addc(b, i < nd ? digits[i] : '0');
            b_addc(b, '.');
            if (nd > e + 1)
                b_add(b, digits + e + 1, (size_t)(nd - e - 1));
            else
                b_addc(b, '0');
        } else {
            b_adds(b, "0.");
            for (int i = 0; i < -e - 1; i++) b_addc(b, '0');
            b_add(b, digits, (size_t)nd);
        }
    } else {
        b_addc(b, digits[0]);
        if (nd > 1) {
            b_addc(b, '.');
            b_add(b, digits + 1, (size_t)(nd - 1));
        }
        b_printf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

/* Decode one code point from (lenient) UTF-8, surrogates encoded as 3 bytes allowed (what
 * Python's json keeps for a lone \udXXX escape). Returns bytes used (>= 1). */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (!len || (size_t)len > n) {
        *cp = 0xFFFD;
        return 1;
    }
    uint32_t v = c & (0x3F >> (len - 1));
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

/* A JSON string as json.dumps writes it (ensure_ascii): text is UTF-8, or Latin-1 (each byte a
 * code point: header values, which pacer.py decoded as latin-1). */
static void b_jstr(buf_t *b, const char *s, size_t n, int latin1) {
    static const char hex[] = "0123456789abcdef";
    b_reserve(b, n + 2);
    b_addc(b, '"');
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        if (latin1 || u[i] < 0x80) {
            cp = u[i++];
        } else {
            i += (size_t)utf8_decode(u + i, n - i, &cp);
        }
        if (cp >= 0x20 && cp <= 0x7E) {
            if (cp == '"' || cp == '\\') b_addc(b, '\\');
            b_addc(b, (char)cp);
            continue;
        }
        switch (cp) {
        case '\n': b_adds(b, "\\n"); continue;
        case '\r': b_adds(b, "\\r"); continue;
        case '\t': b_adds(b, "\\t"); continue;
        case '\b': b_adds(b, "\\b"); continue;
        case '\f': b_adds(b, "\\f"); continue;
        }
        uint32_t units[2];
        int nu = 0;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            units[nu++] = 0xD800 | (cp >> 10);
            units[nu++] = 0xDC00 | (cp & 0x3FF);
        } else {
            units[nu++] = cp;
        }
        for (int k = 0; k < nu; k++) {
            char e[6] = {'\\', 'u', hex[(units[k] >> 12) & 15], hex[(units[k] >> 8) & 15],
                         hex[(units[k] >> 4) & 15], hex[units[k] & 15]};
            b_add(b, e, 6);
        }
    }
    b_addc(b, '"');
}
static void b_jstrz(buf_t *b, const char *s) { b_jstr(b, s, strlen(s), 0); }

/* datetime.now(timezone.utc).isoformat() with "+00:00" → "Z" */
static void iso_now(char out[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int us = (int)(ts.tv_nsec / 1000);
    size_t k = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    if (us)
        snprintf(out + k, 40 - k, ".%06dZ", us);
    else
        snprintf(out + k, 40 - k, "Z");
}

/* ---------------------------------------------------------------------------------------- */
/* JSON input: a small recursive-descent parser with Python json.loads' grammar (NaN, Infinity,
 * -Infinity accepted; duplicate keys: the last wins; \uXXXX incl. surrogate pairs) */

enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int type;
    char *s; /* J_STR: UTF-8 text; J_INT: the digits as written */
    size_t slen;
    double d;        /* J_INT, J_FLOAT */
    struct jv **items; /* J_ARR, J_OBJ values */
    char **keys;       /* J_OBJ */
    size_t *klens;
    size_t n;
} jv;

typedef struct arena_blk {
    struct arena_blk *next;
    size_t used, cap;
    char data[];
} arena_blk;
typedef struct {
    arena_blk *head;
} arena_t;

static void *ar_alloc(arena_t *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->cap) {
        size_t cap = n > 16384 ? n : 16384;
        arena_blk *blk = xmalloc(sizeof *blk + cap);
        blk->next = a->head;
        blk->used = 0;
        blk->cap = cap;
        a->head = blk;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}
static void ar_free(arena_t *a) {
    while (a->head) {
        arena_blk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
}

typedef struct {
    const char *p, *end;
    arena_t *ar;
    int depth;
    int err;
} jparser;

static void jp_ws(jparser *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}
static jv *jp_new(jparser *j, int type) {
    jv *v = ar_alloc(j->ar, sizeof *v);
    memset(v, 0, sizeof *v);
    v->type = type;
    return v;
}
static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}
static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
/* parses a string at j->p (on the opening quote) into arena memory */
static char *jp_string(jparser *j, size_t *len) {
    j->p++; /* " */
    const char *start = j->p;
    size_t cap = 0;
    for (const char *q = start; q < j->end && *q != '"'; q++) {
        cap++;
        if (*q == '\\') q++;
    }
    char *out = ar_alloc(j->ar, cap * 4 + 1), *o = out;
    while (1) {
        if (j->p >= j->end) goto bad;
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) goto bad; /* strict: no raw control characters */
        if (c != '\\') {
            *o++ = (char)c;
            j->p++;
            continue;
        }
        if (j->p + 1 >= j->end) goto bad;
        char e = j->p[1];
        j->p += 2;
        switch (e) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (j->end - j->p < 4 || hex4(j->p, &cp)) goto bad;
            j->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u' && !hex4(j->p + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                j->p += 6;
            }
            o += utf8_put(o, cp);
            break;
        }
        default: goto bad;
        }
    }
    *o = 0;
    *len = (size_t)(o - out);
    return out;
bad:
    j->err = 1;
    *len = 0;
    return NULL;
}
static jv *jp_value(jparser *j);
static jv *jp_value(jparser *j) {
    jp_ws(j);
    if (j->p >= j->end || j->err) {
        j->err = 1;
        return NULL;
    }
    if (++j->depth > 900) {
        j->err = 1;
        return NULL;
    }
    jv *v = NULL;
    char c = *j->p;
    size_t rest = (size_t)(j->end - j->p);
    if (c == '{' || c == '[') {
        int obj = c == '{';
        v = jp_new(j, obj ? J_OBJ : J_ARR);
        j->p++;
        size_t cap = 0;
        jp_ws(j);
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
            j->p++;
            goto done;
        }
        while (1) {
            char *key = NULL;
            size_t klen = 0;
            if (obj) {
                jp_ws(j);
                if (j->p >= j->end || *j->p != '"') goto bad;
                key = jp_string(j, &klen);
                if (j->err) goto bad;
                jp_ws(j);
                if (j->p >= j->end || *j->p != ':') goto bad;
                j->p++;
            }
            jv *item = jp_value(j);
            if (j->err) goto bad;
            if (v->n == cap) {
                size_t ncap = cap ? cap * 2 : 8;
                jv **items = ar_alloc(j->ar, ncap * sizeof *items);
                if (cap) memcpy(items, v->items, cap * sizeof *items);
                v->items = items;
                if (obj) {
                    char **keys = ar_alloc(j->ar, ncap * sizeof *keys);
                    size_t *kl = ar_alloc(j->ar, ncap * sizeof *kl);
                    if (cap) {
                        memcpy(keys, v->keys, cap * sizeof *keys);
                        memcpy(kl, v->klens, cap * sizeof *kl);
                    }
                    v->keys = keys;
                    v->klens = kl;
                }
                cap = ncap;
            }
            v->items[v->n] = item;
            if (obj) {
                v->keys[v->n] = key;
                v->klens[v->n] = klen;
            }
            v->n++;
            jp_ws(j);
            if (j->p >= j->end) goto bad;
            if (*j->p == ',') {
                j->p++;
                continue;
            }
            if (*j->p == (obj ? '}' : ']')) {
                j->p++;
                break;
            }
            goto bad;
        }
    } else if (c == '"') {
        v = jp_new(j, J_STR);
        v->s = jp_string(j, &v->slen);
        if (j->err) goto bad;
    } else if (rest >= 4 && !memcmp(j->p, "null", 4)) {
        v = jp_new(j, J_NULL);
        j->p += 4;
    } else if (rest >= 4 && !memcmp(j->p, "true", 4)) {
        v = jp_new(j, J_TRUE);
        j->p += 4;
    } else if (rest >= 5 && !memcmp(j->p, "false", 5)) {
        v = jp_new(j, J_FALSE);
        j->p += 5;
    } else if (rest >= 3 && !memcmp(j->p, "NaN", 3)) {
        v = jp_new(j, J_FLOAT);
        v->d = NAN;
        j->p += 3;
    } else if (rest >= 8 && !memcmp(j->p, "Infinity", 8)) {
        v = jp_new(j, J_FLOAT);
        v->d = INFINITY;
        j->p += 8;
    } else if (rest >= 9 && !memcmp(j->p, "-Infinity", 9)) {
        v = jp_new(j, J_FLOAT);
        v->d = -INFINITY;
        j->p += 9;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        /* -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? */
        const char *s = j->p, *q = s;
        int isfloat = 0;
        if (*q == '-') q++;
        if (q >= j->end || !isdigit((unsigned char)*q)) goto bad;
        if (*q == '0')
            q++;
        else
            while (q < j->end && isdigit((unsigned char)*q)) q++;
        if (q + 1 < j->end && *q == '.' && isdigit((unsigned char)q[1])) {
            isfloat = 1;
            q++;
            while (q < j->end && isdigit((unsigned char)*q)) q++;
        }
        if (q < j->end && (*q == 'e' || *q == 'E')) {
            const char *r = q + 1;
            if (r < j->end && (*r == '+' || *r == '-')) r++;
            if (r < j->end && isdigit((unsigned char)*r)) {
                isfloat = 1;
                while (r < j->end && isdigit((unsigned char)*r)) r++;
                q = r;
            }
        }
        v = jp_new(j, isfloat ? J_FLOAT : J_INT);
        v->slen = (size_t)(q - s);
        v->s = ar_alloc(j->ar, v->slen + 1);
        memcpy(v->s, s, v->slen);
        v->s[v->slen] = 0;
        v->d = strtod(v->s, NULL);
        j->p = q;
    } else {
        goto bad;
    }
done:
    j->depth--;
    return v;
bad:
    j->err = 1;
    return NULL;
}

/* json.loads(body); NULL when it is not JSON. Valid UTF-8 required (Python decodes the body
 * first), a UTF-8 BOM skipped (json.loads of bytes does). */
static int utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                  : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[i + 1] < 0xA0) return 0;
        if (c == 0xF0 && s[i + 1] < 0x90) return 0;
        if (c == 0xF4 && s[i + 1] > 0x8F) return 0;
        i += (size_t)len; /* surrogates (ED A0..BF) pass, as with 'surrogatepass' */
    }
    return 1;
}
static jv *json_parse(const char *s, size_t n, arena_t *ar) {
    if (n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
        s += 3;
        n -= 3;
    }
    if (!utf8_valid((const unsigned char *)s, n)) return NULL;
    jparser j = {s, s + n, ar, 0, 0};
    jv *v = jp_value(&j);
    if (j.err || !v) return NULL;
    jp_ws(&j);
    if (j.p != j.end) return NULL;
    return v;
}

/* dict.get: the value of the last key equal to key, or NULL */
static jv *jget(jv *o, const char *key) {
    if (!o || o->type != J_OBJ) return NULL;
    size_t kl = strlen(key);
    for (size_t i = o->n; i-- > 0;)
        if (o->klens[i] == kl && !memcmp(o->keys[i], key, kl)) return o->items[i];
    return NULL;
}
static int jtruthy(jv *v) {
    if (!v) return 0;
    switch (v->type) {
    case J_NULL:
    case J_FALSE: return 0;
    case J_TRUE: return 1;
    case J_INT:
    case J_FLOAT: return v->d != 0.0 || isnan(v->d);
    case J_STR: return v->slen > 0;
    default: return v->n > 0;
    }
}
/* json.dumps(value) with compact separators */
static void b_jdump(buf_t *b, jv *v) {
    switch (v->type) {
    case J_NULL: b_adds(b, "null"); return;
    case J_FALSE: b_adds(b, "false"); return;
    case J_TRUE: b_adds(b, "true"); return;
    case J_INT:
        if (!strcmp(v->s, "-0"))
            b_adds(b, "0");
        else
            b_add(b, v->s, v->slen);
        return;
    case J_FLOAT: b_pyfloat(b, v->d); return;
    case J_STR: b_jstr(b, v->s, v->slen, 0); return;
    case J_ARR:
        b_addc(b, '[');
        for (size_t i = 0; i < v->n; i++) {
            if (i) b_addc(b, ',');
            b_jdump(b, v->items[i]);
        }
        b_addc(b, ']');
        return;
    case J_OBJ: {
        b_addc(b, '{');
        int first = 1;
        for (size_t i = 0; i < v->n; i++) {
            int seen = 0; /* a dict keeps a repeated key at its first place, the last value */
            for (size_t k = 0; k < i && !seen; k++)
                seen = v->klens[k] == v->klens[i] && !memcmp(v->keys[k], v->keys[i], v->klens[i]);
            if (seen) continue;
            size_t last = i;
            for (size_t k = i + 1; k < v->n; k++)
                if (v->klens[k] == v->klens[i] && !memcmp(v->keys[k], v->keys[i], v->klens[i]))
                    last = k;
            if (!first) b_addc(b, ',');
            first = 0;
            b_jstr(b, v->keys[i], v->klens[i], 0);
            b_addc(b, ':');
            b_jdump(b, v->items[last]);
        }
        b_addc(b, '}');
        return;
    }
    }
}
/* str(value) as Python prints it, near enough to count its words and find a nonce */
static void b_pystr(buf_t *b, jv *v, int nested) {
    switch (v->type) {
    case J_NULL: b_adds(b, "None"); return;
    case J_FALSE: b_adds(b, "False"); return;
    case J_TRUE: b_adds(b, "True"); return;
    case J_INT:
    case J_FLOAT: b_jdump(b, v); return;
    case J_STR:
        if (nested) b_addc(b, '\'');
        b_add(b, v->s, v->slen);
        if (nested) b_addc(b, '\'');
        return;
    case J_ARR:
        b_addc(b, '[');
        for (size_t i = 0; i < v->n; i++) {
            if (i) b_adds(b, ", ");
            b_pystr(b, v->items[i], 1);
        }
        b_addc(b, ']');
        return;
    case J_OBJ:
        b_addc(b, '{');
        for (size_t i = 0; i < v->n; i++) {
            if (i) b_adds(b, ", ");
            b_addc(b, '\'');
            b_add(b, v->keys[i], v->klens[i]);
            b_adds(b, "': ");
            b_pystr(b, v->items[i], 1);
        }
        b_addc(b, '}');
        return;
    }
}

/* int(value) for a token count, None (-1) where Python's int() raises */
static long long jint(jv *v) {
    if (!v) return -1;
    switch (v->type) {
    case J_TRUE: return 1;
    case J_FALSE: return 0;
    case J_INT:
    case J_FLOAT:
        if (isnan(v->d) || isinf(v->d)) return -1;
        if (v->d > (double)MAX_TOKENS) return MAX_TOKENS;
        if (v->d < -(double)MAX_TOKENS) return -MAX_TOKENS;
        return (long long)v->d; /* truncates toward zero, as int(6.7) */
    case J_STR: {
        const char *s = v->s, *e = v->s + v->slen;
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        int neg = 0;
        if (s < e && (*s == '+' || *s == '-')) neg = *s++ == '-';
        if (s == e) return -1;
        long long n = 0;
        int prev_us = 1;
        for (; s < e; s++) {
            if (*s == '_' && !prev_us) {
                prev_us = 1;
                continue;
            }
            if (!isdigit((unsigned char)*s)) return -1;
            prev_us = 0;
            if (n < MAX_TOKENS) n = n * 10 + (*s - '0');
        }
        if (prev_us) return -1;
        if (n > MAX_TOKENS) n = MAX_TOKENS;
        return neg ? -n : n;
    }
    default: return -1;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* text: Python's str.split() word count and the nonce regex \bRequest ([A-Za-z0-9_-]+) */

static int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}
static int count_words(const char *s, size_t n) {
    int words = 0, in = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        i += (size_t)utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (py_isspace(cp))
            in = 0;
        else if (!in) {
            in = 1;
            words++;
        }
    }
    return words;
}
static int nonce_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}
static int word_before(const char *s, size_t at) {
    if (at == 0) return 0;
    size_t k = at - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    uint32_t cp;
    utf8_decode((const unsigned char *)s + k, at - k, &cp);
    if (cp < 0x80) return isalnum((int)cp) || cp == '_';
    return iswalnum((wint_t)cp) != 0; /* Python's \w: str.isalnum() or _ */
}
static char *find_nonce(const char *s, size_t n) {
    const char *pat = "Request ";
    for (size_t i = 0; i + 8 < n; i++) {
        if (s[i] != 'R' || memcmp(s + i, pat, 8)) continue;
        if (word_before(s, i)) continue;
        size_t k = i + 8;
        while (k < n && nonce_char(s[k])) k++;
        if (k > i + 8) return xstrndup(s + i + 8, k - i - 8);
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* connections, requests, the heap, slots */

enum { API_LLAMA, API_OLLAMA, API_OAI_CMPL, API_OAI_CHAT };
static const char *API_NAME[] = {"llamacpp", "ollama", "openai-completions", "openai-chat"};

enum { SEG_PLAIN = -1, SEG_FINAL = -2 }; /* or >= 0: the token index */

typedef struct seg {
    size_t end; /* offset in out where this write ends */
    long long kind;
} seg_t;

struct conn;

typedef struct req {
    struct conn *c;
    int api, stream, want_usage, keep;
    long long seq;
    char *rid, *nonce, *xrid; /* xrid: Latin-1 bytes of X-Request-Id, or NULL */
    size_t xrid_len;
    long long asked; /* -1: None */
    long long n;
    int prompt_tokens;
    char *model_json; /* the "model" value, dumped */
    long long created;
    char created_at[40];
    char id[40];
    int64_t t_body, t_slot, t_final; /* t_slot < 0: no slot yet */
    int64_t t_arrive; /* the body's last byte arrived (kernel time; t_body if none) */
    int64_t *t_tok, *due;
    long long n_written, cap;
    long long next_k; /* next token to emit */
    int64_t next_due;
    long long heap_idx; /* -1: not in the heap */
    int queued, holds_slot, done;
    struct req *qnext;
    buf_t tok, tok_last;
    struct req *dead_next;
} req_t;

typedef struct conn {
    int fd;
    long long id;
    int port; /* -1: unknown */
    buf_t in;
    size_t in_off;
    buf_t out;
    size_t out_off;
    seg_t *segs;
    size_t nseg, seg0, segcap;
    req_t *req;
    int continue_sent;
    int closing; /* close once output is flushed */
    int rd_eof;
    int dead;
    /* arrival times: byte ranges received (running byte counts) with the kernel's receive
     * timestamp of each (CLOCK_MONOTONIC ns, INT64_MIN: none), oldest first from rx0 */
    struct {
        uint64_t end;
        int64_t t;
    } rx[RX_SPANS];
    int rx0, rx_n;
    uint64_t rx_total, rx_used; /* bytes received, bytes consumed by parsed requests */
    int64_t last_arrive;        /* the previous request's arrival on this connection */
    uint32_t events;
    struct conn *prev, *next; /* live connections */
    struct conn *dead_next;
} conn_t;

static int epfd, listen_fd = -1, timer_fd, sig_fd, truth_fd = -1;
static long long seq_counter, conn_counter;
static int active;          /* requests holding a slot */
static req_t *q_head, *q_tail; /* waiting for a slot, FIFO */
static req_t **heap;
static long long heap_n, heap_cap;
static conn_t *conns, *dead_conns;
static req_t *dead_reqs;
static int64_t armed = 0;
static int stopping; /* SIGTERM/SIGINT: no more slots are granted */
/* statistics for the summary line */
static long long st_requests, st_completed, st_tokens;
static long long st_arrive_kernel; /* generation requests logged with a kernel arrival time */
static const char *ts_kind = "none"; /* which receive timestamps the sockets give */
static int64_t st_busy_ns, st_busy_since; /* time with requests in flight */
static long long in_flight, st_wakeups;
static unsigned *hist_us, *hist_ms; /* write lateness */
static int64_t late_max_all;

#define TAG_LISTEN 1
#define TAG_TIMER 2
#define TAG_SIGNAL 3

static inline int heap_less(req_t *a, req_t *b) {
    return a->next_due < b->next_due || (a->next_due == b->next_due && a->seq < b->seq);
}
static void heap_swap(long long i, long long j) {
    req_t *t = heap[i];
    heap[i] = heap[j];
    heap[j] = t;
    heap[i]->heap_idx = i;
    heap[j]->heap_idx = j;
}
static void heap_up(long long i) {
    while (i > 0) {
        long long p = (i - 1) / 2;
        if (!heap_less(heap[i], heap[p])) break;
        heap_swap(i, p);
        i = p;
    }
}
static void heap_down(long long i) {
    while (1) {
        long long l = 2 * i + 1, r = l + 1, m = i;
        if (l < heap_n && heap_less(heap[l], heap[m])) m = l;
        if (r < heap_n && heap_less(heap[r], heap[m])) m = r;
        if (m == i) break;
        heap_swap(i, m);
        i = m;
    }
}
static void heap_push(req_t *r) {
    if (heap_n == heap_cap) {
        heap_cap = heap_cap ? heap_cap * 2 : 1024;
        heap = xrealloc(heap, (size_t)heap_cap * sizeof *heap);
    }
    heap[heap_n] = r;
    r->heap_idx = heap_n++;
    heap_up(r->heap_idx);
}
static void heap_remove(req_t *r) {
    long long i = r->heap_idx;
    if (i < 0) return;
    r->heap_idx = -1;
    heap_n--;
    if (i == heap_n) return;
    heap[i] = heap[heap_n];
    heap[i]->heap_idx = i;
    heap_up(i);
    heap_down(heap[i]->heap_idx);
}

static void conn_update_events(conn_t *c) {
    if (c->dead) return;
    uint32_t want = 0;
    if (!c->rd_eof && !(c->req && c->in.len - c->in_off > PAUSE_INPUT)) want |= EPOLLIN;
    if (c->out_off < c->out.len) want |= EPOLLOUT;
    if (want == c->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->events = want;
}

/* ---------------------------------------------------------------------------------------- */
/* the truth log */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void truth_write(req_t *r, int completed) {
    if (truth_fd < 0) return;
    buf_t b = {0};
    b_reserve(&b, 512 + (size_t)r->n_written * 44);
    b_adds(&b, "{\"id\":");
    b_jstrz(&b, r->rid);
    b_adds(&b, ",\"seq\":");
    b_int(&b, r->seq);
    b_adds(&b, ",\"nonce\":");
    if (r->nonce)
        b_jstrz(&b, r->nonce);
    else
        b_adds(&b, "null");
    b_adds(&b, ",\"x_request_id\":");
    if (r->xrid)
        b_jstr(&b, r->xrid, r->xrid_len, 1);
    else
        b_adds(&b, "null");
    b_adds(&b, ",\"api\":\"");
    b_adds(&b, API_NAME[r->api]);
    b_adds(&b, "\",\"conn\":");
    b_int(&b, r->c->id);
    b_adds(&b, ",\"client_port\":");
    if (r->c->port >= 0)
        b_int(&b, r->c->port);
    else
        b_adds(&b, "null");
    b_adds(&b, r->stream ? ",\"stream\":true" : ",\"stream\":false");
    b_adds(&b, ",\"n_requested\":");
    if (r->asked > 0)
        b_int(&b, r->asked);
    else
        b_adds(&b, "null");
    b_adds(&b, ",\"n\":");
    b_int(&b, r->n);
    b_adds(&b, ",\"prompt_tokens\":");
    b_int(&b, r->prompt_tokens);
    b_adds(&b, ",\"t_body\":");
    b_secs(&b, r->t_body);
    b_adds(&b, ",\"t_arrive\":");
    b_secs(&b, r->t_arrive);
    if (r->t_slot >= 0) {
        b_adds(&b, ",\"t_slot\":");
        b_secs(&b, r->t_slot);
    }
    if (completed) {
        b_adds(&b, ",\"t_final\":");
        b_secs(&b, r->t_final);
    }
    b_adds(&b, ",\"t_tok\":[");
    for (long long k = 0; k < r->n_written; k++) {
        if (k) b_addc(&b, ',');
        b_secs(&b, r->t_tok[k]);
    }
    b_adds(&b, "],\"n_written\":");
    b_int(&b, r->n_written);
    b_adds(&b, completed ? ",\"completed\":true" : ",\"completed\":false");
    b_adds(&b, ",\"due\":[");
    for (long long k = 0; k < r->n_written; k++) {
        if (k) b_addc(&b, ',');
        b_secs(&b, r->due[k]);
    }
    b_adds(&b, "],\"late_p50\":");
    if (r->n_written) {
        int64_t stack[256], *late = r->n_written <= 256 ? stack
                                                        : xmalloc((size_t)r->n_written * 8);
        for (long long k = 0; k < r->n_written; k++) late[k] = r->t_tok[k] - r->due[k];
        qsort(late, (size_t)r->n_written, sizeof *late, cmp_i64);
        b_secs(&b, late[(r->n_written - 1) / 2]);
        b_adds(&b, ",\"late_max\":");
        b_secs(&b, late[r->n_written - 1]);
        if (late != stack) free(late);
    } else {
        b_adds(&b, "null,\"late_max\":null");
    }
    b_adds(&b, "}\n");
    size_t off = 0;
    while (off < b.len) {
        ssize_t w = write(truth_fd, b.p + off, b.len - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "pacer: truth log write failed: %s\n", strerror(errno));
            break;
        }
        off += (size_t)w;
    }
    b_free(&b);
}

/* ---------------------------------------------------------------------------------------- */
/* output: every token its own send; what cannot be sent now is kept, segment by segment */

static void conn_close(conn_t *c);
static void req_abort(req_t *r);
static int on_sent(conn_t *c, long long kind, int64_t t);

static void conn_fail(conn_t *c) {
    if (c->dead) return;
    if (c->req) req_abort(c->req);
    conn_close(c);
}

static void conn_close(conn_t *c) {
    if (c->dead) return;
    c->dead = 1;
    if (c->prev)
        c->prev->next = c->next;
    else
        conns = c->next;
    if (c->next) c->next->prev = c->prev;
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->dead_next = dead_conns;
    dead_conns = c;
}

/* no more requests on this connection: close it once its output is out */
static void conn_end(conn_t *c) {
    if (c->dead) return;
    c->closing = 1;
    if (c->seg0 == c->nseg) conn_close(c);
}

static void seg_push(conn_t *c, size_t end, long long kind) {
    if (c->nseg == c->segcap) {
        if (c->seg0 > 0) {
            memmove(c->segs, c->segs + c->seg0, (c->nseg - c->seg0) * sizeof *c->segs);
            c->nseg -= c->seg0;
            c->seg0 = 0;
        }
        if (c->nseg == c->segcap) {
            c->segcap = c->segcap ? c->segcap * 2 : 16;
            c->segs = xrealloc(c->segs, c->segcap * sizeof *c->segs);
        }
    }
    c->segs[c->nseg++] = (seg_t){end, kind};
}

/* Send what is pending, one segment per send. Returns -1 if the connection failed. */
static int conn_flush(conn_t *c) {
    while (!c->dead && c->seg0 < c->nseg) {
        seg_t *s = &c->segs[c->seg0];
        ssize_t w = send(c->fd, c->out.p + c->out_off, s->end - c->out_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            conn_fail(c);
            return -1;
        }
        c->out_off += (size_t)w;
        if (c->out_off < s->end) continue;
        long long kind = s->kind;
        c->seg0++;
        if (c->seg0 == c->nseg) {
            c->out.len = c->out_off = 0;
            c->seg0 = c->nseg = 0;
        }
        if (kind != SEG_PLAIN && on_sent(c, kind, now_ns()) < 0) return -1;
    }
    if (c->dead) return -1;
    if (c->seg0 == c->nseg && c->closing) {
        conn_close(c);
        return -1;
    }
    conn_update_events(c);
    return 0;
}

/* One write: sent at once if nothing is pending, else kept in order. -1: connection failed. */
static int conn_write(conn_t *c, const char *data, size_t len, long long kind) {
    if (c->dead) return -1;
    if (c->seg0 == c->nseg) {
        ssize_t w;
        do w = send(c->fd, data, len, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            conn_fail(c);
            return -1;
        }
        if (w == (ssize_t)len) {
            if (kind != SEG_PLAIN) return on_sent(c, kind, now_ns());
            if (c->closing) {
                conn_close(c);
                return -1;
            }
            return 0;
        }
        size_t done = w > 0 ? (size_t)w : 0;
        b_add(&c->out, data + done, len - done);
        seg_push(c, c->out.len, kind);
        conn_update_events(c);
        return 0;
    }
    b_add(&c->out, data, len);
    seg_push(c, c->out.len, kind);
    return 0;
}

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    default: return "Error";
    }
}

/* a whole JSON answer in one write */
static int send_json(conn_t *c, int status, const buf_t *body, int keep, long long kind) {
    buf_t b = {0};
    b_printf(&b,
             "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
             "Server: slotbench-pacer\r\nConnection: %s\r\n\r\n",
             status, reason(status), body->len, keep ? "keep-alive" : "close");
    b_add(&b, body->p, body->len);
    int rc = conn_write(c, b.p, b.len, kind);
    b_free(&b);
    return rc;
}
static int send_error(conn_t *c, int status, const char *msg, size_t len, int keep) {
    buf_t b = {0};
    b_adds(&b, "{\"error\":");
    b_jstr(&b, msg, len, 1);
    b_addc(&b, '}');
    if (!keep) c->closing = 1;
    int rc = send_json(c, status, &b, keep, SEG_PLAIN);
    b_free(&b);
    return rc;
}

/* ---------------------------------------------------------------------------------------- */
/* wire formats */

static void b_chunk(buf_t *b, const char *data, size_t len) {
    b_printf(b, "%zx\r\n", len);
    b_add(b, data, len);
    b_adds(b, "\r\n");
}

static void build_token(req_t *r, buf_t *out, int last) {
    buf_t e = {0};
    if (r->api == API_LLAMA) {
        b_adds(&e, "data: {\"content\":\" tok\",\"tokens\":[],\"stop\":false,\"id_slot\":0,"
                   "\"index\":0}\n\n");
    } else if (r->api == API_OLLAMA) {
        b_adds(&e, "{\"model\":");
        b_adds(&e, r->model_json);
        b_adds(&e, ",\"created_at\":");
        b_jstrz(&e, r->created_at);
        b_adds(&e, ",\"response\":\" tok\",\"done\":false}\n");
    } else {
        int chat = r->api == API_OAI_CHAT;
        b_adds(&e, "data: {\"id\":");
        b_jstrz(&e, r->id);
        b_adds(&e, chat ? ",\"object\":\"chat.completion.chunk\",\"created\":"
                        : ",\"object\":\"text_completion\",\"created\":");
        b_int(&e, r->created);
        b_adds(&e, ",\"model\":");
        b_adds(&e, r->model_json);
        b_adds(&e, chat ? ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                          "\"content\":\" tok\"},\"logprobs\":null,\"finish_reason\":"
                        : ",\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,"
                          "\"finish_reason\":");
        b_adds(&e, last ? "\"length\"}]}\n\n" : "null}]}\n\n");
    }
    b_chunk(out, e.p, e.len);
    b_free(&e);
}

typedef struct {
    long long n;
    double prompt_s, gen_s, total_s;
    int64_t prompt_ns, gen_ns, total_ns;
} timing_t;

static timing_t true_timings(req_t *r) {
    timing_t t;
    int64_t first = r->t_tok[0], last = r->t_tok[r->n_written - 1];
    t.n = r->n_written;
    t.prompt_ns = first - r->t_slot; /* slot acquired → first token written */
    t.gen_ns = last - first;         /* first → last token written (n - 1 gaps) */
    t.total_ns = last - r->t_body;
    t.prompt_s = (double)t.prompt_ns / 1e9;
    t.gen_s = (double)t.gen_ns / 1e9;
    t.total_s = (double)t.total_ns / 1e9;
    return t;
}

static void b_text(buf_t *b, long long n) { /* " tok" * n as a JSON string */
    b_reserve(b, (size_t)n * 4 + 2);
    b_addc(b, '"');
    for (long long i = 0; i < n; i++) b_add(b, " tok", 4);
    b_addc(b, '"');
}

static void llama_final(req_t *r, timing_t *t, buf_t *b, long long text_n) {
    long long n = t->n, p = r->prompt_tokens;
    double pm = (double)t->prompt_ns / 1e6, gm = (double)t->gen_ns / 1e6;
    b_adds(b, "{\"content\":");
    if (text_n)
        b_text(b, text_n);
    else
        b_adds(b, "\"\"");
    b_adds(b, ",\"stop\":true,\"model\":");
    b_adds(b, r->model_json);
    b_adds(b, ",\"tokens_predicted\":");
    b_int(b, n);
    b_adds(b, ",\"tokens_evaluated\":");
    b_int(b, p);
    b_adds(b, ",\"stop_type\":\"limit\",\"stopping_word\":\"\",\"tokens_cached\":");
    b_int(b, p + n);
    b_adds(b, ",\"truncated\":false,\"timings\":{\"cache_n\":0,\"prompt_n\":");
    b_int(b, p);
    b_adds(b, ",\"prompt_ms\":");
    b_pyfloat(b, pm);
    b_adds(b, ",\"prompt_per_token_ms\":");
    b_pyfloat(b, p ? pm / (double)p : 0.0);
    b_adds(b, ",\"prompt_per_second\":");
    b_pyfloat(b, (p && pm != 0.0) ? (double)p / (pm / 1000.0) : 0.0);
    b_adds(b, ",\"predicted_n\":");
    b_int(b, n);
    b_adds(b, ",\"predicted_ms\":");
    b_pyfloat(b, gm);
    b_adds(b, ",\"predicted_per_token_ms\":");
    b_pyfloat(b, gm / (double)n);
    b_adds(b, ",\"predicted_per_second\":");
    b_pyfloat(b, gm != 0.0 ? (double)(n - 1) / (gm / 1000.0) : 0.0);
    b_adds(b, "}}");
}

static void ollama_final(req_t *r, timing_t *t, buf_t *b, long long text_n) {
    char now[40];
    iso_now(now);
    b_adds(b, "{\"model\":");
    b_adds(b, r->model_json);
    b_adds(b, ",\"created_at\":");
    b_jstrz(b, now);
    b_adds(b, ",\"response\":");
    if (text_n)
        b_text(b, text_n);
    else
        b_adds(b, "\"\"");
    b_adds(b, ",\"done\":true,\"done_reason\":\"length\"");
    /* Ollama omits zero-valued metrics */
    struct {
        const char *k;
        long long v;
    } m[] = {{"total_duration", t->total_ns},
             {"prompt_eval_count", r->prompt_tokens},
             {"prompt_eval_duration", t->prompt_ns},
             {"eval_count", t->n},
             {"eval_duration", t->gen_ns}};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        if (!m[i].v) continue;
        b_adds(b, ",\"");
        b_adds(b, m[i].k);
        b_adds(b, "\":");
        b_int(b, m[i].v);
    }
    b_addc(b, '}');
}

static void b_usage(req_t *r, buf_t *b, long long n) {
    b_adds(b, "\"usage\":{\"prompt_tokens\":");
    b_int(b, r->prompt_tokens);
    b_adds(b, ",\"completion_tokens\":");
    b_int(b, n);
    b_adds(b, ",\"total_tokens\":");
    b_int(b, r->prompt_tokens + n);
    b_addc(b, '}');
}

static void build_tail(req_t *r, timing_t *t, buf_t *out) {
    buf_t e = {0};
    if (r->api == API_LLAMA) {
        b_adds(&e, "data: ");
        llama_final(r, t, &e, 0);
        b_adds(&e, "\n\n");
    } else if (r->api == API_OLLAMA) {
        ollama_final(r, t, &e, 0);
        b_addc(&e, '\n');
    } else {
        if (r->want_usage) {
            b_adds(&e, "data: {\"id\":");
            b_jstrz(&e, r->id);
            b_adds(&e, r->api == API_OAI_CHAT ? ",\"object\":\"chat.completion.chunk\""
                                              : ",\"object\":\"text_completion\"");
            b_adds(&e, ",\"created\":");
            b_int(&e, r->created);
            b_adds(&e, ",\"model\":");
            b_adds(&e, r->model_json);
            b_adds(&e, ",\"choices\":[],");
            b_usage(r, &e, t->n);
            b_adds(&e, "}\n\n");
        }
        b_adds(&e, "data: [DONE]\n\n");
    }
    b_chunk(out, e.p, e.len);
    b_adds(out, "0\r\n\r\n");
    b_free(&e);
}

static void build_whole(req_t *r, timing_t *t, buf_t *b) {
    long long n = r->n_written;
    if (r->api == API_LLAMA) {
        llama_final(r, t, b, n);
        return;
    }
    if (r->api == API_OLLAMA) {
        ollama_final(r, t, b, n);
        return;
    }
    int chat = r->api == API_OAI_CHAT;
    b_adds(b, "{\"id\":");
    b_jstrz(b, r->id);
    b_adds(b, chat ? ",\"object\":\"chat.completion\"" : ",\"object\":\"text_completion\"");
    b_adds(b, ",\"created\":");
    b_int(b, r->created);
    b_adds(b, ",\"model\":");
    b_adds(b, r->model_json);
    if (chat) {
        b_adds(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        b_text(b, n);
        b_adds(b, "},\"finish_reason\":\"length\"}],");
    } else {
        b_adds(b, ",\"choices\":[{\"index\":0,\"text\":");
        b_text(b, n);
        b_adds(b, ",\"finish_reason\":\"length\"}],");
    }
    b_usage(r, b, t->n);
    b_addc(b, '}');
}

/* ---------------------------------------------------------------------------------------- */
/* generation */

static void req_free_later(req_t *r) {
    r->done = 1;
    if (--in_flight == 0) st_busy_ns += now_ns() - st_busy_since;
    r->dead_next = dead_reqs;
    dead_reqs = r;
}
static void req_free(req_t *r) {
    free(r->rid);
    free(r->nonce);
    free(r->xrid);
    free(r->model_json);
    free(r->t_tok);
    free(r->due);
    b_free(&r->tok);
    b_free(&r->tok_last);
    free(r);
}

static void grant_slot(req_t *r, int64_t t) {
    r->t_slot = t;
    r->holds_slot = 1;
    active++;
    r->next_due = t + ttft_ns;
    heap_push(r);
}
static void release_slot(req_t *r) {
    if (!r->holds_slot) return;
    r->holds_slot = 0;
    active--;
    if (q_head && !stopping && (cfg.slots <= 0 || active < cfg.slots)) {
        req_t *q = q_head;
        q_head = q->qnext;
        if (!q_head) q_tail = NULL;
        q->queued = 0;
        q->qnext = NULL;
        grant_slot(q, now_ns());
    }
}
static void unqueue(req_t *r) {
    if (!r->queued) return;
    req_t **pp = &q_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (*pp) {
        *pp = r->qnext;
        if (q_tail == r) q_tail = prev;
    }
    r->queued = 0;
}

/* a request that ends without its last bytes written: logged with completed false */
static void req_abort(req_t *r) {
    if (r->done) return;
    heap_remove(r);
    unqueue(r);
    release_slot(r);
    truth_write(r, 0);
    r->c->req = NULL;
    req_free_later(r);
}

static inline int64_t gap_ns(void) {
    double f = 1.0 + cfg.alpha * (active > 1 ? active - 1 : 0);
    return (int64_t)llround(cfg.gap_ms * 1e6 * f);
}

static void process_input(conn_t *c);

/* a token's bytes were fully handed to the kernel (or, not streamed, it was generated) */
static int token_done(req_t *r, long long k, int64_t t) {
    (void)k; /* tokens complete in order: k == n_written */
    int64_t due = r->due[r->n_written]; /* stored when it was emitted */
    r->t_tok[r->n_written++] = t;
    st_tokens++;
    int64_t late = t - due;
    if (late < 0) late = 0;
    if (late > late_max_all) late_max_all = late;
    long long us = late / 1000, ms = late / 1000000;
    if (us < HIST_N)
        hist_us[us]++;
    else
        hist_ms[ms < HIST_N ? ms : HIST_N - 1]++;
    if (r->n_written < r->n) return 0;
    /* the last token: the slot is free for the next request, the stream ends */
    release_slot(r);
    timing_t tm = true_timings(r);
    buf_t b = {0};
    int rc;
    if (r->stream) {
        build_tail(r, &tm, &b);
        rc = conn_write(r->c, b.p, b.len, SEG_FINAL);
    } else {
        buf_t body = {0};
        build_whole(r, &tm, &body);
        rc = send_json(r->c, 200, &body, r->keep, SEG_FINAL);
        b_free(&body);
    }
    b_free(&b);
    return rc;
}

/* the request's last bytes are out: log it, then the connection's next request */
static int req_complete(req_t *r, int64_t t) {
    conn_t *c = r->c;
    r->t_final = t;
    truth_write(r, 1);
    st_completed++;
    c->req = NULL;
    req_free_later(r);
    if (!r->keep) {
        c->closing = 1;
        if (c->seg0 == c->nseg) {
            conn_close(c);
            return -1;
        }
        return 0;
    }
    process_input(c);
    return c->dead ? -1 : 0;
}

static int on_sent(conn_t *c, long long kind, int64_t t) {
    req_t *r = c->req;
    if (!r) return 0;
    if (kind == SEG_FINAL) return req_complete(r, t);
    if (kind >= 0) return token_done(r, kind, t);
    return 0;
}

/* the token due now: one send (streams) or a stamp (not streamed) */
static void emit_token(req_t *r) {
    long long k = r->next_k++;
    int last = k == r->n - 1;
    if (k >= r->cap) { /* room for due[k] and, later, t_tok[k] */
        long long cap = r->cap ? r->cap * 2 : 64;
        if (cap > r->n) cap = r->n;
        r->cap = cap;
        r->t_tok = xrealloc(r->t_tok, (size_t)cap * 8);
        r->due = xrealloc(r->due, (size_t)cap * 8);
    }
    r->due[k] = r->next_due;
    if (!last) { /* next token due one gap later (absolute: no drift) */
        r->next_due += gap_ns();
        heap_push(r);
    }
    if (r->stream) {
        buf_t *data = (last && r->api >= API_OAI_CMPL) ? &r->tok_last : &r->tok;
        conn_write(r->c, data->p, data->len, k);
    } else {
        token_done(r, k, now_ns());
    }
}

static void run_due(void) {
    int64_t now = now_ns();
    for (int batch = 0; heap_n && batch < BATCH; batch++) {
        req_t *r = heap[0];
        if (r->next_due > now) {
            now = now_ns();
            if (r->next_due > now) break;
        }
        heap_remove(r);
        emit_token(r);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* HTTP requests */

typedef struct {
    const char *method, *target;
    size_t mlen, tlen;
    const char *hk[100], *hv[100];
    size_t hkl[100], hvl[100];
    int nh;
} head_t;

static int hdr_space(unsigned char c) { /* str.strip() on a Latin-1 decoded string */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0;
}
/* headers.get(name): the last value of a header, lower-cased key */
static const char *hget(head_t *h, const char *name, size_t *len) {
    size_t nl = strlen(name);
    for (int i = h->nh; i-- > 0;)
        if (h->hkl[i] == nl && !strncasecmp(h->hk[i], name, nl)) {
            *len = h->hvl[i];
            return h->hv[i];
        }
    return NULL;
}
static int hval_is(head_t *h, const char *name, const char *value) {
    size_t len;
    const char *v = hget(h, name, &len);
    return v && len == strlen(value) && !strncasecmp(v, value, len);
}

static int parse_head(const char *p, size_t len, head_t *h) {
    memset(h, 0, sizeof *h);
    const char *end = p + len, *line_end = memmem(p, len, "\r\n", 2);
    if (!line_end) line_end = end;
    const char *sp1 = memchr(p, ' ', (size_t)(line_end - p));
    if (!sp1) return -1;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1));
    if (!sp2) return -1;
    h->method = p;
    h->mlen = (size_t)(sp1 - p);
    h->target = sp1 + 1;
    h->tlen = (size_t)(sp2 - sp1 - 1);
    const char *q = memchr(h->target, '?', h->tlen);
    if (q) h->tlen = (size_t)(q - h->target);
    const char *l = line_end + 2;
    while (l < end) {
        const char *e = memmem(l, (size_t)(end - l), "\r\n", 2);
        if (!e) e = end;
        const char *colon = memchr(l, ':', (size_t)(e - l));
        if (colon && h->nh < 100) {
            const char *ks = l, *ke = colon, *vs = colon + 1, *ve = e;
            while (ks < ke && hdr_space((unsigned char)*ks)) ks++;
            while (ke > ks && hdr_space((unsigned char)ke[-1])) ke--;
            while (vs < ve && hdr_space((unsigned char)*vs)) vs++;
            while (ve > vs && hdr_space((unsigned char)ve[-1])) ve--;
            h->hk[h->nh] = ks;
            h->hkl[h->nh] = (size_t)(ke - ks);
            h->hv[h->nh] = vs;
            h->hvl[h->nh] = (size_t)(ve - vs);
            h->nh++;
        }
        l = e + 2;
    }
    return 0;
}

static int parse_hex(const char *s, size_t n, size_t *out) {
    /* int(size_line.split(b";")[0].strip() or b"0", 16) */
    const char *semi = memchr(s, ';', n);
    if (semi) n = (size_t)(semi - s);
    while (n && hdr_space((unsigned char)*s)) s++, n--;
    while (n && hdr_space((unsigned char)s[n - 1])) n--;
    if (!n) {
        *out = 0;
        return 0;
    }
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2, n -= 2;
    size_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int d = isdigit((unsigned char)s[i]) ? s[i] - '0'
                : (s[i] >= 'a' && s[i] <= 'f') ? s[i] - 'a' + 10
                : (s[i] >= 'A' && s[i] <= 'F') ? s[i] - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + (size_t)d;
        if (v > MAX_BODY) return -2;
    }
    *out = v;
    return 0;
}

static void dispatch(conn_t *c, head_t *h, const char *body, size_t blen, int64_t t_body,
                     int64_t t_arrive, int kernel);

/* A received byte range (up to running byte count end) and the kernel's timestamp of it. At
 * RX_SPANS ranges the newest is extended instead (its bytes then get the later timestamp). */
static void rx_push(conn_t *c, uint64_t end, int64_t t) {
    if (c->rx_n == RX_SPANS) {
        int last = (c->rx0 + c->rx_n - 1) % RX_SPANS;
        c->rx[last].end = end;
        c->rx[last].t = t;
        return;
    }
    int i = (c->rx0 + c->rx_n++) % RX_SPANS;
    c->rx[i].end = end;
    c->rx[i].t = t;
}

/* When the request ending at running byte count end arrived: the kernel timestamp of the
 * received range holding its last byte (for TCP, that of the last skb the recvmsg returning it
 * read, so never earlier than the byte itself), ranges wholly consumed dropped. Clamped to
 * [the previous request's arrival on this connection, t_body]; *kernel is 0 and the result
 * t_body when there is no plausible kernel timestamp (none, or not within an hour before
 * t_body up to 1 ms after it, the conversion's margin). */
static int64_t rx_arrival(conn_t *c, uint64_t end, int64_t t_body, int *kernel) {
    int64_t t = INT64_MIN;
    while (c->rx_n > 0) {
        int i = c->rx0;
        if (c->rx[i].end >= end) {
            t = c->rx[i].t;
            if (c->rx[i].end == end) {
                c->rx0 = (c->rx0 + 1) % RX_SPANS;
                c->rx_n--;
            }
            break;
        }
        c->rx0 = (c->rx0 + 1) % RX_SPANS;
        c->rx_n--;
    }
    *kernel = t != INT64_MIN && t > t_body - 3600 * 1000000000LL && t <= t_body + 1000000;
    if (!*kernel) t = t_body;
    if (t > t_body) t = t_body;
    if (t < c->last_arrive) t = c->last_arrive;
    c->last_arrive = t;
    return t;
}

/* Parse and answer the requests waiting in the input buffer, one at a time. */
static void process_input(conn_t *c) {
    while (!c->dead && !c->req && !c->closing) {
        char *p = c->in.p + c->in_off;
        size_t avail = c->in.len - c->in_off;
        char *he = avail ? memmem(p, avail, "\r\n\r\n", 4) : NULL;
        if (!he || (size_t)(he - p) > MAX_HEADER) {
            if (he || avail > MAX_HEADER) {
                send_error(c, 413, "headers too large", 17, 0);
                return;
            }
            if (c->rd_eof) conn_end(c);
            break;
        }
        size_t hlen = (size_t)(he - p) + 4;
        head_t h;
        if (parse_head(p, hlen - 4, &h) < 0) {
            conn_close(c); /* not HTTP: pacer.py dropped such a connection too */
            return;
        }
        if (hval_is(&h, "expect", "100-continue") && !c->continue_sent) {
            c->continue_sent = 1;
            if (conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, SEG_PLAIN) < 0) return;
            p = c->in.p + c->in_off;
            parse_head(p, hlen - 4, &h);
        }
        size_t tel;
        const char *te = hget(&h, "transfer-encoding", &tel);
        int chunked = 0;
        if (te)
            for (size_t i = 0; i + 7 <= tel; i++)
                if (!strncasecmp(te + i, "chunked", 7)) chunked = 1;
        buf_t dechunked = {0};
        const char *body;
        size_t blen, used;
        if (chunked) {
            size_t off = hlen;
            int complete = 0, bad = 0;
            while (1) {
                char *le = memmem(p + off, avail - off, "\r\n", 2);
                if (!le) break;
                size_t size;
                int rc = parse_hex(p + off, (size_t)(le - (p + off)), &size);
                if (rc < 0) {
                    bad = 1;
                    break;
                }
                off = (size_t)(le - p) + 2;
                if (size == 0) { /* trailers, up to an empty line */
                    while (1) {
                        char *te2 = memmem(p + off, avail - off, "\r\n", 2);
                        if (!te2) break;
                        size_t ll = (size_t)(te2 - (p + off));
                        off += ll + 2;
                        if (ll == 0) {
                            complete = 1;
                            break;
                        }
                    }
                    break;
                }
                if (avail - off < size + 2) break;
                b_add(&dechunked, p + off, size);
                off += size + 2;
                if (dechunked.len > MAX_BODY) {
                    bad = 1;
                    break;
                }
            }
            if (bad) {
                b_free(&dechunked);
                conn_close(c);
                return;
            }
            if (!complete) {
                b_free(&dechunked);
                if (c->rd_eof) conn_end(c);
                break;
            }
            body = dechunked.p ? dechunked.p : "";
            blen = dechunked.len;
            used = off;
        } else {
            size_t cll;
            const char *cl = hget(&h, "content-length", &cll);
            unsigned long long n = 0;
            if (cl && cll) {
                for (size_t i = 0; i < cll; i++) {
                    if (!isdigit((unsigned char)cl[i]) && !(i == 0 && cl[i] == '+')) {
                        conn_close(c);
                        return;
                    }
                    if (isdigit((unsigned char)cl[i])) n = n * 10 + (unsigned)(cl[i] - '0');
                    if (n > MAX_BODY) {
                        send_error(c, 413, "body too large", 14, 0);
                        return;
                    }
                }
            }
            if (avail - hlen < n) {
                if (c->rd_eof) conn_end(c);
                break;
            }
            body = p + hlen;
            blen = (size_t)n;
            used = hlen + (size_t)n;
        }
        int64_t t_body = now_ns();
        int kernel;
        int64_t t_arrive = rx_arrival(c, c->rx_used + used, t_body, &kernel);
        c->rx_used += used;
        /* the request is consumed before it is answered: keep a copy of what is needed */
        char *copy = xmalloc(used);
        memcpy(copy, p, used);
        head_t h2;
        parse_head(copy, hlen - 4, &h2);
        const char *body2 = chunked ? body : copy + hlen;
        c->in_off += used;
        if (c->in_off == c->in.len) c->in.len = c->in_off = 0;
        c->continue_sent = 0;
        dispatch(c, &h2, body2, blen, t_body, t_arrive, kernel);
        free(copy);
        b_free(&dechunked);
    }
    if (!c->dead) conn_update_events(c);
}

static void info_answer(conn_t *c, const char *method, const char *path, const char *body,
                        size_t blen, int keep);

static void generate(conn_t *c, int api, jv *req, head_t *h, int64_t t_body, int64_t t_arrive,
                     int kernel, int keep);

static void dispatch(conn_t *c, head_t *h, const char *body, size_t blen, int64_t t_body,
                     int64_t t_arrive, int kernel) {
    char method[32];
    size_t ml = h->mlen < sizeof method - 1 ? h->mlen : sizeof method - 1;
    for (size_t i = 0; i < ml; i++) method[i] = (char)toupper((unsigned char)h->method[i]);
    method[ml] = 0;
    size_t pl = h->tlen;
    while (pl > 0 && h->target[pl - 1] == '/') pl--;
    char *path = pl ? xstrndup(h->target, pl) : xstrndup("/", 1);
    pl = strlen(path);
    int keep = !hval_is(h, "connection", "close");
    static const struct {
        const char *path;
        int api;
    } routes[] = {{"/completion", API_LLAMA}, {"/completions", API_LLAMA},
                  {"/api/generate", API_OLLAMA}, {"/v1/completions", API_OAI_CMPL},
                  {"/v1/chat/completions", API_OAI_CHAT}};
    int api = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (pl == strlen(routes[i].path) && !memcmp(path, routes[i].path, pl)) api = routes[i].api;
    if (api >= 0) {
        if (strcmp(method, "POST")) {
            buf_t m = {0};
            b_add(&m, path, pl);
            b_adds(&m, " wants POST");
            send_error(c, 405, m.p, m.len, keep);
            b_free(&m);
        } else {
            arena_t ar = {0};
            jv *req = blen ? json_parse(body, blen, &ar) : NULL;
            if (!blen) { /* json.loads(b"{}") */
                static const char empty[] = "{}";
                req = json_parse(empty, 2, &ar);
            }
            if (!req)
                send_error(c, 400, "body is not JSON", 16, keep);
            else if (req->type != J_OBJ)
                send_error(c, 400, "body is not a JSON object", 25, keep);
            else
                generate(c, api, req, h, t_body, t_arrive, kernel, keep);
            ar_free(&ar);
        }
    } else {
        info_answer(c, method, path, body, blen, keep);
    }
    free(path);
}

static void info_answer(conn_t *c, const char *method, const char *path, const char *body,
                        size_t blen, int keep) {
    buf_t b = {0}, tag = {0};
    const char *m = cfg.model;
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    b_adds(&tag, m);
    if (!strchr(m, ':')) b_adds(&tag, ":latest");
    static const char details[] = "{\"format\":\"gguf\",\"family\":\"pacer\",\"parameter_size\":"
                                  "\"0\",\"quantization_level\":\"none\"}";
    int found = 1;
    if (get && !strcmp(path, "/health")) {
        b_adds(&b, "{\"status\":\"ok\"}");
    } else if (get && !strcmp(path, "/props")) {
        b_printf(&b, "{\"default_generation_settings\":{\"n_ctx\":%d},\"total_slots\":%d,"
                     "\"model_path\":", cfg.n_ctx, cfg.slots > 0 ? cfg.slots : 1);
        buf_t mp = {0};
        b_adds(&mp, m);
        b_adds(&mp, ".gguf");
        b_jstr(&b, mp.p, mp.len, 0);
        b_free(&mp);
        b_adds(&b, ",\"model_ftype\":\"none\",\"build_info\":\"slotbench-pacer\","
                   "\"modalities\":{\"vision\":false,\"audio\":false}}");
    } else if (get && !strcmp(path, "/slots")) {
        int n = cfg.slots > 0 ? cfg.slots : 1;
        b_addc(&b, '[');
        for (int i = 0; i < n; i++)
            b_printf(&b, "%s{\"id\":%d,\"n_ctx\":%d,\"is_processing\":%s}", i ? "," : "", i,
                     cfg.n_ctx, i < active ? "true" : "false");
        b_addc(&b, ']');
    } else if (post && !strcmp(path, "/tokenize")) {
        arena_t ar = {0};
        jv *req = blen ? json_parse(body, blen, &ar) : NULL;
        if (!blen) req = json_parse("{}", 2, &ar);
        if (!req || req->type != J_OBJ) {
            ar_free(&ar);
            send_error(c, 400, "body is not a JSON object", 25, keep);
            goto out;
        }
        jv *content = jget(req, "content");
        int words = 0;
        if (content && content->type == J_STR) {
            words = count_words(content->s, content->slen);
        } else if (content) {
            buf_t s = {0};
            b_pystr(&s, content, 0);
            words = count_words(s.p, s.len);
            b_free(&s);
        }
        ar_free(&ar);
        b_adds(&b, "{\"tokens\":[");
        for (int i = 1; i <= words; i++) {
            if (i > 1) b_addc(&b, ',');
            b_int(&b, i);
        }
        b_adds(&b, "]}");
    } else if (get && !strcmp(path, "/v1/models")) {
        b_adds(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        b_jstrz(&b, m);
        b_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"slotbench-pacer\"}]}",
                 started_wall);
    } else if (get && !strcmp(path, "/api/version")) {
        b_adds(&b, "{\"version\":\"0.0.0-pacer\"}");
    } else if (get && !strcmp(path, "/api/tags")) {
        char now[40];
        iso_now(now);
        b_adds(&b, "{\"models\":[{\"name\":");
        b_jstr(&b, tag.p, tag.len, 0);
        b_adds(&b, ",\"model\":");
        b_jstr(&b, tag.p, tag.len, 0);
        b_adds(&b, ",\"digest\":\"");
        for (int i = 0; i < 64; i++) b_addc(&b, '0');
        b_adds(&b, "\",\"size\":0,\"modified_at\":");
        b_jstrz(&b, now);
        b_adds(&b, ",\"details\":");
        b_adds(&b, details);
        b_adds(&b, "}]}");
    } else if (post && !strcmp(path, "/api/show")) {
        b_adds(&b, "{\"details\":");
        b_adds(&b, details);
        b_printf(&b, ",\"model_info\":{\"general.architecture\":\"pacer\","
                     "\"general.parameter_count\":0,\"pacer.context_length\":%d}}", cfg.n_ctx);
    } else if (get && !strcmp(path, "/api/ps")) {
        b_adds(&b, "{\"models\":[{\"name\":");
        b_jstr(&b, tag.p, tag.len, 0);
        b_adds(&b, ",\"model\":");
        b_jstr(&b, tag.p, tag.len, 0);
        b_printf(&b, ",\"size\":0,\"size_vram\":0,\"context_length\":%d,"
                     "\"expires_at\":\"2099-01-01T00:00:00Z\"}]}", cfg.n_ctx);
    } else {
        found = 0;
    }
    if (found) {
        if (!keep) c->closing = 1;
        send_json(c, 200, &b, keep, SEG_PLAIN);
    } else {
        buf_t msg = {0};
        b_printf(&msg, "no route %s ", method);
        b_adds(&msg, path);
        send_error(c, 404, msg.p, msg.len, keep);
        b_free(&msg);
    }
out:
    b_free(&b);
    b_free(&tag);
}

/* the prompt's text, as pacer.py's _prompt_text read it */
static void prompt_text(int api, jv *req, buf_t *out) {
    if (api == API_OAI_CHAT) {
        jv *msgs = jget(req, "messages");
        if (!msgs || msgs->type != J_ARR) return;
        int first = 1;
        for (size_t i = 0; i < msgs->n; i++) {
            jv *m = msgs->items[i];
            if (m->type != J_OBJ) continue;
            jv *content = jget(m, "content");
            if (!content) continue;
            if (content->type == J_STR) {
                if (!first) b_addc(out, '\n');
                first = 0;
                b_add(out, content->s, content->slen);
            } else if (content->type == J_ARR) {
                for (size_t k = 0; k < content->n; k++) {
                    jv *part = content->items[k];
                    if (part->type != J_OBJ) continue;
                    if (!first) b_addc(out, '\n');
                    first = 0;
                    jv *text = jget(part, "text");
                    if (text && text->type == J_STR) b_add(out, text->s, text->slen);
                }
            }
        }
        return;
    }
    jv *prompt = jget(req, "prompt");
    if (!prompt) return;
    if (prompt->type == J_ARR) { /* a list of prompts / token ids: the first */
        if (!prompt->n) return;
        prompt = prompt->items[0];
    }
    if (prompt->type == J_STR) {
        b_add(out, prompt->s, prompt->slen);
    } else if (prompt->type == J_ARR) { /* " ".join(map(str, prompt)) */
        for (size_t i = 0; i < prompt->n; i++) {
            if (i) b_addc(out, ' ');
            b_pystr(out, prompt->items[i], 0);
        }
    } else if (prompt->type == J_OBJ) {
        for (size_t i = 0; i < prompt->n; i++) {
            if (i) b_addc(out, ' ');
            b_add(out, prompt->keys[i], prompt->klens[i]);
        }
    }
}

static long long requested_tokens(int api, jv *req) {
    jv *n;
    if (api == API_LLAMA) {
        n = jget(req, "n_predict");
        if (!n) n = jget(req, "max_tokens");
    } else if (api == API_OLLAMA) {
        jv *opts = jget(req, "options");
        n = opts && opts->type == J_OBJ ? jget(opts, "num_predict") : NULL;
    } else {
        n = jget(req, "max_completion_tokens");
        if (!n) n = jget(req, "max_tokens");
    }
    long long v = jint(n);
    return v > 0 ? v : -1;
}

static void generate(conn_t *c, int api, jv *body, head_t *h, int64_t t_body, int64_t t_arrive,
                     int kernel, int keep) {
    buf_t prompt = {0};
    prompt_text(api, body, &prompt);
    long long seq = ++seq_counter;
    jv *sv = jget(body, "stream");
    int stream = sv ? jtruthy(sv) : api == API_OLLAMA; /* Ollama streams unless told not to */
    jv *model = jget(body, "model");
    if (api == API_OLLAMA && prompt.len == 0 && !stream) {
        /* a model load (slotbench's warm-up): answered at once, no tokens, not logged */
        char now[40];
        iso_now(now);
        buf_t b = {0};
        b_adds(&b, "{\"model\":");
        if (model)
            b_jdump(&b, model);
        else
            b_jstrz(&b, cfg.model);
        b_adds(&b, ",\"created_at\":");
        b_jstrz(&b, now);
        b_adds(&b, ",\"response\":\"\",\"done\":true,\"done_reason\":\"load\"}");
        if (!keep) c->closing = 1;
        send_json(c, 200, &b, keep, SEG_PLAIN);
        b_free(&b);
        b_free(&prompt);
        return;
    }
    req_t *r = xcalloc(1, sizeof *r);
    r->c = c;
    r->api = api;
    r->stream = stream;
    r->keep = keep;
    r->seq = seq;
    r->heap_idx = -1;
    r->t_slot = -1;
    r->nonce = find_nonce(prompt.p ? prompt.p : "", prompt.len);
    if (r->nonce) {
        r->rid = xstrndup(r->nonce, strlen(r->nonce));
    } else {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "#%lld", seq);
        r->rid = xstrndup(tmp, strlen(tmp));
    }
    size_t xl;
    const char *x = hget(h, "x-request-id", &xl);
    if (x) {
        r->xrid = xstrndup(x, xl);
        r->xrid_len = xl;
    }
    r->asked = requested_tokens(api, body);
    r->n = cfg.tokens > 0 ? cfg.tokens : r->asked > 0 ? r->asked : cfg.default_tokens;
    if (r->n < 1) r->n = 1;
    r->prompt_tokens = count_words(prompt.p ? prompt.p : "", prompt.len);
    jv *so = jget(body, "stream_options");
    r->want_usage = so && so->type == J_OBJ && jtruthy(jget(so, "include_usage"));
    buf_t mj = {0};
    if (jtruthy(model))
        b_jdump(&mj, model);
    else
        b_jstrz(&mj, cfg.model);
    r->model_json = mj.p;
    r->created = (long long)time(NULL);
    iso_now(r->created_at);
    snprintf(r->id, sizeof r->id, "cmpl-pacer-%lld", seq);
    r->t_body = t_body;
    r->t_arrive = t_arrive;
    st_arrive_kernel += kernel;
    build_token(r, &r->tok, 0);
    if (api >= API_OAI_CMPL) build_token(r, &r->tok_last, 1);
    b_free(&prompt);
    c->req = r;
    st_requests++;
    if (in_flight++ == 0) st_busy_since = t_body;
    if (stream) {
        char head[256];
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
                         "Cache-Control: no-cache\r\nServer: slotbench-pacer\r\nConnection: %s"
                         "\r\n\r\n",
                         api == API_OLLAMA ? "application/x-ndjson" : "text/event-stream",
                         keep ? "keep-alive" : "close");
        if (conn_write(c, head, (size_t)n, SEG_PLAIN) < 0) return;
    }
    if (cfg.slots <= 0 || (active < cfg.slots && !q_head)) {
        grant_slot(r, now_ns());
    } else {
        r->queued = 1;
        if (q_tail)
            q_tail->qnext = r;
        else
            q_head = r;
        q_tail = r;
    }
}

/* ---------------------------------------------------------------------------------------- */
/* the loop */

#ifndef SO_TIMESTAMPING
#define SO_TIMESTAMPING 37
#endif
#ifndef SCM_TIMESTAMPING
#define SCM_TIMESTAMPING SO_TIMESTAMPING
#endif
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef SCM_TIMESTAMPNS
#define SCM_TIMESTAMPNS SO_TIMESTAMPNS
#endif

/* Kernel software receive timestamps on this socket: SO_TIMESTAMPING (generated at receive,
 * reported in software), else SO_TIMESTAMPNS. Returns which, or NULL. Set on the listening
 * socket too, so the kernel stamps data that arrives before accept() (a burst's requests). */
static const char *enable_rx_timestamps(int fd) {
    int flags = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (!setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags))
        return "SO_TIMESTAMPING";
    int one = 1;
    if (!setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one)) return "SO_TIMESTAMPNS";
    return NULL;
}

static void on_accept(void) {
    while (1) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        int fd = accept4(listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                fprintf(stderr, "pacer: accept: %s\n", strerror(errno));
            return;
        }
        int one = cfg.nodelay ? 1 : 0;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        enable_rx_timestamps(fd);
        conn_t *c = xcalloc(1, sizeof *c);
        c->fd = fd;
        c->id = ++conn_counter;
        c->port = -1;
        if (sa.ss_family == AF_INET)
            c->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        else if (sa.ss_family == AF_INET6)
            c->port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
        c->events = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = conns;
        if (conns) conns->prev = c;
        conns = c;
    }
}

/* recv() that also takes the kernel's receive timestamp of the data returned (CLOCK_MONOTONIC
 * ns, INT64_MIN when none came) */
static ssize_t recv_stamped(int fd, void *p, size_t len, int64_t *t) {
    union {
        char buf[256];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {p, len};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof ctl.buf;
    *t = INT64_MIN;
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n <= 0) return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET) continue;
        struct timespec ts[3]; /* SCM_TIMESTAMPING: software, (deprecated), hardware */
        if (cm->cmsg_type == SCM_TIMESTAMPING && cm->cmsg_len >= CMSG_LEN(sizeof ts))
            memcpy(ts, CMSG_DATA(cm), sizeof ts);
        else if (cm->cmsg_type == SCM_TIMESTAMPNS && cm->cmsg_len >= CMSG_LEN(sizeof ts[0]))
            memcpy(ts, CMSG_DATA(cm), sizeof ts[0]);
        else
            continue;
        if (ts[0].tv_sec || ts[0].tv_nsec)
            *t = (int64_t)ts[0].tv_sec * 1000000000LL + ts[0].tv_nsec - real_minus_mono;
    }
    return n;
}

static void on_readable(conn_t *c) {
    while (!c->dead) {
        b_reserve(&c->in, 65536);
        size_t room = c->in.cap - c->in.len - 1;
        int64_t t_rx;
        ssize_t n = recv_stamped(c->fd, c->in.p + c->in.len, room, &t_rx);
        if (n > 0) {
            c->in.len += (size_t)n;
            c->rx_total += (uint64_t)n;
            rx_push(c, c->rx_total, t_rx);
            if ((size_t)n < room) break; /* the socket is drained */
            if (c->req && c->in.len - c->in_off > PAUSE_INPUT) break;
            continue;
        }
        if (n == 0) {
            /* the client closed (or half-closed) its side: what is in flight goes on, as
             * pacer.py did, until a write fails; nothing more will be read */
            c->rd_eof = 1;
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        conn_fail(c);
        return;
    }
    if (c->dead) return;
    if (!c->req) process_input(c);
    if (!c->dead && c->rd_eof && !c->req) conn_end(c);
    if (!c->dead) conn_update_events(c);
}

static void arm_timer(void) {
    int64_t want = heap_n ? heap[0]->next_due : 0;
    if (want == armed) return;
    struct itimerspec its = {0};
    its.it_value.tv_sec = want / 1000000000LL;
    its.it_value.tv_nsec = want % 1000000000LL;
    if (want && !its.it_value.tv_sec && !its.it_value.tv_nsec) its.it_value.tv_nsec = 1;
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
    armed = want;
}

static void reap(void) {
    while (dead_conns) {
        conn_t *c = dead_conns;
        dead_conns = c->dead_next;
        b_free(&c->in);
        b_free(&c->out);
        free(c->segs);
        free(c);
    }
    while (dead_reqs) {
        req_t *r = dead_reqs;
        dead_reqs = r->dead_next;
        req_free(r);
    }
}

/* a lateness percentile in ms (the middle of its bucket: +-0.5 us below 100 ms) */
static double hist_pct(double q, long long total) {
    if (!total) return 0;
    long long rank = (long long)ceil(q * (double)total), seen = 0;
    if (rank < 1) rank = 1;
    for (long long i = 0; i < HIST_N; i++) {
        seen += hist_us[i];
        if (seen >= rank) return (double)i / 1000.0 + 0.0005;
    }
    for (long long i = 0; i < HIST_N; i++) {
        seen += hist_ms[i];
        if (seen >= rank) return (double)i + 0.5;
    }
    return (double)late_max_all / 1e6;
}

static void summary(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_u = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    double cpu_s = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    double busy = (double)st_busy_ns / 1e9;
    fprintf(stderr,
            "pacer: %lld requests (%lld completed), %lld tokens written, %.0f tok/s over %.3f s "
            "busy; write lateness p50 %.3f p99 %.3f max %.3f ms; cpu %.3f s (user %.3f sys "
            "%.3f); %lld wakeups; kernel arrival time for %lld of %lld requests (%s)\n",
            st_requests, st_completed, st_tokens, busy > 0 ? (double)st_tokens / busy : 0.0, busy,
            hist_pct(0.5, st_tokens), hist_pct(0.99, st_tokens), (double)late_max_all / 1e6,
            cpu_u + cpu_s, cpu_u, cpu_s, st_wakeups, st_arrive_kernel, st_requests, ts_kind);
}

static void usage(FILE *f) {
    fputs("usage: pacer [--host HOST] [--port PORT] [--ttft-ms MS] [--gap-ms MS] [--tokens N]\n"
          "             [--default-tokens N] [--slots N] [--alpha A] [--model ID]\n"
          "             [--truth-log PATH] [--no-nodelay] [--cpu N] [--n-ctx N]\n\n"
          "A deterministic pacing server: a fake LLM whose every timing is known.\n\n"
          "  --host HOST          loopback only (default 127.0.0.1)\n"
          "  --port PORT          0 picks a free port (default)\n"
          "  --ttft-ms MS         slot acquired -> first token (default 50)\n"
          "  --gap-ms MS          base inter-token gap (default 10)\n"
          "  --tokens N           fixed output tokens per request; default: the request's\n"
          "                       n_predict/num_predict/max_tokens\n"
          "  --default-tokens N   output tokens when the request names none (default 16)\n"
          "  --slots N            parallel slots; requests beyond queue (default 0: unlimited)\n"
          "  --alpha A            gap = gap_ms * (1 + alpha*(active-1)) (default 0)\n"
          "  --model ID           model id served (default pacer)\n"
          "  --truth-log PATH     append one JSON line per generation request here\n"
          "  --no-nodelay         leave Nagle's algorithm on (to study its effect)\n"
          "  --cpu N              pin the server to CPU N\n"
          "  --n-ctx N            context size the info routes report (default 4096)\n\n"
          "Prints the bound URL on its first stdout line; SIGTERM/SIGINT stop it, with a\n"
          "summary line on stderr.\n",
          f);
}

static double arg_float(const char *flag, const char *v) {
    char *end;
    double d = strtod(v, &end);
    if (!*v || *end || !isfinite(d)) die("argument %s: invalid float value: '%s'", flag, v);
    return d;
}
static long long arg_int(const char *flag, const char *v) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (!*v || *end || errno) die("argument %s: invalid int value: '%s'", flag, v);
    return n;
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *val = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!strcmp(a, "--no-nodelay")) {
            cfg.nodelay = 0;
            continue;
        }
        char name[64];
        char *eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = 0;
            val = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", a);
            if (i + 1 >= argc) {
                usage(stderr);
                die("argument %s: expected one argument", a);
            }
            val = argv[++i];
        }
        if (!strcmp(name, "--host")) cfg.host = val;
        else if (!strcmp(name, "--port")) cfg.port = (int)arg_int(name, val);
        else if (!strcmp(name, "--ttft-ms")) cfg.ttft_ms = arg_float(name, val);
        else if (!strcmp(name, "--gap-ms")) cfg.gap_ms = arg_float(name, val);
        else if (!strcmp(name, "--tokens")) cfg.tokens = arg_int(name, val);
        else if (!strcmp(name, "--default-tokens")) cfg.default_tokens = arg_int(name, val);
        else if (!strcmp(name, "--slots")) cfg.slots = (int)arg_int(name, val);
        else if (!strcmp(name, "--alpha")) cfg.alpha = arg_float(name, val);
        else if (!strcmp(name, "--model")) cfg.model = val;
        else if (!strcmp(name, "--truth-log")) cfg.truth_log = val;
        else if (!strcmp(name, "--cpu")) cfg.cpu = (int)arg_int(name, val);
        else if (!strcmp(name, "--n-ctx")) cfg.n_ctx = (int)arg_int(name, val);
        else {
            usage(stderr);
            die("unrecognized arguments: %s", a);
        }
    }
    if (cfg.tokens > MAX_TOKENS) cfg.tokens = MAX_TOKENS;
    if (cfg.default_tokens > MAX_TOKENS) cfg.default_tokens = MAX_TOKENS;
}

static void listen_on(void) {
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg.port);
    int rc = getaddrinfo(cfg.host, port, &hints, &res);
    if (rc) die("cannot resolve %s: %s", cfg.host, gai_strerror(rc));
    int err = 0;
    for (ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
            listen_fd = fd;
            const char *kind = enable_rx_timestamps(fd);
            if (kind) ts_kind = kind;
            break;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    if (listen_fd < 0) die("cannot listen on %s:%d: %s", cfg.host, cfg.port, strerror(err));
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    getsockname(listen_fd, (struct sockaddr *)&sa, &sl);
    cfg.port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&sa)->sin_port);
}

int main(int argc, char **argv) {
    setlocale(LC_CTYPE, "C.UTF-8");
    parse_args(argc, argv);
    if (cfg.cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cfg.cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0)
            die("cannot pin to CPU %d: %s", cfg.cpu, strerror(errno));
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    ttft_ns = (int64_t)llround(cfg.ttft_ms * 1e6);
    if (ttft_ns < 0) ttft_ns = 0;
    started_wall = (long long)time(NULL);
    hist_us = xcalloc(HIST_N, sizeof *hist_us);
    hist_ms = xcalloc(HIST_N, sizeof *hist_ms);
    if (cfg.truth_log) {
        truth_fd = open(cfg.truth_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (truth_fd < 0) die("cannot open truth log %s: %s", cfg.truth_log, strerror(errno));
    }
    clock_offset_refresh();
    listen_on();

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (sig_fd < 0 || timer_fd < 0 || epfd < 0) die("setup: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.u64 = TAG_LISTEN;
    epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &ev);
    ev.data.u64 = TAG_TIMER;
    epoll_ctl(epfd, EPOLL_CTL_ADD, timer_fd, &ev);
    ev.data.u64 = TAG_SIGNAL;
    epoll_ctl(epfd, EPOLL_CTL_ADD, sig_fd, &ev);

    if (strchr(cfg.host, ':'))
        printf("http://[%s]:%d\n", cfg.host, cfg.port);
    else
        printf("http://%s:%d\n", cfg.host, cfg.port);
    fflush(stdout);

    struct epoll_event evs[512];
    int stop = 0;
    while (!stop) {
        run_due();
        reap();
        arm_timer();
        int n = epoll_wait(epfd, evs, 512, -1);
        st_wakeups++;
        clock_offset_refresh();
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_TIMER) {
                armed = -1; /* fired: re-arm (settime also clears its readiness) */
                run_due();
                continue;
            }
            if (tag == TAG_LISTEN) {
                on_accept();
                continue;
            }
            if (tag == TAG_SIGNAL) {
                stop = 1;
                continue;
            }
            conn_t *c = evs[i].data.ptr;
            if (c->dead) continue;
            uint32_t e = evs[i].events;
            if (e & (EPOLLERR | EPOLLHUP)) {
                conn_fail(c);
                continue;
            }
            if (e & EPOLLOUT) {
                if (conn_flush(c) < 0) continue;
            }
            if (e & EPOLLIN) on_readable(c);
        }
    }
    /* stop: requests in flight are logged with completed false */
    stopping = 1;
    close(listen_fd);
    for (conn_t *c = conns; c; c = c->next)
        if (c->req) req_abort(c->req);
    reap();
    if (truth_fd >= 0) close(truth_fd);
    summary();
    return 0;
}
