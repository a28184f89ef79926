/* Large buffers of the broadphase (the index's arrays, the hits): see bp_internal.h.
 *
 * Why a pool: every first touch of a fresh 4 KiB page is a page fault, measured at ~2 us on the
 * 2-vCPU VM this was tuned on (12 MiB: 7 ms of faults against 1 ms to write the warm pages), and
 * a 10 000 x 1 000 000 query writes ~30 MiB of index and hits.  A caller that queries every frame
 * frees last frame's blocks (its Hits die); the pool hands them to the next call instead of
 * returning them to the kernel.  New blocks of 1 MiB and more ask for transparent huge pages
 * (madvise: a 2 MiB fault zeroes the page in one go, and the scatter's random writes stop
 * missing the TLB).
 * sb_bp_pool_release() gives every kept block back. */
#include <pthread.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "bp_internal.h"

/* Blocks from this size on are pooled: each query's per-sector arrays (boxes, orders; 80-320
 * KiB at 10 000 sectors) and the index's histogram too, which malloc handed back to the kernel
 * and faulted in again on every call (~150 faults a query, perf record -e page-faults). */
#define BP_POOLED (64u << 10)
/* From this size on, blocks are huge-page aligned and ask for huge pages; below, their size is
 * rounded up to BP_GRANULE. */
#define BP_LARGE (1u << 20)
#define BP_GRANULE ((size_t)64 << 10)
/* Huge-page size: the alignment and granule of large blocks. */
#define BP_HUGE ((size_t)2 << 20)
/* At most this many freed blocks and bytes are kept for reuse (a game's frame frees ~15). */
#define BP_POOL_SLOTS 48
#define BP_POOL_BYTES ((size_t)1 << 30)
/* A kept block serves a request at most this many times smaller (no 1 GiB block for 1 MiB). */
#define BP_POOL_SLACK 4

typedef struct header {
    size_t cap;   /* bytes of the block, header included */
    size_t large; /* 1: pooled; 0: freed at once */
    char pad[64 - 2 * sizeof(size_t)];
} header;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static header *pool[BP_POOL_SLOTS];
static size_t pool_bytes;

/* A fork while another thread held pool_lock copied it held, for ever, into the child, whose
 * next query hung in bp_alloc (1 fork in ~1 000 beside a querying thread): a fork waits for
 * the pool to be whole, and the child, one thread, starts with the lock free. */
static void pool_before_fork(void) { pthread_mutex_lock(&pool_lock); }
static void pool_after_fork_in_parent(void) { pthread_mutex_unlock(&pool_lock); }
static void pool_after_fork_in_child(void) { pthread_mutex_init(&pool_lock, NULL); }
__attribute__((constructor)) static void pool_init(void) {
    pthread_atfork(pool_before_fork, pool_after_fork_in_parent, pool_after_fork_in_child);
}

void *bp_alloc(size_t bytes) {
    const size_t need = bytes + sizeof(header);
    header *h = NULL;
    if (need < BP_POOLED) {
        /* 64-byte aligned like the large blocks: the index's write-combined passes stream
         * whole lines, and need its arrays' lines to be lines of memory */
        h = aligned_alloc(64, (need + 63) & ~(size_t)63);
        if (!h)
            return NULL;
        h->cap = need;
        h->large = 0;
        return h + 1;
    }
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < BP_POOL_SLOTS; i++)
        if (pool[i] && pool[i]->cap >= need && pool[i]->cap / BP_POOL_SLACK <= need &&
            (best < 0 || pool[i]->cap < pool[best]->cap))
            best = i;
    if (best >= 0) {
        h = pool[best];
        pool[best] = NULL;
        pool_bytes -= h->cap;
    }
    pthread_mutex_unlock(&pool_lock);
    if (h)
        return h + 1;
    const size_t granule = need < BP_LARGE ? BP_GRANULE : BP_HUGE;
    const size_t cap = (need + granule - 1) / granule * granule;
    h = aligned_alloc(need < BP_LARGE ? 64 : BP_HUGE, cap);
    if (!h)
        return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (need >= BP_LARGE)
        madvise(h, cap, MADV_HUGEPAGE); /* a hint: without it (or THP off) the block is still good */
#endif
    h->cap = cap;
    h->large = 1;
    return h + 1;
}

void *bp_calloc(size_t bytes) {
    void *p = bp_alloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void bp_free(void *p) {
    if (!p)
        return;
    header *h = (header *)p - 1;
    if (h->large) {
        pthread_mutex_lock(&pool_lock);
        for (int i = 0; i < BP_POOL_SLOTS && h; i++)
            if (!pool[i] && pool_bytes + h->cap <= BP_POOL_BYTES) {
                pool[i] = h;
                pool_bytes += h->cap;
                h = NULL;
            }
        pthread_mutex_unlock(&pool_lock);
    }
    free(h);
}

int64_t sb_bp_pool_release(void) {
    header *kept[BP_POOL_SLOTS];
    int64_t released = 0;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < BP_POOL_SLOTS; i++) {
        kept[i] = pool[i];
        pool[i] = NULL;
    }
    pool_bytes = 0;
    pthread_mutex_unlock(&pool_lock);
    for (int i = 0; i < BP_POOL_SLOTS; i++)
        if (kept[i]) {
            released += (int64_t)kept[i]->cap;
            free(kept[i]);
        }
    return released;
}

void sb_bp_free(void *p) { bp_free(p); }

void sb_bp_hits_free(sb_bp_hits *h) {
    bp_free(h->offsets);
    bp_free(h->indices);
    h->offsets = NULL;
    h->indices = NULL;
}
