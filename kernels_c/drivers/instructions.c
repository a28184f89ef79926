/* Instruction counts of the timed loops, under valgrind's callgrind.
 *
 * Usage: instructions LIBRARY SCENE KERNEL:MODE:LOOP ...
 *   LIBRARY  a sectorbench build (the shared library build.py wrote)
 *   SCENE    the scene as sectorbench.compare.instructions writes it (see read_scene)
 *   MODE     inline | call;  LOOP  count | noop
 *
 * Run as `valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no ...`: nothing is
 * instrumented or counted until a loop starts, so the count is the loop's alone (not the
 * dynamic loader's, not reading the scene, not prepare()'s index build).  Each loop is one
 * dump, named by its argument; stdout gets one line per loop: the argument and its answer.
 * What the kernels print goes to /dev/null (keep_own_streams): stdout and stderr are the
 * driver's own.
 *
 * Everything a loop reads is the same bytes at the same alignment every run, so the
 * same library and scene give the same count, to the instruction.
 */
#define _POSIX_C_SOURCE 200809L /* -std=c11: fdopen, F_DUPFD_CLOEXEC */
#include <dlfcn.h>
#include <fcntl.h>
#include <fenv.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <valgrind/callgrind.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif
#if defined(__linux__) && defined(__x86_64__) && !defined(__ILP32__)
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#define SB_REFUSE_SIGNALS 1
#endif

#include "sb_abi.h"

#define ALIGNMENT 64
#define MAX_ARRAYS 64

typedef struct named_array {
    char kind; /* 'p': a point array, 's': a shape array, 'e': extra data */
    char name[64];
    void *data;
} named_array;

static named_array arrays[MAX_ARRAYS];
/* The driver's stdout and stderr, as it was started with them (keep_own_streams). */
static FILE *own_out, *own_err;

/* Keep the driver's stdout and stderr on descriptors of its own, and point descriptors 1 and 2,
 * which the kernels print to, at /dev/null.  sectorbench reads the driver's stderr for why it
 * failed, and valgrind's log for a crash or an instruction it cannot run: a kernel's lines had
 * gone into that one file, so one that printed valgrind's words before it failed was given
 * their reason, and one that printed on every test wrote millions of lines into $TMPDIR.  The
 * workers that timed the kernel noted what it printed.  Where a descriptor is missing, the
 * streams stay as they were. */
static void keep_own_streams(void) {
    own_out = stdout, own_err = stderr;
    int out = fcntl(1, F_DUPFD_CLOEXEC, 3), err = fcntl(2, F_DUPFD_CLOEXEC, 3);
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    FILE *kept_out = out >= 0 ? fdopen(out, "w") : NULL, *kept_err = err >= 0 ? fdopen(err, "w") : NULL;
    if (!kept_out || !kept_err || null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) {
        if (kept_out) fclose(kept_out);
        if (kept_err) fclose(kept_err);
        if (null >= 0) close(null);
        return;
    }
    close(null);
    setvbuf(kept_err, NULL, _IONBF, 0); /* said before a kernel can crash the process */
    own_out = kept_out, own_err = kept_err;
}
static int n_arrays;

static int read_exact(FILE *file, void *out, size_t size) { return fread(out, 1, size, file) == size; }

/* SBSCENE1, then int64 N, M, stride, count; then per array: a kind byte, an int64 name
 * length and the name, an int64 byte length and the bytes. */
