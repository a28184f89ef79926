/* Test-only: kernels that change their worker process on their first call, as --source
 * kernels did in probes, each once costing other rows: a one-shot timer (its SIGALRM killed
 * whichever kernel ran 0.3 s later), a thread left running, a lowered file limit (verify then
 * failed as a whole: "Too many open files"), two that signal their parent, the fork server
 * (SIGSTOP hung the run for ever; SIGTERM killed the other workers); a fork() whose child
 * returned from the kernel and answered the next request (every reply after it went to the
 * wrong row), a child left spinning (the next rows ran 2.5-4x slower), files left open, a
 * SIGSEGV handler left installed (the next crashing kernel timed out instead), signals left
 * blocked, the idle scheduling policy; and one that writes a reply of its own into the
 * worker's channel.  Then, each found by a later probe: a POSIX timer (timer_create: its
 * SIGALRM killed the next kernel, and verify as a whole), a seccomp filter refusing getitimer
 * (the snapshot itself failed: every later row crashed, the worker never replaced), four that
 * change their parent, the fork server, through getppid() (every later worker inherited the
 * change: a CPU limit killed innocent rows), and, as root, a new uid and a chroot (verify died:
 * the answers file could not be written). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sb_common.h"

#ifndef SCHED_IDLE /* glibc names it under _GNU_SOURCE, which a file included after another cannot set */
#define SCHED_IDLE 5
#endif

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
CHANGER(kills_parent, kill(getppid(), SIGKILL)); /* the clock's worker went with it */

static void spin_in_a_child(void) {
    if (fork() == 0)
        for (;;)
            ;
}
static void leave_files_open(void) {
    for (int i = 0; i < 3; i++)
        open("/dev/null", O_RDONLY);
}
static void ignore_segv(int sig) { (void)sig; }
static void handle_segv(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = ignore_segv;
    sigaction(SIGSEGV, &action, 0);
}
static void block_signals(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, 0);
}
static void go_idle(void) {
    const struct sched_param none = {0};
    sched_setscheduler(0, SCHED_IDLE, &none);
}
/* multiprocessing.connection's framing: a 4-byte big-endian length, then the bytes. */
static void forge_reply(void) {
    static const char reply[] = "{\"type\": \"ClockRead\", \"request_id\": 1, \"mhz\": 1.0}";
    const uint32_t length = sizeof reply - 1;
    const unsigned char header[4] = {length >> 24, length >> 16 & 255, length >> 8 & 255, length & 255};
    for (int fd = 3; fd < 256; fd++) {
        struct stat about;
        if (fstat(fd, &about) == 0 && S_ISSOCK(about.st_mode)) {
            (void)!write(fd, header, 4);
            (void)!write(fd, reply, length);
        }
    }
}

CHANGER(forks_and_returns, (void)fork());
CHANGER(forks_a_spinner, spin_in_a_child());
CHANGER(leaves_files_open, leave_files_open());
/* dup2 onto the worker's stdout: the next kernel's prints went to /dev/null (or, onto the
 * channel's socket, read as the worker's reply: that kernel crashed), unseen */
CHANGER(points_stdout_elsewhere, dup2(open("/dev/null", O_WRONLY), 1));
CHANGER(closes_stdin, close(0));
CHANGER(handles_segv, handle_segv());
CHANGER(blocks_signals, block_signals());
CHANGER(goes_idle, go_idle());
CHANGER(forges_reply, forge_reply());
/* Stops itself: its row timed out "no answer within ... killed", which did not say why. */
CHANGER(stops_itself, raise(SIGSTOP));
/* Takes every file descriptor: verify then failed as a whole ("Too many open files"). */
static void take_every_descriptor(void) {
    while (open("/dev/null", O_RDONLY) >= 0)
        ;
}
CHANGER(takes_every_descriptor, take_every_descriptor());

static void arm_posix_timer(void) {
    timer_t timer;
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGALRM;
    const struct itimerspec once = {{0, 0}, {0, 300000000}};
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) == 0)
        timer_settime(timer, 0, &once, 0);
}
CHANGER(arms_posix_timer, arm_posix_timer());

/* getitimer fails with EPERM from now on, in this process: the worker's snapshot reads it. */
static void refuse_getitimer(void) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_getitimer, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1 /* EPERM */),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    const struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program);
}
CHANGER(refuses_getitimer, refuse_getitimer());

/* Raw system calls where glibc declares the call only under _GNU_SOURCE (which a file
 * included after another cannot set: tests/test_c_warnings.py compiles them as one unit). */
