/* bench_core_latency: the round trip of a cache line between two CPUs, timed by two threads
 * passing a flag back and forth (each waits for the other's write, then writes). On the
 * 2-CPU virtual machines of docs/word2vec.md the round trip changes from minute to minute
 * (about 120 ns in the fast phases, 450-650 ns in the slow ones), and with it the cost of
 * everything two training threads share: run it beside a timing to tell which phase the
 * timing was taken in.
 *
 *   bench_core_latency [CPU_A CPU_B [ROUND_TRIPS]]   (default: CPUs 0 and 1, 200,000)
 *
 * Prints "round trip N ns (CPU a <-> CPU b)". Linux only (CPU affinity). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) _Atomic long flag;
static long trips = 200000;
static int cpu_b = 1;

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *arg) {
    (void)arg;
    if (pin(cpu_b) != 0) fprintf(stderr, "bench_core_latency: cannot run on CPU %d\n", cpu_b);
    for (long i = 0; i < trips; i++) {
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int cpu_a = 0;
    if (argc >= 3) cpu_a = atoi(argv[1]), cpu_b = atoi(argv[2]);
    if (argc >= 4) trips = atol(argv[3]);
    if (argc == 2 || argc > 4 || trips < 1 || cpu_a < 0 || cpu_b < 0 || cpu_a >= CPU_SETSIZE ||
        cpu_b >= CPU_SETSIZE) {
        fprintf(stderr, "usage: bench_core_latency [CPU_A CPU_B [ROUND_TRIPS]]\n");
        return 2;
    }
    if (pin(cpu_a) != 0) {
        fprintf(stderr, "bench_core_latency: cannot run on CPU %d\n", cpu_a);
        return 1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, answer, NULL) != 0) {
        fprintf(stderr, "bench_core_latency: cannot start a thread\n");
        return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < trips; i++) {
        atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
        while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);
    double ns =
        ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)trips;
    printf("round trip %.0f ns (CPU %d <-> CPU %d)\n", ns, cpu_a, cpu_b);
    return 0;
}
