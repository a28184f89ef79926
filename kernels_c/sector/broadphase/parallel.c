/* One job on T threads (see bp_internal.h).  C threads rather than Python threads around cffi
 * calls: the index build needs phases with a join between them (bounds, histograms, prefix sum,
 * scatter) and the query a join before its hits are put together, with no trip through the GIL
 * and no Python-side concatenation.
 *
 * The threads are kept between phases and calls (a pool): a thread created for each phase
 * started its part ~50-80 us late, measured on the 2-vCPU VM (2 000 calls of a 66 us part:
 * 146 us a call on two threads against 66 on one), seven phases a query.  A kept thread waits
 * for the next phase by spinning a short while, then sleeping on a condition variable.  Within a
 * call of several phases (an index build, a query: bp_hold), waits spin for longer: between its
 * phases the caller runs serial steps (prefix sums, allocations) and a part may finish before
 * the other, and a sleeping thread woke ~80 us after the broadcast here (a throwaway program,
 * medians of 200 phases) - in the game query on two threads, 195 of 217 phase starts found the
 * other thread asleep (31 build + query calls).  sectorbench.query on two threads, calls with and
 * without the longer spin interleaved in one process, busy host: 11.12 against 11.55 ms and
 * 11.49 against 11.92 (medians of 100 calls each).  One caller at a time uses the pool; a second
 * one, concurrently (two Python threads each in a query), creates threads as before.  After a
 * fork the child has none of the parent's threads: it starts its own.  A kept thread takes the
 * caller's floating-point environment (rounding, flush-to-zero) for each phase, as a thread
 * created by the caller inherits it, so the hits are the same for every thread count under any
 * environment.  The kept threads live in this library's code, so it must never be unloaded
 * (the Python side opens it RTLD_NODELETE). */
#include <fenv.h>
#include <pthread.h>
#include <unistd.h>

#include "bp_internal.h"

/* Pauses of a waiting thread before it sleeps: ~10 us on the 2-vCPU VM (25 ns a pause).  Game
 * 10 000 x 1 000 000 on two threads, tools/broadphase_phases.c alternated: quiet, the same as
 * 4 000 (~100 us) and as none (build + query 9.49 / 9.49 ms, 9.35 / 9.17); with a busy loop on
 * the other vCPU, 4 000 lost 0.5 ms (its spins took the CPU the other part waited for), 400
 * nothing against threads created per phase (6.32 + 11.00 against 6.34 + 11.16 ms). */
#define BP_SPINS 400
/* Pauses of a wait inside a held call (~1 ms): more than its serial steps take, bounded so that
 * a long one (a large first allocation) does not keep a CPU busy for nothing. */
#define BP_HELD_SPINS 40000

#if defined(SB_X86)
#define BP_PAUSE() __builtin_ia32_pause()
#else
#define BP_PAUSE() ((void)0)
#endif

typedef struct task {
    bp_job job;
    void *arg;
    int part, parts;
} task;

static void *run_task(void *p) {
    task *t = p;
    t->job(t->arg, t->part, t->parts);
    return NULL;
}

/* The phase-by-phase way: a thread per part, joined. */
static int parallel_created(int parts, bp_job job, void *arg) {
    pthread_t ids[BP_MAX_PARTS];
    task tasks[BP_MAX_PARTS];
    int started[BP_MAX_PARTS] = {0}, failed = 0;
    for (int p = 1; p < parts; p++) {
        tasks[p] = (task){job, arg, p, parts};
        started[p] = pthread_create(&ids[p], NULL, run_task, &tasks[p]) == 0;
    }
    job(arg, 0, parts);
    for (int p = 1; p < parts; p++) {
        if (started[p]) {
            pthread_join(ids[p], NULL);
        } else { /* no thread: the part runs here, the answer is the same */
            job(arg, p, parts);
            failed = 1;
        }
    }
    return failed ? -1 : 0;
}

