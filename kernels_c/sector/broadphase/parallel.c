/* One job on T threads (see bp_internal.h).  C threads rather than Python threads around cffi
 * calls: the index build needs three phases with a join between them (histograms, prefix sum,
 * scatter) and the query a join before its hits are put together; here each join is a
 * pthread_join (~tens of us), with no trip through the GIL and no Python-side concatenation. */
#include <pthread.h>

#include "bp_internal.h"

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

int bp_parallel(int parts, bp_job job, void *arg) {
    if (parts <= 1) {
        job(arg, 0, 1);
        return 0;
    }
    if (parts > BP_MAX_PARTS)
        parts = BP_MAX_PARTS;
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
