/* Test-only: kernels that misbehave the way real user kernels do, to prove each costs at most
 * its own row (docs/worker.md): one prints on every call and from a library constructor
 * (some lines look like the worker's replies), one never returns, two change the
 * floating-point environment (rounding upward; flush-to-zero), one leaves a child process
 * behind.  All known-bad: run only when named. */
#define _GNU_SOURCE
#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sb_common.h"
#include "basic_predicate.h"

#define UNRULY_TAKES (cx, cy, ux, uy, r2, cos_theta)

/* Each test kernel's predicate is basic's, under its own name (the loop templates name it). */
#define UNRULY_PREDICATE(kname)                                                              \
    static inline int kname(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, \
                            float py) {                                                      \
        return basic_predicate(cx, cy, ux, uy, r2, cos_theta, px, py);                       \
    }
UNRULY_PREDICATE(chatty)
UNRULY_PREDICATE(hangs)
UNRULY_PREDICATE(rounds_up)
UNRULY_PREDICATE(rounds_up_once)
UNRULY_PREDICATE(sets_ftz)
UNRULY_PREDICATE(forks)

/* ---------------------------------------------------------------- prints */

__attribute__((constructor)) static void chatty_loaded(void) {
    printf("{\"type\": \"Described\", \"kernels\": []}\n"); /* looks like a reply: must never be taken for one */
    printf("chatty: library loaded\n");
}

SB_KERNEL_LOOPS(chatty, SCALAR, 1, UNRULY_TAKES)
static unsigned long chatty_calls;

#define CHATTY_WRAP(loop)                                                                    \
    static uint64_t chatty_printing_##loop(const sb_scene *s) {                              \
        printf("debug: call %lu \033[31m(red)\033[0m\n", ++chatty_calls);                   \
        printf("{\"type\": \"Timed\", \"seconds\": 0.0, \"hits\": 7, \"calls\": 1}\n");     \
        return chatty_##loop(s);                                                             \
    }
CHATTY_WRAP(count_inline)
CHATTY_WRAP(count_call)

static void chatty_printing_grid(const sb_scene *s, void *out) {
    fprintf(stderr, "debug: grid of %lld shapes\033]0;title\a\n", (long long)(s->shape_end - s->shape_begin));
    chatty_eval_grid(s, out);
}