static struct {
    pthread_mutex_t use;   /* held by the one caller running on the pool */
    pthread_mutex_t lock;  /* guards the sleeps */
    pthread_cond_t wake;   /* a new phase */
    pthread_cond_t done;   /* the phase's last part finished */
    int threads;           /* kept threads: parts 1 .. threads */
    int spin;              /* whether waits spin first: not when there are more threads than CPUs */
    int held;              /* calls inside bp_hold (atomic): waits spin BP_HELD_SPINS */
    /* The phase: its number << 16 | its parts << 8 | the parts claimed, one atomic word, so that
     * a claim is of a part of the phase the thread saw, never of the next one (job and arg,
     * written before the word, stay put while the phase waits for its parts). */
    uint64_t phase;
    int remaining;         /* parts of the phase not finished (atomic) */
    bp_job job;
    void *arg;
    fenv_t env; /* the caller's, for the phase */
} team = {.use = PTHREAD_MUTEX_INITIALIZER,
            .lock = PTHREAD_MUTEX_INITIALIZER,
            .wake = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER};

static pthread_once_t team_once = PTHREAD_ONCE_INIT;
/* The number of the last phase published before each kept thread was created: it claims parts
 * from the next one on (written by its creator before the thread exists). */
static uint64_t team_born[BP_MAX_PARTS];

/* In a forked child the kept threads do not exist: forget them (the child is single-threaded
 * here, so plain re-initialisation is safe). */
static void team_after_fork(void) {
    pthread_mutex_init(&team.use, NULL);
    pthread_mutex_init(&team.lock, NULL);
    pthread_cond_init(&team.wake, NULL);
    pthread_cond_init(&team.done, NULL);
    team.threads = 0;
    team.remaining = 0;
    team.held = 0; /* the caller that held the pool is not in the child */
}

static long team_cpus = 1;

static void team_init(void) {
    team_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_atfork(NULL, NULL, team_after_fork);
}

/* Pauses a wait spins before it sleeps: none when the threads outnumber the CPUs (a spinning
 * thread would take the CPU another one needs). */
static int wait_spins(void) {
    if (!__atomic_load_n(&team.spin, __ATOMIC_RELAXED))
        return 0;
    return __atomic_load_n(&team.held, __ATOMIC_RELAXED) ? BP_HELD_SPINS : BP_SPINS;
}

#define PHASE_NUMBER(word) ((word) >> 16)

/* Who runs a phase's parts (sb_bp_parts_way, for tests that must see each way run): 0 whoever
 * claims them first; 1 the caller one, the kept threads the others (as parts were fixed to
 * threads before); 2 the caller all of them (as on a host that does not schedule the kept
 * threads in time). */
static int parts_way;

void sb_bp_parts_way(int way) { __atomic_store_n(&parts_way, way == 1 || way == 2 ? way : 0, __ATOMIC_RELAXED); }

/* Runs parts of phase `number` while some are unclaimed, whichever thread it is on: the caller
 * runs those a kept thread has not started.  Parts used to be fixed to threads, and on a busy
 * host the caller waited for a kept thread to be scheduled at every phase: game 1 000 x 10 000
 * took 6.5 ms on two threads against 0.4 on one (medians of 31 calls, other work on the second
 * vCPU); claimed, 0.29 against 0.29.  A part's work and answer do not depend on the thread
 * that runs it (its buffers are the part's). */
