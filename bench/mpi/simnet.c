/* simnet: the network between simulated hosts (bench/mpi/simhosts.sh), with a one-way delay
 * and a link rate, for kernels without tc's netem qdisc. Plain POSIX and Linux's TUN ioctls.
 *
 *   simnet [--rate RATE] [--delay DELAY] [--jitter DELAY] [--seed S] [--limit PACKETS]
 *          [--mtu BYTES] [--dev NAME] [--net A.B.C.0] [--pidfile FILE] NETNS1 NETNS2 ...
 *
 * Host k (1-based, in the order given) is the network namespace NETNSk (a name under
 * /run/netns, as `ip netns add` makes) holding a TUN device NAME (default emb_tun, made
 * beforehand, e.g. `ip -n NETNSk tuntap add dev emb_tun mode tun`) with address A.B.C.k/24:
 * the subnet's route goes through it, loopback in the namespace stays as it is. simnet enters
 * each namespace (setns), attaches to its device, and forwards every IPv4 packet a host
 * sends to A.B.C.j to host j's device.
 *
 * Timing: every host has one full-duplex link of RATE to a switch. A packet of s bytes read
 * from host k at time t leaves k's link at u = max(t, k's link free) + s/RATE and reaches
 * host j at max(u + DELAY + jitter, j's previous arrival + s/RATE): FIFO per destination
 * (no reordering), the destination's link paced at RATE too. Jitter is uniform in
 * [-JITTER, +JITTER] (the delay stays >= 0), drawn from a generator seeded by --seed. Each
 * destination's queue holds at most --limit packets (default 1000); a packet beyond is
 * dropped, as a router's tail drop would. Other packets (IPv6, broadcast, addresses of no
 * host, larger than --mtu) are dropped and counted.
 *
 * RATE: bits per second, with k/m/g suffixes, "kbit"/"mbit"/"gbit" as tc writes them, or
 * "none" (no limit). DELAY: "5ms", "100us", "0.1ms", "2s" or a number of seconds. simnet
 * writes its pid to --pidfile once every device is attached, runs until SIGTERM or SIGINT,
 * then prints per host the packets and bytes sent and delivered and the drops, and exits 0;
 * a device that fails (removed while in use) stops it with status 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_HOSTS 64
#define BURST     64 /* packets read from one device per wake-up, for fairness between hosts */

typedef struct {
    int64_t release; /* ns, CLOCK_MONOTONIC */
    uint32_t len;
    unsigned char *data;
} packet;

typedef struct {
    int fd;
    int64_t up_free;   /* when this host's link to the switch is free again (ns) */
    int64_t down_last; /* arrival time of the last packet queued for this host (ns) */
    packet *ring;      /* its queue of packets on their way to it, FIFO */
    size_t head, count;
    uint64_t sent, sent_bytes, delivered, delivered_bytes, dropped_full, dropped_write;
} host;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rng_state;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* "1gbit", "100mbit", "500k", "2e9", "none" -> bits per second (0: no limit); -1 if bad. */
static double parse_rate(const char *s) {
    if (strcmp(s, "none") == 0) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1e3, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1e6, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1e9, end++;
    if (strcmp(end, "bit") == 0 || strcmp(end, "bps") == 0 || *end == '\0') return v * mult;
    return -1;
}

/* "5ms", "100us", "0.1ms", "2s", "0.001" -> nanoseconds; -1 if bad. */
static int64_t parse_delay(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double mult;
    if (strcmp(end, "s") == 0 || *end == '\0')
        mult = 1e9;
    else if (strcmp(end, "ms") == 0)
        mult = 1e6;
    else if (strcmp(end, "us") == 0)
        mult = 1e3;
    else if (strcmp(end, "ns") == 0)
        mult = 1;
    else
        return -1;
    if (v * mult > 3600e9) return -1;
    return (int64_t)(v * mult + 0.5);
}

/* Attaches to the TUN device `dev` inside network namespace `ns` (a name under /run/netns);
 * returns a non-blocking file descriptor, or -1 with a message. The caller's namespace is
 * restored. */