static void pin_parent(void) {
    const unsigned long cpu0 = 1;
    syscall(SYS_sched_setaffinity, getppid(), sizeof cpu0, &cpu0);
}
static void idle_parent(void) {
    const struct sched_param none = {0};
    sched_setscheduler(getppid(), SCHED_IDLE, &none);
}
static void limit_parent_cpu(void) { /* an hour: changed, and the fork server lives on */
    const struct rlimit hour = {3600, 3600};
    syscall(SYS_prlimit64, getppid(), RLIMIT_CPU, &hour, 0);
}
CHANGER(pins_parent, pin_parent());
CHANGER(renices_parent, setpriority(PRIO_PROCESS, getppid(), 19));
CHANGER(idles_parent, idle_parent());
CHANGER(limits_parent_cpu, limit_parent_cpu());

/* As root only (otherwise they change nothing): a new identity, a new root directory. */
static void become_nobody(void) { /* the calling thread only, the one the snapshot reads */
    if (syscall(SYS_setresgid, 65534, 65534, 65534) == 0)
        syscall(SYS_setresuid, 65534, 65534, 65534);
}
CHANGER(becomes_nobody, become_nobody());
CHANGER(chroots, (void)!chroot("/tmp"));

/* A spinner in a session of its own, its parent gone (a daemon's setsid and double fork): out of
 * the worker's process group, it outlived every kill of that group, ran on beside every later
 * row and after the run.  Its pid is printed ("escapee PID", into the row's note) before the
 * kernel returns: a worker may write no file. */
static void escape_with_setsid(void) {
    const pid_t child = fork();
    if (child == 0) {
        setsid();
        const pid_t escapee = fork();
        if (escapee == 0) {
            alarm(600); /* the suite's own bound, were nothing else to end it */
            for (;;)
                ;
        }
        printf("escapee %d\n", (int)escapee);
        fflush(stdout);
        _exit(0);
    }
    if (child > 0)
        waitpid(child, 0, 0);
}
CHANGER(escapes_with_setsid, escape_with_setsid());

/* Signals to processes beyond its worker: SIGKILL to $SB_TEST_SENTINEL_PID (a process of the
 * test's) and SIGUSR2 to $SB_TEST_RUN_PID (the run's own process, its worker's grandparent:
 * SIGSTOP there hung the run for ever).  Appends "returned errno" of each kill() to
 * $SB_TEST_SIGNAL_RESULT, or, where it may write no file (a worker), prints them. */
static void signal_strangers(void) {
    const char *out = getenv("SB_TEST_SIGNAL_RESULT");
    const char *targets[2] = {getenv("SB_TEST_SENTINEL_PID"), getenv("SB_TEST_RUN_PID")};
    const int signals[2] = {SIGKILL, SIGUSR2};
    char lines[64];
    int length = 0;
    for (int t = 0; t < 2; t++)
        if (targets[t] && atoi(targets[t]) > 1) {
            const int returned = kill((pid_t)atoi(targets[t]), signals[t]), error = errno;
            length += snprintf(lines + length, sizeof lines - (size_t)length, "%d %d\n", returned, error);
        }
    const int fd = out ? open(out, O_WRONLY | O_CREAT | O_APPEND, 0644) : -1;
    if (fd >= 0) {
        (void)!write(fd, lines, (size_t)length);
        close(fd);
    } else {
        fputs(lines, stdout);
        fflush(stdout);
    }
}
CHANGER(signals_strangers, signal_strangers());

/* Files beyond its worker, each as a kernel once did one: creates $SB_TEST_FILES/created (the
 * run's --json path, before the run), rewrites $SB_TEST_FILES/precious (verify's scene: correct
 * kernels FAILed), removes $SB_TEST_FILES/doomed (the run's scratch scene: every row crashed),
 * opens /proc/$SB_TEST_RUN_PID/mem to write (the run's own memory).  Prints what each returned. */
static const char *outcome(int returned) { return returned >= 0 ? "done" : strerror(errno); }
static void write_files(void) {
    const char *dir = getenv("SB_TEST_FILES"), *run = getenv("SB_TEST_RUN_PID");
    char path[4096];
    if (!dir || !run)
        return;
    snprintf(path, sizeof path, "%s/created", dir);
    printf("create: %s", outcome(open(path, O_WRONLY | O_CREAT, 0644)));
    snprintf(path, sizeof path, "%s/precious", dir);
    const int precious = open(path, O_WRONLY | O_TRUNC);
    printf(", rewrite: %s", outcome(precious >= 0 ? (int)write(precious, "scribbled", 9) : -1));
    snprintf(path, sizeof path, "%s/doomed", dir);
    printf(", remove: %s", outcome(unlink(path)));
    snprintf(path, sizeof path, "/proc/%s/mem", run);
    printf(", memory: %s\n", outcome(open(path, O_RDWR)));
    fflush(stdout);
}
CHANGER(writes_files, write_files());