static const sb_kernel chatty_row = {
    SB_ROW_FIELDS(chatty, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1, .rounding_bound = 8,
    .summary = "test only: basic, printing on every call and from a constructor",
    .count_inline = chatty_printing_count_inline, .count_call = chatty_printing_count_call,
    .noop_inline = chatty_noop_inline, .noop_call = chatty_noop_call,
    .eval_grid = chatty_printing_grid, .eval_pairs = chatty_eval_pairs};
SB_REGISTER(chatty_row);

/* ---------------------------------------------------------------- never returns */

SB_KERNEL_LOOPS(hangs, SCALAR, 1, UNRULY_TAKES)

static uint64_t hangs_forever(const sb_scene *s) {
    (void)s;
    for (;;)
        sleep(1000);
    return 0;
}

static void hangs_forever_eval(const sb_scene *s, void *out) {
    (void)out;
    hangs_forever(s);
}

static const sb_kernel hangs_row = {
    SB_ROW_FIELDS(hangs, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1,
    .summary = "test only: its loops sleep for ever",
    .count_inline = hangs_forever, .count_call = hangs_forever,
    .noop_inline = hangs_noop_inline, .noop_call = hangs_noop_call,
    .eval_grid = hangs_forever_eval, .eval_pairs = hangs_forever_eval};
SB_REGISTER(hangs_row);

/* ---------------------------------------------------------------- leaves a process behind */

/* On its first call: a child that sleeps for ever (as a kernel calling system("... &") for
 * debugging would leave one), its pid printed ("forked PID": a worker may write no file), then
 * basic's loop. */
SB_KERNEL_LOOPS(forks, SCALAR, 1, UNRULY_TAKES)
static void forks_once(void) {
    static int forked;
    if (forked++) return;
    pid_t child = fork();
    if (child == 0)
        for (;;) pause();
    /* The parent prints the pid: the child may be ended with its worker before it ran at all. */
    if (child > 0) printf("forked %d\n", (int)child), fflush(stdout);
}
static uint64_t forks_inline(const sb_scene *s) { forks_once(); return forks_count_inline(s); }
static uint64_t forks_call(const sb_scene *s) { forks_once(); return forks_count_call(s); }
static const sb_kernel forks_row = {
    SB_ROW_FIELDS(forks, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1, .rounding_bound = 8,
    .summary = "test only: basic, forking a child that never exits",
    .count_inline = forks_inline, .count_call = forks_call,
    .noop_inline = forks_noop_inline, .noop_call = forks_noop_call,
    .eval_grid = forks_eval_grid, .eval_pairs = forks_eval_pairs};
SB_REGISTER(forks_row);

/* ---------------------------------------------------------------- changes the FP environment */

/* Each loop first changes the environment, then runs basic's loop (whose answers it changes). */
#define FPENV_KERNEL(kname, change)                                                          \
    SB_KERNEL_LOOPS(kname, SCALAR, 1, UNRULY_TAKES)                                          \
    static uint64_t kname##_changed_inline(const sb_scene *s) { change; return kname##_count_inline(s); } \
    static uint64_t kname##_changed_call(const sb_scene *s) { change; return kname##_count_call(s); }     \
    static void kname##_changed_grid(const sb_scene *s, void *o) { change; kname##_eval_grid(s, o); }    \
    static void kname##_changed_pairs(const sb_scene *s, void *o) { change; kname##_eval_pairs(s, o); }  \
    static const sb_kernel kname##_row = {                                                   \
        SB_ROW_FIELDS(kname, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1,   \
        .rounding_bound = 8, .summary = "test only: basic after " #change,                  \
        .count_inline = kname##_changed_inline, .count_call = kname##_changed_call,          \
        .noop_inline = kname##_noop_inline, .noop_call = kname##_noop_call,                  \
        .eval_grid = kname##_changed_grid, .eval_pairs = kname##_changed_pairs};             \
    SB_REGISTER(kname##_row);

FPENV_KERNEL(rounds_up, fesetround(FE_UPWARD))

/* basic, whose counting loops round upward from their first call in the process on, which is
 * in the first calibration trial: a change there was dropped with that trial's time */
SB_KERNEL_LOOPS(rounds_up_once, SCALAR, 1, UNRULY_TAKES)
static int rounds_up_once_called;
static void rounds_up_first(void) {
    if (!__atomic_exchange_n(&rounds_up_once_called, 1, __ATOMIC_RELAXED))
        fesetround(FE_UPWARD);
}
static uint64_t rounds_up_once_first_inline(const sb_scene *s) { rounds_up_first(); return rounds_up_once_count_inline(s); }
static uint64_t rounds_up_once_first_call(const sb_scene *s) { rounds_up_first(); return rounds_up_once_count_call(s); }
static const sb_kernel rounds_up_once_row = {
    SB_ROW_FIELDS(rounds_up_once, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1,
    .rounding_bound = 8, .summary = "test only: basic, its counting loops' first call rounding upward",
    .count_inline = rounds_up_once_first_inline, .count_call = rounds_up_once_first_call,
    .noop_inline = rounds_up_once_noop_inline, .noop_call = rounds_up_once_noop_call,
    .eval_grid = rounds_up_once_eval_grid, .eval_pairs = rounds_up_once_eval_pairs};
SB_REGISTER(rounds_up_once_row);
#if defined(SB_X86)
FPENV_KERNEL(sets_ftz, _mm_setcsr(_mm_getcsr() | (1u << 15)))
#endif

/* ---------------------------------------------------------------- goes wrong */

/* basic on the first two calls of its counting loops in a process (a cache that goes stale),
 * then every point within r.  5 ms a call, so that one call is calibrated enough for a 1 ms
 * --min-time: call 1 calibrates, call 2 is the first round, the later rounds are wrong.  Its
 * row showed the first round's count, unmarked. */
UNRULY_PREDICATE(goes_wrong)
static inline int goes_wrong_stale(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px,
                                   float py) {
    (void)ux, (void)uy, (void)cos_theta;
    const float dx = px - cx, dy = py - cy;
    return dx * dx + dy * dy < r2;
}
SB_KERNEL_LOOPS(goes_wrong, SCALAR, 1, UNRULY_TAKES)
SB_KERNEL_LOOPS(goes_wrong_stale, SCALAR, 1, UNRULY_TAKES)
static int goes_wrong_calls;
static uint64_t goes_wrong_later_inline(const sb_scene *s) {
    usleep(5000);
    return ++goes_wrong_calls <= 2 ? goes_wrong_count_inline(s) : goes_wrong_stale_count_inline(s);
}
static uint64_t goes_wrong_later_call(const sb_scene *s) {
    usleep(5000);
    return ++goes_wrong_calls <= 2 ? goes_wrong_count_call(s) : goes_wrong_stale_count_call(s);
}
static const sb_kernel goes_wrong_row = {
    SB_ROW_FIELDS(goes_wrong, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1,
    .rounding_bound = 8, .summary = "test only: basic on its first two counts in a process, then wrong",
    .count_inline = goes_wrong_later_inline, .count_call = goes_wrong_later_call,
    .noop_inline = goes_wrong_noop_inline, .noop_call = goes_wrong_noop_call,
    .eval_grid = goes_wrong_eval_grid, .eval_pairs = goes_wrong_eval_pairs};
SB_REGISTER(goes_wrong_row);

/* basic, but the second call of its counting loops in a process counts one hit more (a cache
 * filled wrong once), and so does its NoOperation twin's.  No sleep: a call lasts microseconds
 * on a small scene, so calibration's first trial is one call and its second many, of which the
 * wrong one is not the last; every later call is right.  Its row showed the right count,
 * unmarked and ranked: only each sample's last call's count was kept. */
UNRULY_PREDICATE(wrong_once)
SB_KERNEL_LOOPS(wrong_once, SCALAR, 1, UNRULY_TAKES)
static int wrong_once_calls, wrong_once_noops;
static uint64_t wrong_once_second_inline(const sb_scene *s) {
    return wrong_once_count_inline(s) + (++wrong_once_calls == 2);
}
static uint64_t wrong_once_second_call(const sb_scene *s) {
    return wrong_once_count_call(s) + (++wrong_once_calls == 2);
}
static uint64_t wrong_once_noop_second(const sb_scene *s) {
    return wrong_once_noop_inline(s) + (++wrong_once_noops == 2);
}
static const sb_kernel wrong_once_row = {
    SB_ROW_FIELDS(wrong_once, SCALAR, 1, UNRULY_TAKES), .family = "sector", .known_bad = 1,
    .rounding_bound = 8, .summary = "test only: basic, one hit more on its second count",
    .count_inline = wrong_once_second_inline, .count_call = wrong_once_second_call,
    .noop_inline = wrong_once_noop_second, .noop_call = wrong_once_noop_call,
    .eval_grid = wrong_once_eval_grid, .eval_pairs = wrong_once_eval_pairs};
SB_REGISTER(wrong_once_row);

/* ---------------------------------------------------------------- crawls */

/* basic, 1 ms a call: its rounds cannot fit a short --max-minutes, the others' can. */
static inline int crawls(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    usleep(1000);
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;
}
SB_KERNEL(crawls, SCALAR, 1, UNRULY_TAKES, .family = "sector", .known_bad = 1, .summary = "test only: 1 ms a call");

/* ---------------------------------------------------------------- naps */

/* basic, but its first NaN px in each process sleeps 5 s: the case batches hold NaN rows, the
 * loop scenes none, so only a process judging batches meets it (a short --kernel-timeout must
 * reach those processes too). */
static inline int naps(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    static int napped;
    if (px != px && !napped) {
        napped = 1;
        sleep(5);
    }
    return basic_predicate(cx, cy, ux, uy, r2, k, px, py);
}
SB_KERNEL(naps, SCALAR, 1, UNRULY_TAKES, .family = "sector", .known_bad = 1, .rounding_bound = 8,
          .summary = "test only: basic, 5 s asleep on its first NaN px");
