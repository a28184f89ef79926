/* Test-only: kernels that change their worker process on their first call, as --source
 * kernels did in a probe, each once costing other rows: a one-shot timer (its SIGALRM killed
 * whichever kernel ran 0.3 s later), a thread left running, a lowered file limit (verify then
 * failed as a whole: "Too many open files"), and two that signal their parent, the fork server
 * (SIGSTOP hung the run for ever; SIGTERM killed the other workers). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include "sb_common.h"

static inline int changer_basic(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}

#define CHANGER(kname, act)                                                                            \
    static volatile int kname##_done;                                                                  \
    static inline int kname(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) { \
        if (__builtin_expect(!kname##_done, 0)) {                                                      \
            kname##_done = 1;                                                                          \
            act;                                                                                       \
        }                                                                                              \
        return changer_basic(cx, cy, ux, uy, r2, k, px, py);                                           \
    }                                                                                                  \
    SB_KERNEL(kname, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .known_bad = 1,  \
              .summary = "test only: changes its worker process")

static void arm_timer(void) {
    const struct itimerval once = {{0, 0}, {0, 300000}};
    setitimer(ITIMER_REAL, &once, 0);
}
static void *sleeper(void *unused) {
    (void)unused;
    for (;;)
        pause();
    return 0;
}
static void leave_thread(void) {
    pthread_t thread;
    if (pthread_create(&thread, 0, sleeper, 0) == 0)
        pthread_detach(thread);
}
static void lower_file_limit(void) {
    const struct rlimit eight = {8, 8};
    setrlimit(RLIMIT_NOFILE, &eight);
}

CHANGER(arms_timer, arm_timer());
CHANGER(leaves_thread, leave_thread());
CHANGER(lowers_file_limit, lower_file_limit());
CHANGER(stops_parent, kill(getppid(), SIGSTOP));
CHANGER(terminates_parent, kill(getppid(), SIGTERM));