static int read_scene(const char *path, sb_scene *scene) {
    FILE *file = fopen(path, "rb");
    char magic[8];
    int64_t header[4];
    if (!file || !read_exact(file, magic, 8) || memcmp(magic, "SBSCENE1", 8) != 0 || !read_exact(file, header, sizeof header))
        return 0;
    memset(scene, 0, sizeof *scene);
    scene->n_shapes = header[0];
    scene->n_points = header[1];
    scene->stride = header[2];
    scene->shape_begin = 0;
    scene->shape_end = header[0];
    if (header[3] > MAX_ARRAYS) return 0;
    int points = 0, extras = 0;
    for (n_arrays = 0; n_arrays < header[3]; n_arrays++) {
        named_array *array = &arrays[n_arrays];
        int64_t name_length, byte_length;
        if (!read_exact(file, &array->kind, 1) || !read_exact(file, &name_length, 8) || name_length < 0 ||
            name_length >= (int64_t)sizeof array->name || !read_exact(file, array->name, (size_t)name_length) ||
            !read_exact(file, &byte_length, 8) || byte_length < 0)
            return 0;
        array->name[name_length] = 0;
        size_t allocated = ((size_t)byte_length + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT + ALIGNMENT;
        array->data = aligned_alloc(ALIGNMENT, allocated);
        if (!array->data) return 0;
        memset(array->data, 0, allocated);
        if (!read_exact(file, array->data, (size_t)byte_length)) return 0;
        if (array->kind == 'p' && points < 4) scene->point[points++] = array->data;
        if (array->kind == 'e' && extras < 4) scene->extra[extras++] = array->data;
    }
    fclose(file);
    scene->never = 1.0f / 0.0f;
    return 1;
}

/* The kernel's shape arrays in the order of its `takes`, e.g. "(cx, cy, r2)". */
static int bind_shapes(const sb_kernel *kernel, sb_scene *scene) {
    const char *cursor = kernel->takes;
    int slot = 0;
    while (*cursor) {
        while (*cursor == '(' || *cursor == ')' || *cursor == ',' || *cursor == ' ') cursor++;
        size_t length = strcspn(cursor, ",) ");
        if (length == 0) break;
        int found = 0;
        for (int i = 0; i < n_arrays; i++)
            if (arrays[i].kind == 's' && strlen(arrays[i].name) == length && strncmp(arrays[i].name, cursor, length) == 0) {
                if (slot >= 8) return 0;
                scene->shape[slot++] = arrays[i].data;
                found = 1;
            }
        if (!found) {
            fprintf(own_err, "instructions: %s takes %.*s, which the scene lacks\n", kernel->name, (int)length, cursor);
            return 0;
        }
        cursor += length;
    }
    return 1;
}

#if defined(SB_REFUSE_SIGNALS)
/* The kernels this driver loads may signal only this process (valgrind too runs in it, and
 * signals only itself), the process group it leads (sectorbench starts it in a session of its
 * own) or send signal 0: kill() and its relatives of any other pid fail with EPERM, and so do
 * pidfd_send_signal, ptrace and process_vm_writev.  The same filter as the workers' (see
 * sectorbench/measure/server.py, refuse_signals_beyond_group, for why), and one more refusal:
 * setsid and setpgid, so that every process a kernel starts stays in this group, which
 * sectorbench kills before it reaps valgrind.  A worker catches a child that left its group as
 * a child subreaper whose fork server ends it; here nothing outlives valgrind to adopt it, and
 * a kernel's setsid() and double fork left a valgrind.bin running, init's, after the run. */
static void refuse_signals_beyond_group(void) {
    const __u32 own = (__u32)getpid(), group = (__u32)-getpid();
    const __u32 allow = SECCOMP_RET_ALLOW, refuse = SECCOMP_RET_ERRNO | EPERM;
#define SB_LOAD(at) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (at))
#define SB_IS(value, yes, no) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), (yes), (no))
    struct sock_filter program[] = {
        SB_LOAD(offsetof(struct seccomp_data, arch)),
        SB_IS(AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, refuse),
        SB_LOAD(offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1), /* x32: refused, not told apart */
        BPF_STMT(BPF_RET | BPF_K, refuse),
        SB_IS(SYS_kill, 11, 0), /* by pid: to the check below */
        SB_IS(SYS_tkill, 10, 0),
        SB_IS(SYS_tgkill, 9, 0),
        SB_IS(SYS_rt_sigqueueinfo, 8, 0),
        SB_IS(SYS_rt_tgsigqueueinfo, 7, 0),
        SB_IS(424, 5, 0), /* pidfd_send_signal: no pid to check */
        SB_IS(SYS_ptrace, 4, 0),
        SB_IS(SYS_process_vm_writev, 3, 0),
        SB_IS(SYS_setsid, 2, 0), /* leaving the group: see above */
        SB_IS(SYS_setpgid, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, allow),
        BPF_STMT(BPF_RET | BPF_K, refuse),
        SB_LOAD(offsetof(struct seccomp_data, args[0])), /* the pid (its low half: a pid_t) */
        SB_IS(own, 5, 0),
        SB_IS(0, 4, 0), /* kill(0, ...): its own group */
        SB_IS(group, 3, 0),
        SB_LOAD(offsetof(struct seccomp_data, args[1])),
        SB_IS(0, 1, 0), /* kill(pid, 0) sends nothing */
        BPF_STMT(BPF_RET | BPF_K, refuse),
        BPF_STMT(BPF_RET | BPF_K, allow),
    };
#undef SB_LOAD
#undef SB_IS
    struct sock_fprog filter = {(unsigned short)(sizeof program / sizeof program[0]), program};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter) != 0)
        fprintf(own_err, "instructions: no seccomp filter (%s): kernels may signal other processes\n", strerror(errno));
}
#endif

