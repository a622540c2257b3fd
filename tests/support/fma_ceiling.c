/* An FMA ceiling compiled from C, independent of the hand-assembled loops in accounting/hardware/vector_clock.py.
 *
 * One thread per CPU named on the command line, each pinned to its CPU, runs twelve independent float32 FMA
 * chains on the widest vectors it was compiled for (-mavx512f: zmm, else -mavx2 -mfma: ymm); all threads start
 * each run together. Prints the all-core FLOP/s: the sum over threads of each one's fastest run, timed by the
 * thread's own CPU time (a run preempted by other work is not billed for the wait).
 *
 *   gcc -O2 -mavx512f -mfma -pthread fma_ceiling.c -o fma_ceiling && ./fma_ceiling 0 1
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef __AVX512F__
typedef __m512 vector;
#define LANES 16
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define BROADCAST(x) _mm512_set1_ps(x)
#define SUM(x) _mm512_reduce_add_ps(x)
#define ADD(a, b) _mm512_add_ps(a, b)
#else
typedef __m256 vector;
#define LANES 8
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define BROADCAST(x) _mm256_set1_ps(x)
#define ADD(a, b) _mm256_add_ps(a, b)
static float SUM(__m256 x) { float v[8]; _mm256_storeu_ps(v, x); return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]; }
#endif

#define CHAINS 12
#define ITERATIONS 250000L
#define WARM_UP 10
#define REPEATS 75

static pthread_barrier_t start;
static volatile float sink;
static float multiplicand = 1e-3f;

typedef struct { int cpu; double fastest; } job;

static double thread_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec + 1e-9 * now.tv_nsec;
}

/* noipa: the compiler must not see that this call has no side effects and move it out of the timed span */
__attribute__((noipa)) static float chains(long iterations) {
    vector x = BROADCAST(multiplicand), y = BROADCAST(multiplicand);
    vector a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = BROADCAST((float)i);  /* distinct: the compiler cannot merge the chains */
    for (long n = 0; n < iterations; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++) a[i] = FMA(x, y, a[i]);
    }
    vector total = a[0];
    for (int i = 1; i < CHAINS; i++) total = ADD(total, a[i]);
    return SUM(total);
}

static void *work(void *argument) {
    job *mine = argument;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(mine->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) { perror("pin"); exit(2); }
    for (int i = 0; i < WARM_UP; i++) sink = chains(ITERATIONS);
    mine->fastest = 1e30;
    for (int i = 0; i < REPEATS; i++) {
        pthread_barrier_wait(&start);
        double began = thread_seconds();
        sink = chains(ITERATIONS);
        double took = thread_seconds() - began;
        if (took < mine->fastest) mine->fastest = took;
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc - 1;
    if (threads < 1) { fprintf(stderr, "usage: %s CPU [CPU ...]\n", argv[0]); return 2; }
    pthread_t handles[256];
    job jobs[256];
    pthread_barrier_init(&start, NULL, threads);
    for (int i = 0; i < threads && i < 256; i++) {
        jobs[i].cpu = atoi(argv[i + 1]);
        pthread_create(&handles[i], NULL, work, &jobs[i]);
    }
    double flops = 0;
    for (int i = 0; i < threads && i < 256; i++) {
        pthread_join(handles[i], NULL);
        flops += (double)ITERATIONS * CHAINS * LANES * 2 / jobs[i].fastest;  /* a multiply-add is 2 FLOPs */
    }
    printf("%.6e\n", flops);
    return 0;
}