static int attach(const char *ns, const char *dev, int self_ns) {
    char path[512];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        fprintf(stderr, "simnet: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (setns(nsfd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "simnet: entering %s: %s\n", ns, strerror(errno));
        close(nsfd);
        return -1;
    }
    close(nsfd);
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        fprintf(stderr, "simnet: /dev/net/tun: %s\n", strerror(errno));
    } else {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
        snprintf(ifr.ifr_name, IFNAMSIZ, "%s", dev);
        if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
            fprintf(stderr, "simnet: attaching to %s in %s: %s\n", dev, ns, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    if (setns(self_ns, CLONE_NEWNET) != 0) {
        fprintf(stderr, "simnet: returning to the first namespace: %s\n", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

typedef struct {
    double rate;            /* bits/s, 0 = no limit */
    int64_t delay, jitter;  /* ns */
    size_t limit, mtu;      /* packets per destination queue, largest packet */
    uint32_t net;           /* A.B.C.0, host order */
    uint64_t dropped_other; /* not IPv4 to a host of the subnet, or too large */
    int nhosts;
    host h[MAX_HOSTS];
} network;

static int64_t wire_ns(const network *n, size_t len) {
    return n->rate > 0 ? (int64_t)((double)len * 8e9 / n->rate + 0.5) : 0;
}

/* Reads up to BURST packets from host `k` and queues them for their destinations. */
static void receive(network *n, int k, unsigned char *buf, size_t bufsize) {
    host *src = &n->h[k];
    for (int i = 0; i < BURST; i++) {
        ssize_t got = read(src->fd, buf, bufsize);
        if (got < 0) return; /* EAGAIN (or a transient error): nothing more now */
        size_t len = (size_t)got;
        int dst = -1;
        if (len >= 20 && (buf[0] >> 4) == 4 && len <= n->mtu) {
            uint32_t to = (uint32_t)buf[16] << 24 | (uint32_t)buf[17] << 16 |
                          (uint32_t)buf[18] << 8 | buf[19];
            uint32_t j = to & 0xff;
            if ((to & 0xffffff00u) == n->net && j >= 1 && (int)j <= n->nhosts && (int)j - 1 != k)
                dst = (int)j - 1;
        }
        if (dst < 0) {
            n->dropped_other++;
            continue;
        }
        host *d = &n->h[dst];
        src->sent++;
        src->sent_bytes += len;
        if (d->count == n->limit) {
            d->dropped_full++;
            continue;
        }
        int64_t t = now_ns(), wire = wire_ns(n, len);
        int64_t up = (src->up_free > t ? src->up_free : t) + wire;
        src->up_free = up;
        int64_t delay = n->delay;
        if (n->jitter > 0) {
            delay += (int64_t)(rng_next() % (uint64_t)(2 * n->jitter + 1)) - n->jitter;
            if (delay < 0) delay = 0;
        }
        int64_t arrive = up + delay;
        if (arrive < d->down_last + wire) arrive = d->down_last + wire;
        d->down_last = arrive;
        packet *p = &d->ring[(d->head + d->count) % n->limit];
        memcpy(p->data, buf, len);
        p->len = (uint32_t)len;
        p->release = arrive;
        d->count++;
    }
}

/* Writes every queued packet whose time has come; returns the earliest release time still
 * queued (INT64_MAX if none). */
static int64_t deliver(network *n) {
    int64_t next = INT64_MAX, t = now_ns();
    for (int k = 0; k < n->nhosts; k++) {
        host *d = &n->h[k];
        while (d->count > 0) {
            packet *p = &d->ring[d->head];
            if (p->release > t) {
                if (p->release < next) next = p->release;
                break;
            }
            if (write(d->fd, p->data, p->len) == (ssize_t)p->len) {
                d->delivered++;
                d->delivered_bytes += p->len;
            } else {
                d->dropped_write++;
            }
            d->head = (d->head + 1) % n->limit;
            d->count--;
        }
    }
    return next;
}

static int usage(void) {
    fprintf(stderr, "usage: simnet [--rate RATE] [--delay DELAY] [--jitter DELAY] [--seed S] "
                    "[--limit PACKETS] [--mtu BYTES] [--dev NAME] [--net A.B.C.0] "
                    "[--pidfile FILE] NETNS1 NETNS2 ...\n");
    return 2;
}

static int parse_args(network *n, int argc, char **argv, const char **dev, const char **pidfile,
                      int *first) {
    int i = 1;
    rng_state = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        char *end;
        if (strcmp(o, "--rate") == 0) {
            if ((n->rate = parse_rate(v)) < 0)
                return fprintf(stderr, "simnet: bad rate %s\n", v), 2;
        } else if (strcmp(o, "--delay") == 0 || strcmp(o, "--jitter") == 0) {
            int64_t d = parse_delay(v);
            if (d < 0) return fprintf(stderr, "simnet: bad %s %s\n", o + 2, v), 2;
            *(o[2] == 'd' ? &n->delay : &n->jitter) = d;
        } else if (strcmp(o, "--seed") == 0) {
            rng_state = strtoull(v, &end, 10);
            if (*end) return usage();
        } else if (strcmp(o, "--limit") == 0 || strcmp(o, "--mtu") == 0) {
            long x = strtol(v, &end, 10);
            if (*end || x < 1 || x > 65535 || (o[2] == 'm' && x < 68))
                return fprintf(stderr, "simnet: bad %s %s\n", o + 2, v), 2;
            *(o[2] == 'l' ? &n->limit : &n->mtu) = (size_t)x;
        } else if (strcmp(o, "--dev") == 0) {
            if (strlen(v) >= IFNAMSIZ) return fprintf(stderr, "simnet: name too long\n"), 2;
            *dev = v;
        } else if (strcmp(o, "--net") == 0) {
            unsigned a, b, c, z;
            if (sscanf(v, "%u.%u.%u.%u", &a, &b, &c, &z) != 4 || a > 255 || b > 255 || c > 255)
                return fprintf(stderr, "simnet: bad net %s\n", v), 2;
            n->net = a << 24 | b << 16 | c << 8;
        } else if (strcmp(o, "--pidfile") == 0) {
            *pidfile = v;
        } else {
            return usage();
        }
    }
    n->nhosts = argc - i;
    if (n->nhosts < 2 || n->nhosts > MAX_HOSTS || n->nhosts > 254) return usage();
    *first = i;
    return 0;
}

int main(int argc, char **argv) {
    static network n;
    n.limit = 1000;
    n.mtu = 1500;
    n.net = 10u << 24 | 77u << 16;
    const char *dev = "emb_tun", *pidfile = NULL;
    int first = 0, rc = parse_args(&n, argc, argv, &dev, &pidfile, &first);
    if (rc) return rc;

    /* SIGTERM and SIGINT arrive through a descriptor polled with the devices: a signal
     * unblocked only inside ppoll would stay pending while packets keep it returning. */
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    sigprocmask(SIG_BLOCK, &stop_set, NULL);
    int sfd = signalfd(-1, &stop_set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) return perror("simnet: signalfd"), 1;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake-ups to the microsecond, not 50 us late */

    int self_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self_ns < 0) return perror("simnet: /proc/self/ns/net"), 1;
    unsigned char *buf = malloc(65536);
    struct pollfd pfd[MAX_HOSTS + 1];
    rc = buf ? 0 : 1;
    for (int k = 0; k < n.nhosts && rc == 0; k++) {
        host *h = &n.h[k];
        h->fd = attach(argv[first + k], dev, self_ns);
        h->ring = calloc(n.limit, sizeof *h->ring);
        if (h->fd < 0 || !h->ring) {
            rc = 1;
            break;
        }
        for (size_t s = 0; s < n.limit && rc == 0; s++)
            if (!(h->ring[s].data = malloc(n.mtu))) rc = 1;
        pfd[k] = (struct pollfd){.fd = h->fd, .events = POLLIN};
    }
    if (rc == 0 && pidfile) {
        FILE *f = fopen(pidfile, "w");
        if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0) {
            fprintf(stderr, "simnet: cannot write %s\n", pidfile);
            rc = 1;
        }
    }
    pfd[n.nhosts] = (struct pollfd){.fd = sfd, .events = POLLIN};
    bool stop = false;
    while (rc == 0 && !stop) {
        int64_t next = deliver(&n), t = now_ns();
        struct timespec ts, *tp = NULL;
        if (next != INT64_MAX) {
            int64_t wait = next > t ? next - t : 0;
            ts = (struct timespec){.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
            tp = &ts;
        }
        int ready = ppoll(pfd, (nfds_t)n.nhosts + 1, tp, NULL);
        if (ready < 0 && errno != EINTR) {
            perror("simnet: ppoll");
            rc = 1;
        }
        if (ready > 0 && (pfd[n.nhosts].revents & POLLIN)) stop = true;
        for (int k = 0; ready > 0 && k < n.nhosts; k++) {
            if (pfd[k].revents & POLLIN) receive(&n, k, buf, 65536);
            if (pfd[k].revents & (POLLERR | POLLHUP | POLLNVAL)) { /* its device is gone */
                fprintf(stderr, "simnet: the device of host %d (%s) failed; stopping\n", k + 1,
                        argv[first + k]);
                rc = 1;
            }
        }
    }
    for (int k = 0; k < n.nhosts; k++) {
        host *h = &n.h[k];
        if (rc == 0)
            fprintf(stderr,
                    "simnet: host %d (%s): sent %llu packets (%llu bytes); delivered to it %llu "
                    "(%llu bytes); dropped at its full queue %llu, on write %llu\n",
                    k + 1, argv[first + k], (unsigned long long)h->sent,
                    (unsigned long long)h->sent_bytes, (unsigned long long)h->delivered,
                    (unsigned long long)h->delivered_bytes, (unsigned long long)h->dropped_full,
                    (unsigned long long)h->dropped_write);
        if (h->fd > 0) close(h->fd);
        for (size_t s = 0; h->ring && s < n.limit; s++) free(h->ring[s].data);
        free(h->ring);
    }
    if (rc == 0)
        fprintf(stderr, "simnet: dropped %llu other packets\n",
                (unsigned long long)n.dropped_other);
    free(buf);
    close(self_ns);
    close(sfd);
    return rc;
}