int main(int argc, char **argv) {
#if defined(__linux__)
    /* sectorbench killed outright (SIGKILL: no cleanup runs) takes this valgrind with it; if it
     * died while valgrind started, before this, the parent is another already. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *parent = getenv("SB_PARENT_PID");
    if (parent && (long)getppid() != strtol(parent, NULL, 10))
        return 3;
#endif
    keep_own_streams(); /* before the library's constructors, which print as kernels do */
    if (argc < 4) {
        fprintf(own_err, "usage: instructions LIBRARY SCENE KERNEL:MODE:LOOP ...\n");
        return 2;
    }
#if defined(SB_REFUSE_SIGNALS)
    refuse_signals_beyond_group(); /* before the library's constructors, which are kernels' code too */
#endif
    /* Each loop starts in the floating-point environment the driver started with, as each kernel
     * starts in its build's in the workers: a kernel that rounds upward (fesetround) changed the
     * count of every later loop whose work depends on the rounding, by which kernels a run named
     * (valgrind ignores the rounding of arithmetic, and FTZ and DAZ, not that of a conversion).
     * Taken before the library's constructors, which are kernels' code too (the workers undo a
     * --source constructor's change likewise); what a fast-math build's own constructor sets,
     * FTZ and DAZ, valgrind does not run. */
    fenv_t start;
    fegetenv(&start);
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        fprintf(own_err, "instructions: %s\n", dlerror());
        return 2;
    }
    const sb_kernel *const *(*table_of)(size_t *) = (const sb_kernel *const *(*)(size_t *))dlsym(library, "sb_kernel_table");
    sb_scene base;
    if (!table_of || !read_scene(argv[2], &base)) {
        fprintf(own_err, "instructions: cannot read the scene %s or the kernel table\n", argv[2]);
        return 2;
    }
    size_t count = 0;
    const sb_kernel *const *table = table_of(&count);
    for (int job = 3; job < argc; job++) {
        char name[256], mode[16], loop[16];
        if (sscanf(argv[job], "%255[^:]:%15[^:]:%15s", name, mode, loop) != 3) {
            fprintf(own_err, "instructions: %s is not KERNEL:MODE:LOOP\n", argv[job]);
            return 2;
        }
        const sb_kernel *kernel = NULL;
        for (size_t i = 0; i < count; i++)
            if (strcmp(table[i]->name, name) == 0) kernel = table[i];
        if (!kernel) {
            fprintf(own_err, "instructions: no kernel %s in %s\n", name, argv[1]);
            return 2;
        }
        int inline_mode = strcmp(mode, "inline") == 0, noop = strcmp(loop, "noop") == 0;
        uint64_t (*function)(const sb_scene *) = inline_mode ? (noop ? kernel->noop_inline : kernel->count_inline)
                                                             : (noop ? kernel->noop_call : kernel->count_call);
        sb_scene scene = base;
        if (!bind_shapes(kernel, &scene)) return 2;
        fesetenv(&start);
        void *prepared = kernel->prepare ? kernel->prepare(&scene) : NULL;
        scene.prepared = prepared;
        CALLGRIND_START_INSTRUMENTATION;
        CALLGRIND_ZERO_STATS;
        CALLGRIND_TOGGLE_COLLECT;
        uint64_t answer = function(&scene);
        CALLGRIND_TOGGLE_COLLECT;
        CALLGRIND_STOP_INSTRUMENTATION;
        CALLGRIND_DUMP_STATS_AT(argv[job]);
        if (prepared && kernel->release) kernel->release(prepared);
        fprintf(own_out, "%s %llu\n", argv[job], (unsigned long long)answer);
    }
    return 0;
}