static void claim_parts(uint64_t number, int kept) {
    int most = BP_MAX_PARTS;
    switch (__atomic_load_n(&parts_way, __ATOMIC_RELAXED)) {
    case 1: most = kept ? BP_MAX_PARTS : 1; break;
    case 2: most = kept ? 0 : BP_MAX_PARTS; break;
    }
    int env_set = !kept; /* the caller runs in its own environment */
    uint64_t word = __atomic_load_n(&team.phase, __ATOMIC_ACQUIRE);
    for (int claimed = 0; claimed < most;) {
        if (PHASE_NUMBER(word) != number || (word & 0xFF) >= (word >> 8 & 0xFF))
            return;
        if (!__atomic_compare_exchange_n(&team.phase, &word, word + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue; /* word now holds the current value */
        claimed++;
        if (!env_set) {
            fesetenv(&team.env);
            env_set = 1;
        }
        team.job(team.arg, (int)(word & 0xFF), (int)(word >> 8 & 0xFF));
        if (__atomic_sub_fetch(&team.remaining, 1, __ATOMIC_ACQ_REL) == 0 && kept) {
            pthread_mutex_lock(&team.lock);
            pthread_cond_signal(&team.done);
            pthread_mutex_unlock(&team.lock);
        }
        word = __atomic_load_n(&team.phase, __ATOMIC_ACQUIRE);
    }
}

static void *team_thread(void *p) {
    uint64_t seen = team_born[(int)(intptr_t)p];
    for (;;) {
        uint64_t now = PHASE_NUMBER(__atomic_load_n(&team.phase, __ATOMIC_ACQUIRE));
        for (int spin = 0; spin < wait_spins() && now == seen; spin++) {
            BP_PAUSE();
            now = PHASE_NUMBER(__atomic_load_n(&team.phase, __ATOMIC_ACQUIRE));
        }
        if (now == seen) {
            pthread_mutex_lock(&team.lock);
            while ((now = PHASE_NUMBER(__atomic_load_n(&team.phase, __ATOMIC_ACQUIRE))) == seen)
                pthread_cond_wait(&team.wake, &team.lock);
            pthread_mutex_unlock(&team.lock);
        }
        seen = now;
        claim_parts(now, 1);
    }
    return NULL;
}

/* Kept threads for parts 1 .. parts - 1; 0, or -1 when one could not be started. */
static int team_grow(int parts) {
    while (team.threads < parts - 1) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        team_born[team.threads + 1] = PHASE_NUMBER(__atomic_load_n(&team.phase, __ATOMIC_ACQUIRE));
        const int failed = pthread_create(&id, &attr, team_thread, (void *)(intptr_t)(team.threads + 1));
        pthread_attr_destroy(&attr);
        if (failed)
            return -1;
        team.threads++;
    }
    return 0;
}

int bp_parallel(int parts, bp_job job, void *arg) {
    if (parts <= 1) {
        job(arg, 0, 1);
        return 0;
    }
    if (parts > BP_MAX_PARTS)
        parts = BP_MAX_PARTS;
    pthread_once(&team_once, team_init);
    if (pthread_mutex_trylock(&team.use))
        return parallel_created(parts, job, arg);
    if (team_grow(parts)) {
        pthread_mutex_unlock(&team.use);
        return parallel_created(parts, job, arg);
    }
    team.job = job;
    team.arg = arg;
    fegetenv(&team.env);
    __atomic_store_n(&team.spin, parts <= team_cpus, __ATOMIC_RELAXED);
    __atomic_store_n(&team.remaining, parts, __ATOMIC_RELEASE);
    pthread_mutex_lock(&team.lock); /* a sleeping thread either sees the new phase or is woken */
    const uint64_t number = PHASE_NUMBER(__atomic_load_n(&team.phase, __ATOMIC_RELAXED)) + 1;
    __atomic_store_n(&team.phase, number << 16 | (uint64_t)parts << 8, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&team.wake);
    pthread_mutex_unlock(&team.lock);
    claim_parts(number, 0);
    for (int spin = 0; spin < wait_spins() && __atomic_load_n(&team.remaining, __ATOMIC_ACQUIRE); spin++)
        BP_PAUSE();
    if (__atomic_load_n(&team.remaining, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&team.lock);
        while (__atomic_load_n(&team.remaining, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&team.done, &team.lock);
        pthread_mutex_unlock(&team.lock);
    }
    pthread_mutex_unlock(&team.use);
    return 0;
}

void bp_hold(int parts, int on) {
    if (parts > 1) /* one part runs on the caller alone: no thread to keep awake */
        __atomic_add_fetch(&team.held, on ? 1 : -1, __ATOMIC_RELAXED);
}
