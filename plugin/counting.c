/*
 * p4pmu: event counting from guest activity (docs/guest-events.md).
 *
 * Included by p4pmu_plugin.c (one translation unit for cffi).  What lives here:
 *
 * - classification of every instruction of a translated block with Capstone 5 (the table is
 *   generated from p4pmu.emulator.insn_classes at build time: p4_tables.h);
 * - the clock model of a block (bubble, 3 uops per clock, latencies, aligned instructions)
 *   interned as "kinds" (one kind = one clock's fields, clockmodel.FIELDS);
 * - per-vCPU scoreboard counters of block executions, incremented by inline ADDs; a dirty
 *   list of blocks executed since the last fold (registered by a conditional callback that
 *   fires at the first execution of a block after each fold);
 * - dynamic block ends (conditional branches, calls, returns, indirect branches, REP string
 *   instructions), resolved by a conditional block-entry callback in the *next* block
 *   (cb_xcheck); a conditional branch's outcomes in one direction ("silent") cost no
 *   callback and are replayed per predictor entry later (see "Silent branch outcomes");
 *   the branch predictor of clockmodel.Predictor, in C;
 * - the deadline accumulator W (block clocks, inline ADD) that makes the same callback fire
 *   when an armed counter could have overflowed;
 * - folds: the activity since the last fold as a joint histogram over (kind, CPL) with
 *   adjacent-pair counts, handed to Python (bridge.py Feeder) which steps the PMU engine.
 *
 * Threading: every per-vCPU structure is touched only by its own vCPU thread (callbacks run
 * there), except the XPEND scoreboard word (atomic requests from the sibling vCPU) and
 * read-only looks at another vCPU's halted/CPL flags.  Global tables (kinds, blocks) are
 * appended under a mutex at translation time and read lock-free afterwards (an entry is
 * published before its id is).
 */
#include <strings.h>
#include <capstone/capstone.h>
#include "p4_tables.h"

/* ---------------------------------------------------------------------------------------- */
/* Sizes and constants                                                                       */
/* ---------------------------------------------------------------------------------------- */

#define MAX_BLOCKS (1u << 20)
#define MAX_KINDS (1u << 16)
#define NEXT (2u * MAX_KINDS) /* ext kind = kind * 2 + os */
#define SB_HDR 8u
/* scoreboard words: W (deadline clocks), CUR (the block running or run last), W2 (the exact
 * deadline of one watched counter, in its events: "Exact deadlines" below), XPEND (threads=2
 * requests), X (the address the last block's "silent" outcome continues at, see "Silent
 * branch outcomes" below) */
enum { SB_W = 0, SB_CUR = 1, SB_W2 = 2, SB_XPEND = 3, SB_X = 4 };
/* per-block execution counters at SB_HDR + id; the "banked" executions of silent-capable
 * conditional blocks at SB_BANK0 + gate index (see "Silent branch outcomes") */
#define MAX_GATES (1u << 18)
#define SB_BANK0 (SB_HDR + MAX_BLOCKS)
#define SB_WORDS (SB_BANK0 + MAX_GATES)
/* X values that are no block's address (not canonical): the last block's outcome has been
 * accounted (X_DONE), or it must be resolved at the next block entry whatever that is
 * (X_FORCE: calls, returns, indirect branches, REP, far transfers) */
#define X_DONE 0x8000000000000001ull
#define X_FORCE 0x8000000000000002ull
#define MAX_GROUPS MAX_BLOCKS
#define GCHUNK 4096u
#define GMAX 32 /* silent-capable blocks per conditional predictor entry */
#define W_THRESH (1ull << 62)
#define W_PEND (1ull << 62)
#define W_IDLE 0ull /* W value when no deadline is armed: 2^62 clocks away */
#define MAX_DIRTY (1u << 16)
#define END_REP 8 /* block end kind: REP string instruction (not a BRK_* value) */

/* per-instruction information kept for schedules of partial blocks */
#define CI_ALIGN 1
#define CI_REP 2
#define CI_HLT 4
struct cinsn {
    uint64_t addr;
    uint64_t target;
    uint8_t len, uops, loads, stores, lat, br, flags, rep_iter;
    uint8_t addr_size; /* REP: 2, 4 or 8 bytes of RCX */
    uint8_t fp[FPI_N];
};

/* cb_xcheck's one-entry cache, per block (as a successor) and vCPU: the silent-capable
 * block it resolved last and what resolving it again needs, so that the usual explicit
 * outcome (the same branch going the same non-silent way again) reads no block structure */
struct xcache {
    uint32_t prev;              /* 0: empty */
    uint8_t t, back, pad[2];    /* the silent direction, the branch goes backward */
    uint64_t btarget, bnext;
    struct bres *r;
    struct gst *g;
};

struct blk {
    /* first cache line: what cb_xcheck reads of this block (its user data) */
    uint64_t vaddr;
    uint8_t os, end, back, silent_t;
    /* silent branch outcomes (conditional ends): the gate/bank index + 1 (0: not
     * silent-capable); back: the branch goes backward (static prediction); silent_t: the
     * group's silent direction */
    uint32_t gate;
    struct xcache xc0;          /* vCPU 0 */
    struct xcache *xcv;         /* vCPUs 1.. (allocated when first needed) */
    /* what an explicit resolution of this block's own outcome reads */
    uint64_t btarget, bnext;    /* the last instruction's branch target and next address */
    struct bres *res;           /* per vCPU: outcomes since the last fold, predictor slot */
    uint32_t var[4];            /* dynamic final clock: [taken*2 + mispredicted] */
    uint32_t gid;               /* the predictor entry's group */
    /* the rest */
    uint32_t n;
    uint8_t mode;
    uint8_t lite_cond;          /* translated at the outcome-free level, ends in a conditional
                                 * branch: accounted as a static end (not taken, predicted) */
    uint8_t pad[2];
    struct cinsn *ins;
    /* full static portion [0, n) incl. bubble, excluding the final clock of a dynamic end */
    uint32_t nk, np;
    uint32_t *hk, *hc;          /* histogram: kind ids, counts */
    uint32_t *pa, *pb, *pc;     /* internal adjacent pairs */
    uint32_t first_k, last_k;   /* bubble kind; last static clock kind */
    uint32_t nclocks;           /* static clocks (W increment) */
    uint32_t maxclk;            /* most clocks one execution can add (maxclk()) */
    uint32_t final_k;           /* the final clock before the outcome (dynamic ends) */
    uint32_t wadd;              /* W increment per execution (static clocks + final clock) */
    uint32_t w2add;             /* W2 increment per execution: the most events of the exact-
                                 * deadline counter one execution can add (0: no W2 ops) */
    uint64_t xval;              /* SB_X stored at entry: where the silent outcome goes */
};

/* per block and vCPU: resolved outcomes of the current batch (expanded at the fold) and the
 * block's branch's predictor entry (index + 1 into the vCPU's entry arena, 0 = not looked up);
 * conditional ends: `acc` = executions of the current batch whose outcome is accounted
 * (resolved, replayed as silent, or cut), minus an execution carried over pending */
struct bres {
    uint64_t n[4];
    int64_t acc;
    struct gst *g;  /* this vCPU's state of the block's group (looked up once) */
    uint32_t pidx;
    uint32_t pad;
} __attribute__((aligned(64)));

/* A conditional predictor entry (address, or address mod cond_entries) and the blocks that
 * end in a branch using it ("members", the silent-capable ones), global; per vCPU its state
 * (struct gst).  silent_t: the direction whose outcomes run without a callback. */
struct grp {
    uint64_t key;
    uint8_t silent_t;
    volatile uint32_t nmem;
    uint32_t mem[GMAX];
};

/* per vCPU and group: the predictor entry (0 invalid, else the 2-bit counter + 1), whether
 * the group is open (entry saturated in the silent direction: every member runs silently),
 * else the owner (the one member that may run silently), and the reserved penalty clocks
 * (the silent mispredictions the owner may still have, in W) */
struct gst {
    uint64_t e;
    uint32_t owner;
    uint8_t open, resv, oback; /* oback: the owner's branch goes backward */
};

/* ---------------------------------------------------------------------------------------- */
/* Global state                                                                              */
/* ---------------------------------------------------------------------------------------- */

static int cnt_mode = 1;        /* option count=: 0 off, 1 auto, 2 on */
static int cnt_instrument;      /* translate() instruments blocks */
static int cnt_start_requested; /* a reset (flush) to start instrumenting is under way */
static int pmi_on = 1;          /* option pmi= */
static unsigned bp_penalty = P4P_BP_PENALTY;
static int cnt_threads = 1;
static qemu_plugin_id_t plugin_id;

static struct qemu_plugin_scoreboard *sb_cnt;
static pthread_mutex_t cnt_lock = PTHREAD_MUTEX_INITIALIZER;

static uint8_t kinds[MAX_KINDS][KF_N];
static volatile uint32_t n_kinds;
static uint32_t khash[2 * MAX_KINDS]; /* kind id + 1, 0 empty */
static uint32_t k_bubble, k_empty;    /* bubble clock kind, empty stall clock kind */
static uint32_t k_penalty[64];        /* penalty clocks (bogus retirement then empty) */
static uint32_t k_pen_last;           /* the last of them */
static unsigned n_penalty;
static uint32_t k_rep_full;           /* REP: a clock retiring 3 uops and nothing else */

static struct blk *blocks[MAX_BLOCKS];
static volatile uint32_t n_blocks = 1; /* id 0 = none */
static struct grp *groups[MAX_GROUPS];
static uint32_t n_groups = 1;          /* id 0 = none */
static uint32_t n_gates;
static int blocks_full_warned;

/* Capstone: id -> table row (by name), per SSE-ness */
static struct p4_row *cs_rows[2];
static unsigned cs_nids;

/* ---------------------------------------------------------------------------------------- */
/* Per-vCPU counting state                                                                  */
/* ---------------------------------------------------------------------------------------- */

struct phash { uint64_t *key; int64_t *val; uint32_t cap, n; uint32_t *used; };

/* a growable map uint64 -> uint64 (predictor entries; key stored + 1) */
struct umap { uint64_t *key, *val; uint32_t cap, n; };

static uint64_t *umap_get(struct umap *m, uint64_t k, int create)
{
    if (!m->cap) {
        if (!create) return NULL;
        m->cap = 1024;
        m->key = calloc(m->cap, 8);
        m->val = calloc(m->cap, 8);
    }
    if (create && m->n * 2 >= m->cap) {
        struct umap o = *m;
        m->cap *= 2;
        m->n = 0;
        m->key = calloc(m->cap, 8);
        m->val = calloc(m->cap, 8);
        for (uint32_t i = 0; i < o.cap; i++) {
            if (o.key[i]) *umap_get(m, o.key[i] - 1, 1) = o.val[i];
        }
        free(o.key);
        free(o.val);
    }
    uint64_t kk = k + 1;
    uint32_t i = (uint32_t)((kk * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1);
    while (m->key[i] && m->key[i] != kk) i = (i + 1) & (m->cap - 1);
    if (!m->key[i]) {
        if (!create) return NULL;
        m->key[i] = kk;
        m->val[i] = 0;
        m->n++;
    }
    return &m->val[i];
}

struct cvcpu {
    /* what an explicit resolution touches first: one cache line */
    uint64_t *sbase;       /* this vCPU's scoreboard element (refreshed at every vCPU init) */
    uint64_t w_resv;       /* penalties reserved in W for silent outcomes (silent_reserve) */
    uint64_t resolutions, silent;
    uint32_t res_b;        /* the block resolved last ... */
    uint32_t res_last;     /* ... ext kind +1 of the last clock of that execution */
    int res_n;             /* res_seq's length, -1: too many to list (long REP), RES_LAZY */
    int res_v;             /* res_n == RES_LAZY: the variant of res_b's last outcome */
    volatile int cpl_os;   /* CPL 0 (seen by the sibling: its clocks' label) */
    int init;
    /* predictor (clockmodel.Predictor): address -> entry (index + 1 into the arena, stable
     * addresses: chunks of PCHUNK); entry value 0 = invalid, else state + 1 (conditional:
     * the 2-bit counter; indirect: the target); conditional entries: per group (gch) */
    struct umap btb;
    uint64_t *pchunk[4096];
    uint32_t pn;
    uint64_t rsb[P4P_RSB_DEPTH];
    int rsb_n;
    /* REP in flight: RCX before */
    uint64_t rep_rcx;
    /* dirty blocks since the last fold */
    uint32_t *dirty;
    uint32_t ndirty;
    int force_fold;
    /* signed accumulators of the current batch (dynamic parts and corrections) */
    int64_t *acc;          /* [NEXT] clocks per ext kind */
    int64_t *acc_last;     /* [NEXT] execution ends per ext kind */
    uint32_t *touched;     /* ext kinds with acc or acc_last possibly non-zero */
    uint8_t *tmark;
    uint32_t ntouched;
    int64_t firsts[2];     /* execution starts (bubbles) per os, from dynamic parts */
    struct phash pairs;
    /* the open block execution split by an access (its rest is credited to the batch) */
    uint32_t open_b, open_a;
    uint64_t open_stamp;
    /* batch boundaries */
    uint32_t next_first;   /* ext kind of the first clock of the current batch (+1; 0 none) */
    int next_first_bubble;
    uint32_t cut_last;     /* ext kind +1 of the last clock of an execution that is no whole
                            * block execution: cut (exception, abandoned block), or the
                            * enabling WRMSR's credited clocks (counting_credit_wrmsr) */
    uint32_t res_seq[64];  /* the clocks the last resolution added (ext kinds), in order */
    uint32_t batch_entry_b;/* the current batch started at the entry of this block (0: no) */
    uint32_t *seq;         /* output: a one-execution batch in clock order */
    uint32_t seq_cap;
    /* output of a fold, read by Python (bridge.py Feeder) */
    uint32_t *o_ext;
    int64_t *o_cnt;
    uint32_t o_n, o_cap;
    uint32_t *o_pa, *o_pb;
    int64_t *o_pn;
    uint32_t o_np, o_pcap;
    uint32_t o_first, o_last; /* ext kinds */
    int64_t o_clocks;
    int o_bad;             /* bookkeeping repaired (should not happen) */
    /* state seen by the sibling */
    volatile int halted;
    /* PMI requests for this vCPU raised by the sibling (threads=2) */
    volatile int pmi_pending;
    /* deadline scheduling: W was armed at w_base (W >= W_THRESH fires); py_left = clocks
     * until Python must fold (-1: no Python deadline); pmi_level: this LP's interrupt
     * request is asserted (look at the LVT every PMI_RECHECK clocks until it is cleared) */
    uint64_t w_base;
    int64_t py_left;
    int pmi_level;
    /* the exact deadline (W2, "Exact deadlines"): on for this vCPU, the counter's watch
     * slot, its events left before it may overflow (fresh: computed since W2 was last
     * armed), the verdict's cache key (the increment table it was made for), and the
     * candidate for the next signature with how many steps in a row it was the same */
    int w2_on, w2_slot, w2_fresh;
    int64_t w2_left;
    const int32_t *w2_key_winc;
    uint32_t w2_key_nk;
    int w2_key_ctr, w2_key_ok;
    int w2_cand;
    const int32_t *w2_cand_winc;
    uint32_t w2_cand_nk, w2_streak;
    uint64_t w2_checks;
    uint64_t pairless_folds; /* batches folded without adjacent pairs (no EDGE detector) */
    uint64_t memi_cuts;      /* executions cut by cb_memi (outcome-free level) */
    /* threads=2: the sibling asks this vCPU to fold (fold_req, then SB_XPEND); fold_seq counts
     * the folds this vCPU handed to Python; at HLT the vCPU snapshots its LVT entry and APIC
     * ID so that the sibling can interrupt it while it is halted (mask_pending: set the LVT
     * mask bit at the next block entry, the interrupt was sent from the sibling) */
    volatile int fold_req;
    volatile uint32_t fold_seq;
    volatile int hlt_valid;
    volatile uint32_t hlt_lvt, hlt_apic;
    volatile int mask_pending;
    /* the sibling's state when the current batch started (its clocks are labelled with it;
     * a change of the sibling's halted state asks this vCPU to fold) */
    int oth_active, oth_os;
    /* threads=2, the core's clock timeline (lp_timeline): this LP's local clock, valid once
     * lclk_on is set */
    uint64_t lclk;
    int lclk_on;
    /* halted by its own HLT (set just before the HLT, cleared at its next block entry):
     * covers single-threaded TCG, where no idle callback runs while another vCPU runs */
    volatile int hlt_halted;
    pthread_t thread;      /* the host thread running this vCPU */
    uint64_t folds, deadlines, fast_deadlines;
    /* silent branch outcomes: per-group state, the block whose outcome was pending at the
     * last fold (carried into this batch) */
    struct gst *gch[MAX_GROUPS / GCHUNK];
    uint32_t carry_b;
    uint64_t gates, silent_bad;
    uint64_t bad_folds;    /* folds whose bookkeeping was inconsistent (o_bad): a bug */
    /* the exception seen last, until its delivery (counting_discon) */
    uint64_t exc_from;
    int exc_seen;
} __attribute__((aligned(64)));
#define RES_LAZY (-2)

static struct cvcpu *cv;
/* threads=2: per core, the latest clock of its timeline (the larger LP local clock) */
static uint64_t *core_clk;

static inline int lp_halted(const struct cvcpu *c)
{
    return c->halted || c->hlt_halted;
}

/* single-threaded TCG (round robin): both siblings run on this thread, so the sibling is
 * between two of its blocks now and its state may be touched from here */
static inline int same_thread(unsigned sib)
{
    return pthread_equal(cv[sib].thread, pthread_self());
}
static FILE *br_trace; /* P4PMU_BRANCH_TRACE=PATH: every resolved branch (debugging) */

static inline uint64_t *sbv(unsigned vi)
{
    return (uint64_t *)qemu_plugin_scoreboard_find(sb_cnt, vi);
}

/* ---------------------------------------------------------------------------------------- */
/* Kinds                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static uint32_t khash_of(const uint8_t *f)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < KF_N; i++) {
        h = (h ^ f[i]) * 1099511628211ull;
    }
    return (uint32_t)(h >> 20);
}

/* Intern a clock's fields; returns the kind id.  Lock-free lookup of published kinds is not
 * attempted: callers hold cnt_lock (translation) or call at init. */
static uint32_t kind_intern_locked(const uint8_t *f)
{
    uint32_t i = khash_of(f) & (2 * MAX_KINDS - 1);
    for (;;) {
        uint32_t e = khash[i];
        if (!e) {
            break;
        }
        if (!memcmp(kinds[e - 1], f, KF_N)) {
            return e - 1;
        }
        i = (i + 1) & (2 * MAX_KINDS - 1);
    }
    if (n_kinds >= MAX_KINDS) {
        static int warned;
        if (!warned++) {
            fprintf(stderr, "p4pmu: more than %u distinct clock kinds; further ones are "
                            "counted as empty clocks\n", MAX_KINDS);
        }
        return k_empty;
    }
    uint32_t id = n_kinds;
    memcpy(kinds[id], f, KF_N);
    __atomic_store_n(&n_kinds, id + 1, __ATOMIC_RELEASE);
    khash[i] = id + 1;
    return id;
}

static uint32_t kind_intern(const uint8_t *f)
{
    pthread_mutex_lock(&cnt_lock);
    uint32_t k = kind_intern_locked(f);
    pthread_mutex_unlock(&cnt_lock);
    return k;
}

/* ---------------------------------------------------------------------------------------- */
/* The clock schedule (clockmodel.schedule, line by line)                                    */
/* ---------------------------------------------------------------------------------------- */

struct clk { uint8_t f[KF_N]; };

static void attrs(struct clk *c, const struct cinsn *in)
{
    int ld = in->loads > 0, st = in->stores > 0;
#define ADDF(k, v) do { unsigned t_ = c->f[k] + (unsigned)(v); c->f[k] = t_ > 255 ? 255 : t_; } while (0)
    ADDF(KF_INSTR, 1);
    ADDF(KF_INSTR_LD, ld);
    ADDF(KF_INSTR_ST, st);
    ADDF(KF_INSTR_LDST, ld && st);
    ADDF(KF_LD, in->loads);
    ADDF(KF_ST, in->stores);
    for (int i = 0; i < FPI_N; i++) {
        ADDF(KF_X87 + i, in->fp[i]);
    }
}

/* Schedule instructions [a, e) of b into clocks (no bubble, no outcome).  Returns the number
 * of clocks written to out (at most cap; the caller sizes it generously). */
static unsigned schedule(const struct cinsn *ins, unsigned a, unsigned e, struct clk *out,
                         unsigned cap)
{
    unsigned n = 0;
    int open = 0;
    struct clk cur;
    for (unsigned j = a; j < e; j++) {
        const struct cinsn *in = &ins[j];
        if (((in->flags & CI_ALIGN) || in->lat) && open) {
            if (n < cap) out[n++] = cur;
            open = 0;
        }
        for (unsigned l = 0; l < in->lat; l++) {
            if (n < cap) {
                memset(&out[n], 0, sizeof(out[n]));
                n++;
            }
        }
        unsigned u = in->uops;
        for (;;) {
            if (!open) {
                memset(&cur, 0, sizeof(cur));
                open = 1;
            }
            unsigned take = P4P_RETIRE_WIDTH - cur.f[KF_UOPS];
            if (take > u) take = u;
            cur.f[KF_UOPS] += take;
            u -= take;
            if (!u) break;
            if (n < cap) out[n++] = cur;
            open = 0;
        }
        attrs(&cur, in);
        if (cur.f[KF_UOPS] == P4P_RETIRE_WIDTH || (in->flags & CI_ALIGN)) {
            if (n < cap) out[n++] = cur;
            open = 0;
        }
    }
    if (open && n < cap) out[n++] = cur;
    return n;
}

static unsigned sched_cap(const struct blk *b)
{
    unsigned c = 4 + P4P_BUBBLE;
    for (unsigned j = 0; j < b->n; j++) {
        c += b->ins[j].uops + b->ins[j].lat + 1;
    }
    return c;
}

/* ---------------------------------------------------------------------------------------- */
/* Portions of a block execution as kind sequences                                           */
/* ---------------------------------------------------------------------------------------- */

/*
 * The kind sequence of instructions [a, e) of b, with the bubble if a == 0; for a dynamic
 * end (e == n) without the final clock (it is added at resolution).  Interns kinds (takes the
 * lock).  Returns the count; *seq is malloc'ed.
 */
static inline int dyn_end(const struct blk *b)
{
    return b->end != BRK_NONE && b->end != BRK_JMP && b->end != BRK_FAR;
}

/* A position in a block execution: 0 = its start (the bubble, then instruction 0); p >= 1 =
 * just before instruction p - 1 (after the bubble). */
static inline unsigned pos_insn(unsigned p) { return p ? p - 1 : 0; }

/* The kind sequences of the portions split by PMU accesses recur at every access (a block
 * and its instructions never change, interning is idempotent): a small direct-mapped cache
 * per thread keeps the last ones, so an access does not schedule and intern again. */
#define PSEQ_CACHE 256
struct pseq_entry {
    const struct blk *b;
    unsigned a, e, n;
    uint32_t *s;
};
static __thread struct pseq_entry tl_pseq[PSEQ_CACHE];

static unsigned portion_seq_calc(const struct blk *b, unsigned a, unsigned e, uint32_t **seq);

static unsigned portion_seq(const struct blk *b, unsigned a, unsigned e, uint32_t **seq)
{
    uintptr_t h = ((uintptr_t)b >> 4) * 31u + a * 7u + e;
    struct pseq_entry *x = &tl_pseq[h % PSEQ_CACHE];
    if (x->b != b || x->a != a || x->e != e) {
        free(x->s);
        x->n = portion_seq_calc(b, a, e, &x->s);
        x->b = b;
        x->a = a;
        x->e = e;
    }
    uint32_t *s = malloc(sizeof(*s) * (x->n ? x->n : 1));
    memcpy(s, x->s, sizeof(*s) * x->n);
    *seq = s;
    return x->n;
}

static unsigned portion_seq_calc(const struct blk *b, unsigned a, unsigned e, uint32_t **seq)
{
    unsigned cap = sched_cap(b);
    struct clk *c = malloc(sizeof(*c) * cap);
    uint32_t *s = malloc(sizeof(*s) * (cap + P4P_BUBBLE));
    unsigned n = 0;
    if (a == 0) {
        for (int i = 0; i < P4P_BUBBLE; i++) {
            s[n++] = k_bubble;
        }
    }
    unsigned a0 = pos_insn(a);
    if (e == b->n && b->end == END_REP) e = b->n - 1;
    unsigned m = e > a0 ? schedule(b->ins, a0, e, c, cap) : 0;
    if (e == b->n && (b->end == BRK_JMP || b->end == BRK_FAR) && m) {
        c[m - 1].f[KF_BR] = b->end;
        c[m - 1].f[KF_TAKEN] = 1;
    }
    if (e == b->n && b->lite_cond && m) {
        c[m - 1].f[KF_BR] = BRK_COND; /* not taken, predicted (the outcome-free level) */
    }
    if (e == b->n && dyn_end(b) && b->end != END_REP && m) {
        m--; /* the final clock is dynamic */
    }
    pthread_mutex_lock(&cnt_lock);
    for (unsigned i = 0; i < m; i++) {
        s[n++] = kind_intern_locked(c[i].f);
    }
    pthread_mutex_unlock(&cnt_lock);
    free(c);
    *seq = s;
    return n;
}


/* ---------------------------------------------------------------------------------------- */
/* Accumulators                                                                             */
/* ---------------------------------------------------------------------------------------- */

static void ph_init(struct phash *h, uint32_t cap)
{
    h->cap = cap;
    h->n = 0;
    h->key = calloc(cap, sizeof(uint64_t));
    h->val = calloc(cap, sizeof(int64_t));
    h->used = malloc(cap * sizeof(uint32_t));
}

static void ph_add(struct phash *h, uint32_t a, uint32_t b, int64_t n);

static void ph_grow(struct phash *h)
{
    struct phash o = *h;
    ph_init(h, o.cap * 2);
    for (uint32_t i = 0; i < o.n; i++) {
        uint32_t s = o.used[i];
        uint64_t k = o.key[s] - 1;
        if (o.val[s]) {
            ph_add(h, (uint32_t)(k >> 32), (uint32_t)k, o.val[s]);
        }
    }
    free(o.key);
    free(o.val);
    free(o.used);
}

static void ph_add(struct phash *h, uint32_t a, uint32_t b, int64_t n)
{
    if (!n) return;
    if (h->n * 2 >= h->cap) ph_grow(h);
    uint64_t k = (((uint64_t)a << 32) | b) + 1;
    uint32_t i = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 40) & (h->cap - 1);
    while (h->key[i] && h->key[i] != k) {
        i = (i + 1) & (h->cap - 1);
    }
    if (!h->key[i]) {
        h->key[i] = k;
        h->used[h->n++] = i;
    }
    h->val[i] += n;
}

static void ph_clear(struct phash *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        h->key[h->used[i]] = 0;
        h->val[h->used[i]] = 0;
    }
    h->n = 0;
}

static inline uint32_t ext(uint32_t k, int os) { return k * 2 + (os ? 1 : 0); }

/* Exact deadlines (docs/guest-events.md "Exact deadlines").  W counts clocks, and a deadline
 * in clocks must assume the most events per clock (3 instructions, say): a counter armed to
 * interrupt after 10,000 instructions of a loop that retires 0.75 per clock was checked about
 * 23 times per interrupt, each check closing a quarter of the distance.  W2 counts the events
 * of one watched counter instead: each block adds the most events of that counter one of its
 * executions can add (w2add, from Python's per-kind increment table), and its conditional
 * callback fires at the entry of the first block that may take the counter to its limit,
 * where fast_check decides exactly, as it does for W.  The weights are fixed when a block is
 * translated, so the signature (the counter and its increments per kind) is fixed for the
 * translation cache: it is chosen after the same counter has driven the deadline at
 * W2_STREAK steps in a row, and installed by a flush (qemu_plugin_reset).  A vCPU whose
 * programming does not match the signature keeps W2 idle (0) and its deadlines in clocks. */
#define W2_STREAK 4        /* steps in a row with the same candidate before the first flush */
#define W2_RESTREAK 256    /* ... before a flush that replaces a signature */
#define W2_MAX_FLUSHES 16  /* signatures installed per run at most */
static int w2_mode = 1;    /* option exact=on|off */
static struct {
    volatile int active;   /* blocks translated now carry W2 operations for the signature */
    volatile int req;      /* the pending flush (flush_pending) installs `next` */
    unsigned flushes;
    struct w2sig {
        int ctr;           /* counter 0-17 */
        uint32_t nk;       /* increments known for ext kinds < nk */
        const int32_t *col;/* [ext] increment per clock of that kind (malloc'ed, kept) */
        int64_t rate;      /* the most per clock (ext kinds >= nk) */
        int64_t pen[2];    /* the penalty clocks after a misprediction, summed, per CPL */
    } sig, next;
} w2;

/* One translation-cache flush at a time (qemu_plugin_reset drops a second request while one
 * is under way): it installs what is wanted when it runs (a W2 signature, the level). */
static volatile int flush_pending;

/* The outcome-free level (docs/guest-events.md "The outcome-free level").  When no enabled
 * counter reads anything that depends on a branch's outcome or on the clocks a misprediction
 * adds (Python decides, from clockmodel.OUTCOME_FEATURES: p4c_out.lite), blocks are
 * translated without outcome callbacks: a conditional end is a static end (the final clock
 * not taken, predicted), every block with a static end stores X_LITE in SB_X and every block
 * checks SB_X != X_LITE, so the check fires only after calls, returns, indirect jumps, REP
 * and far transfers.  The predictor is not trained by conditional branches at that level.
 * An execution QEMU abandons at an MMIO access (no X check sees it there) is found by a
 * memory callback of the one-instruction CF_MEMI_ONLY block that re-executes the access
 * (cb_memi).  Installed and removed by a flush; removal at once (a programming that needs
 * outcomes is written by a WRMSR, which ends its block: no conditional end runs at the lite
 * level after it), installation after LITE_STREAK steps in a row that want it, at most
 * LITE_MAX_INSTALLS times per run.  One vCPU, threads=1 only. */
#define X_LITE 0x8000000000000003ull
#define LITE_STREAK 4
#define LITE_MAX_INSTALLS 16
static int lite_mode = 1;  /* option lite=on|off */
static struct {
    volatile int active;   /* blocks translated now are at the outcome-free level */
    unsigned installs, removals, streak;
} lite;

static inline int64_t w2_inc(const struct w2sig *g, uint32_t e, int64_t clocks)
{
    return e < g->nk ? (int64_t)g->col[e] * clocks : g->rate * clocks;
}

static inline void touch(struct cvcpu *c, uint32_t e)
{
    if (!c->tmark[e]) {
        c->tmark[e] = 1;
        c->touched[c->ntouched++] = e;
    }
}

static inline void acc_add(struct cvcpu *c, uint32_t e, int64_t n)
{
    touch(c, e);
    c->acc[e] += n;
}

static inline void acc_last_add(struct cvcpu *c, uint32_t e, int64_t n)
{
    touch(c, e);
    c->acc_last[e] += n;
}

/* Add (sign +1) or remove (-1) a kind sequence of one execution portion. */
static void acc_seq(struct cvcpu *c, const uint32_t *s, unsigned n, int os, int sign)
{
    for (unsigned i = 0; i < n; i++) {
        acc_add(c, ext(s[i], os), sign);
        if (i) ph_add(&c->pairs, ext(s[i - 1], os), ext(s[i], os), sign);
    }
}

/* A portion [a, e) of an execution of b, as in the batch: clocks, internal pairs, its bubble
 * (a == 0: an execution start) and, if `ends`, its last clock as an execution end. */
static void acc_portion(struct cvcpu *c, const struct blk *b, unsigned a, unsigned e, int ends,
                        int sign)
{
    uint32_t *s;
    unsigned n = portion_seq(b, a, e, &s);
    acc_seq(c, s, n, b->os, sign);
    if (a == 0) c->firsts[b->os ? 1 : 0] += sign;
    if (ends && n) acc_last_add(c, ext(s[n - 1], b->os), sign);
    free(s);
}

static void cvcpu_init(struct cvcpu *c)
{
    if (c->init) return;
    c->init = 1;
    c->dirty = malloc(sizeof(uint32_t) * MAX_DIRTY);
    c->acc = calloc(NEXT, sizeof(int64_t));
    c->acc_last = calloc(NEXT, sizeof(int64_t));
    c->touched = malloc(sizeof(uint32_t) * NEXT);
    c->tmark = calloc(NEXT, 1);
    ph_init(&c->pairs, 1u << 12);
    c->o_cap = 1024;
    c->o_ext = malloc(sizeof(uint32_t) * c->o_cap);
    c->o_cnt = malloc(sizeof(int64_t) * c->o_cap);
    c->o_pcap = 1024;
    c->o_pa = malloc(sizeof(uint32_t) * c->o_pcap);
    c->o_pb = malloc(sizeof(uint32_t) * c->o_pcap);
    c->o_pn = malloc(sizeof(int64_t) * c->o_pcap);
}

/* ---------------------------------------------------------------------------------------- */
/* Classification (insn_classes._classify_one and _build, line by line)                      */
/* ---------------------------------------------------------------------------------------- */

static __thread csh tl_cs[3]; /* 16, 32, 64 */
static __thread cs_insn *tl_ci[3];

static int row_cmp(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct p4_named_row *)elem)->name);
}

static int cs_setup(void)
{
    int major = 0, minor = 0;
    cs_version(&major, &minor);
    if (major != CS_API_MAJOR) {
        fprintf(stderr, "p4pmu: Capstone %d.%d loaded, the plugin was built for %d.x\n", major,
                minor, CS_API_MAJOR);
        return -1;
    }
    csh h;
    if (cs_open(CS_ARCH_X86, CS_MODE_32, &h) != CS_ERR_OK) {
        fprintf(stderr, "p4pmu: cs_open failed\n");
        return -1;
    }
    unsigned n = 1;
    while (n < 100000 && cs_insn_name(h, n)) n++;
    cs_nids = n;
    for (int s = 0; s < 2; s++) {
        cs_rows[s] = calloc(n, sizeof(struct p4_row));
    }
    for (unsigned id = 0; id < n; id++) {
        const char *nm = id ? cs_insn_name(h, id) : NULL;
        const struct p4_named_row *r = nm ? bsearch(nm, p4_named_rows, P4_NAMED_ROWS,
                                                    sizeof(p4_named_rows[0]), row_cmp) : NULL;
        for (int s = 0; s < 2; s++) {
            if (r) {
                cs_rows[s][id] = r->r[s];
            } else {
                struct p4_row d = {1, s ? CLS_SIMDINT : CLS_NONE, 0, BRK_NONE, 0};
                cs_rows[s][id] = d;
            }
        }
    }
    cs_close(&h);
    return 0;
}

static cs_insn *cs_get(int mi, csh *hp)
{
    if (!tl_cs[mi]) {
        static const cs_mode modes[3] = {CS_MODE_16, CS_MODE_32, CS_MODE_64};
        if (cs_open(CS_ARCH_X86, modes[mi], &tl_cs[mi]) != CS_ERR_OK) {
            return NULL;
        }
        cs_option(tl_cs[mi], CS_OPT_DETAIL, CS_OPT_ON);
        tl_ci[mi] = cs_malloc(tl_cs[mi]);
    }
    *hp = tl_cs[mi];
    return tl_ci[mi];
}

static int is_sse_group(const cs_detail *d)
{
    for (int i = 0; i < d->groups_count; i++) {
        switch (d->groups[i]) {
        case X86_GRP_MMX: case X86_GRP_SSE1: case X86_GRP_SSE2: case X86_GRP_SSE3:
        case X86_GRP_SSSE3: case X86_GRP_SSE41: case X86_GRP_SSE42: case X86_GRP_3DNOW:
            return 1;
        default:
            break;
        }
    }
    return 0;
}

/* Classify one decoded instruction into *o (linear address addr). */
static void classify_insn(csh h, const cs_insn *ci, uint64_t addr, struct cinsn *o)
{
    const cs_detail *d = ci->detail;
    const cs_x86 *x = &d->x86;
    int sse = is_sse_group(d);
    struct p4_row row = (ci->id < cs_nids) ? cs_rows[sse][ci->id]
                                           : (struct p4_row){1, CLS_NONE, 0, BRK_NONE, 0};
    unsigned loads = 0, stores = 0;
    int xmm = 0, ctl = 0, indirect = 0, have_target = 0;
    uint64_t target = 0;
    for (int i = 0; i < x->op_count; i++) {
        const cs_x86_op *op = &x->operands[i];
        if (op->type == X86_OP_MEM) {
            if (row.flags & RF_STORE) {
                stores++;
            } else {
                if (op->access & CS_AC_READ) loads++;
                if (op->access & CS_AC_WRITE) stores++;
            }
            indirect = 1;
        } else if (op->type == X86_OP_REG) {
            unsigned r = op->reg;
            if (r >= X86_REG_XMM0 && r <= X86_REG_XMM31) xmm = 1;
            else if ((r >= X86_REG_CR0 && r <= X86_REG_CR15) ||
                     (r >= X86_REG_DR0 && r <= X86_REG_DR15)) ctl = 1;
            indirect = 1;
        } else if (op->type == X86_OP_IMM) {
            target = (uint64_t)op->imm;
            have_target = 1;
        }
    }
    if ((row.br == BRK_COND || row.br == BRK_JMP || row.br == BRK_CALL) && have_target) {
        indirect = 0;
    }
    int rep = x->prefix[0] == 0xF2 || x->prefix[0] == 0xF3;
    (void)h;

    /* _build */
    unsigned flags = row.flags;
    unsigned cls = row.cls;
    unsigned op = row.op;
    if (!strcmp(ci->mnemonic, "movsd") && xmm) {
        cls = CLS_SIMDMOVE;
        flags = RF_MOVE;
    }
    if (flags & RF_NOMEM) loads = stores = 0;
    if (flags & RF_ILOAD) loads++;
    if (flags & RF_ISTORE) stores++;
    if ((flags & RF_MOVE) && (loads || stores)) op = 0;
    memset(o, 0, sizeof(*o));
    o->addr = addr;
    o->len = (uint8_t)ci->size;
    o->lat = row.lat;
    if ((flags & RF_ALIGN) || ctl) o->flags |= CI_ALIGN;
    if (flags & RF_HLT) o->flags |= CI_HLT;
    unsigned uops;
    if (rep && (flags & RF_STRING)) {
        o->flags |= CI_REP | CI_ALIGN;
        o->rep_iter = (uint8_t)(1 + loads + 2 * stores);
        o->addr_size = x->addr_size;
        uops = 2;
        loads = stores = 0;
    } else {
        uops = op + loads + 2 * stores;
        if (uops < 1) uops = 1;
    }
    if (ctl && uops < 6) uops = 6;
    o->uops = uops > 255 ? 255 : (uint8_t)uops;
    o->loads = (uint8_t)loads;
    o->stores = (uint8_t)stores;
    unsigned opu = op ? op : 1;
    switch (cls) {
    case CLS_X87:
        o->fp[FPI_X87] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        break;
    case CLS_X87MOVE:
    case CLS_SIMDMOVE:
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        if (stores) o->fp[FPI_MOVST] = (uint8_t)stores;
        if (!loads && !stores) o->fp[FPI_MOVST] = (uint8_t)opu;
        break;
    case CLS_PSP: case CLS_PDP: case CLS_SSP: case CLS_SDP:
        o->fp[FPI_PSP + (cls - CLS_PSP)] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        if (stores) o->fp[FPI_MOVST] = (uint8_t)stores;
        break;
    case CLS_SIMDINT:
        o->fp[xmm ? FPI_MMX128 : FPI_MMX64] = (uint8_t)opu;
        if (loads) o->fp[FPI_MOVLD] = (uint8_t)loads;
        break;
    default:
        break;
    }
    switch (row.br) {
    case BRK_COND:
        o->br = BRK_COND;
        o->target = target;
        break;
    case BRK_JMP:
        o->br = indirect ? BRK_JMP_IND : BRK_JMP;
        o->target = indirect ? 0 : target;
        break;
    case BRK_CALL:
        o->br = indirect ? BRK_CALL_IND : BRK_CALL;
        o->target = indirect ? 0 : target;
        break;
    case BRK_RET:
        o->br = BRK_RET;
        break;
    case BRK_FAR:
        o->br = BRK_FAR;
        break;
    default:
        break;
    }
}

/* Fallback for an instruction Capstone cannot decode in any mode: 1 uop, nothing else. */
static void classify_unknown(uint64_t addr, unsigned len, struct cinsn *o)
{
    memset(o, 0, sizeof(*o));
    o->addr = addr;
    o->len = (uint8_t)len;
    o->uops = 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Predictor (clockmodel.Predictor)                                                          */
/* ---------------------------------------------------------------------------------------- */

#define PCHUNK 4096

static uint64_t *pent(struct cvcpu *c, uint32_t idx1)
{
    uint32_t i = idx1 - 1;
    return &c->pchunk[i / PCHUNK][i % PCHUNK];
}

/* the predictor entry of `key` in table m (created invalid), as an index + 1 */
static uint32_t pent_of(struct cvcpu *c, struct umap *m, uint64_t key)
{
    uint64_t *v = umap_get(m, key, 1);
    if (!*v) {
        uint32_t i = c->pn++;
        if (i / PCHUNK >= 4096) { /* 16M branch addresses: share the last entry */
            c->pn--;
            i = c->pn - 1;
        } else if (!c->pchunk[i / PCHUNK]) {
            c->pchunk[i / PCHUNK] = calloc(PCHUNK, sizeof(uint64_t));
        }
        *v = i + 1;
    }
    return (uint32_t)*v;
}

/* Conditional entries (clockmodel.Predictor.cond, docs/guest-events.md I5), as tables over
 * e = 0 (invalid) or counter + 1: the next entry after an outcome, and whether the entry
 * predicts taken (invalid: the static prediction, backward taken).  Together with what the
 * resolution path reads besides, in two cache lines (ct). */
static struct {
    /* k identical outcomes `taken` from entry x, for k = 0, 1, 2, >= 3 (three saturate the
     * counter from any state; later ones are predicted and change nothing): the entry after
     * (bits 0-2), the mispredictions among them (3-4), whether the last one was predicted
     * (5).  [taken][back][x][min(k, 3)], filled at set-up by cond_step itself. */
    uint8_t replay[2][2][5][4];
    uint8_t next[2][5];         /* [taken][e] */
    uint8_t pt[2][5];           /* [back][e]: predicts taken */
    uint8_t mmax[2][2][5];      /* the most mispredictions a run of identical outcomes
                                 * `taken` can still have from x: [taken][back][x] */
    uint8_t pen;                /* n_penalty */
    uint8_t trace;              /* br_trace != NULL */
    uint32_t pen_last;          /* k_pen_last */
    /* the usual explicit outcome in one look-up: min(k, 3) silent outcomes of the owner
     * then one outcome `taken`, from entry x: the entry after (bits 0-2), the silent
     * mispredictions (3-4), the last one predicted (5), the penalties to reserve for the
     * owner's next silent outcomes (6-7), the entry saturated in the silent direction (8).
     * [silent][back][x][min(k, 3)][taken] */
    uint16_t fast[2][2][5][4][2];
} __attribute__((aligned(64))) ct = {
    .next = {{2, 1, 1, 2, 3}, {3, 2, 3, 4, 4}},
    .pt = {{0, 0, 0, 1, 1}, {1, 0, 0, 1, 1}},
};

/* one outcome: returns 1 if it was predicted */
static inline int cond_step(uint64_t *e, int back, int taken)
{
    unsigned x = (unsigned)*e; /* always < 5: only these tables write entries */
    int pred = ct.pt[back][x] == taken;
    *e = ct.next[taken][x];
    return pred;
}

#define RP_E(r) ((r) & 7u)
#define RP_M(r) (((r) >> 3) & 3u)
#define RP_LP(r) (((r) >> 5) & 1u)

static void cond_tables(void)
{
    for (int t = 0; t < 2; t++)
        for (int back = 0; back < 2; back++)
            for (unsigned x = 0; x < 5; x++) {
                uint64_t e = x;
                unsigned m = 0;
                ct.replay[t][back][x][0] = (uint8_t)(x | 1u << 5);
                for (int k = 1; k <= 3; k++) {
                    unsigned p = (unsigned)cond_step(&e, back, t);
                    m += !p;
                    ct.replay[t][back][x][k] = (uint8_t)(e | m << 3 | p << 5);
                }
                ct.mmax[t][back][x] = (uint8_t)m;
            }
    for (int t = 0; t < 2; t++)
        for (int back = 0; back < 2; back++)
            for (unsigned x = 0; x < 5; x++)
                for (unsigned kk = 0; kk < 4; kk++)
                    for (int tk = 0; tk < 2; tk++) {
                        unsigned rp = ct.replay[t][back][x][kk];
                        uint64_t e = RP_E(rp);
                        unsigned p = (unsigned)cond_step(&e, back, tk);
                        unsigned want = ct.mmax[t][back][e];
                        unsigned sat = e == (t ? 4u : 1u);
                        ct.fast[t][back][x][kk][tk] =
                            (uint16_t)(e | RP_M(rp) << 3 | p << 5 | want << 6 | sat << 8);
                    }
}

static void pred_call(struct cvcpu *c, uint64_t ret)
{
    if (c->rsb_n == P4P_RSB_DEPTH) {
        memmove(&c->rsb[0], &c->rsb[1], sizeof(uint64_t) * (P4P_RSB_DEPTH - 1));
        c->rsb_n--;
    }
    c->rsb[c->rsb_n++] = ret;
}

static int pred_ret(struct cvcpu *c, uint64_t target)
{
    if (!c->rsb_n) return 0;
    return c->rsb[--c->rsb_n] == target;
}

static int pred_ind_e(uint64_t *e, uint64_t target)
{
    int ok = *e == target + 1;
    *e = target + 1;
    return ok;
}

static int pred_ind(struct cvcpu *c, uint64_t addr, uint64_t target)
{
    uint64_t i = P4P_BTB_ENTRIES ? addr % (P4P_BTB_ENTRIES ? P4P_BTB_ENTRIES : 1) : addr;
    return pred_ind_e(pent(c, pent_of(c, &c->btb, i)), target);
}

/* ---------------------------------------------------------------------------------------- */
/* Blocks                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/* most clocks one execution of b can add (W): static clocks, the dynamic final clock and a
 * misprediction penalty; REP: unbounded (its iterations), taken as 2^20 */
static uint64_t maxclk_calc(const struct blk *b)
{
    uint64_t m = b->nclocks;
    if (b->end == END_REP) m += 1u << 20;
    else if (dyn_end(b)) m += 1 + n_penalty;
    return m;
}

static int end_of(const struct cinsn *last)
{
    if (last->flags & CI_REP) return END_REP;
    return last->br;
}

/* the final (dynamic) clock of a dynamic-end block, as fields */
static void final_fields(const struct blk *b, struct clk *out)
{
    unsigned cap = sched_cap(b);
    struct clk *c = malloc(sizeof(*c) * cap);
    unsigned m = schedule(b->ins, 0, b->n, c, cap);
    if (m) *out = c[m - 1];
    else memset(out, 0, sizeof(*out));
    free(c);
}

/* A conditional-end block joins the group of its predictor entry (created with the static
 * prediction's direction as its silent direction); it becomes silent-capable (a gate word,
 * SB_X = the silent direction's address) unless the group is full, gates ran out, or the
 * branch goes to the next instruction either way.  Called with cnt_lock held, before the
 * block is published. */
static struct umap gmap; /* predictor key -> group id */

static void group_join_locked(struct blk *b, uint32_t id, uint64_t nxt)
{
    const struct cinsn *last = &b->ins[b->n - 1];
    uint64_t key = P4P_COND_ENTRIES ? last->addr % (P4P_COND_ENTRIES ? P4P_COND_ENTRIES : 1)
                                    : last->addr;
    uint64_t *gv = umap_get(&gmap, key, 1);
    if (!*gv) {
        /* cannot run out: every group is created by a new block (MAX_GROUPS = MAX_BLOCKS) */
        struct grp *g = calloc(1, sizeof(*g));
        g->key = key;
        g->silent_t = b->back;
        groups[n_groups] = g;
        *gv = n_groups++;
    }
    b->gid = (uint32_t)*gv;
    struct grp *g = groups[b->gid];
    b->silent_t = g->silent_t;
    if (last->target == nxt || g->nmem >= GMAX || n_gates >= MAX_GATES) return;
    b->gate = ++n_gates;
    b->xval = g->silent_t ? last->target : nxt;
    (void)id; /* listed in the group once published (block_new) */
}

static uint32_t block_new(uint64_t vaddr, unsigned n, struct cinsn *ins, int os, int mode,
                          int lite_lvl)
{
    struct blk *b = aligned_alloc(64, (sizeof(*b) + 63) & ~(size_t)63);
    memset(b, 0, sizeof(*b));
    b->vaddr = vaddr;
    b->n = n;
    b->ins = ins;
    b->os = (uint8_t)os;
    b->mode = (uint8_t)mode;
    b->end = (uint8_t)end_of(&ins[n - 1]);
    if (lite_lvl && b->end == BRK_COND) {
        b->end = BRK_NONE; /* outcome-free level: a static end (variant 0) */
        b->lite_cond = 1;
    }
    /* static schedule: the full portion of one execution */
    uint32_t *s;
    unsigned m = portion_seq_calc(b, 0, n, &s);
    b->nclocks = m;
    b->first_k = s[0];
    b->last_k = s[m - 1];
    /* histogram and pairs (small blocks: quadratic is fine) */
    b->hk = malloc(sizeof(uint32_t) * m * 2);
    b->hc = b->hk + m;
    b->pa = malloc(sizeof(uint32_t) * (m ? m : 1) * 3);
    b->pb = b->pa + m;
    b->pc = b->pb + m;
    for (unsigned i = 0; i < m; i++) {
        unsigned j;
        for (j = 0; j < b->nk && b->hk[j] != s[i]; j++) {}
        if (j == b->nk) { b->hk[b->nk] = s[i]; b->hc[b->nk++] = 0; }
        b->hc[j]++;
        if (i) {
            for (j = 0; j < b->np && !(b->pa[j] == s[i - 1] && b->pb[j] == s[i]); j++) {}
            if (j == b->np) { b->pa[b->np] = s[i - 1]; b->pb[b->np] = s[i]; b->pc[b->np++] = 0; }
            b->pc[j]++;
        }
    }
    free(s);
    if (dyn_end(b) && b->end != END_REP) {
        size_t rsz = (size_t)n_vcpus_max * sizeof(struct bres);
        b->res = aligned_alloc(64, rsz);
        memset(b->res, 0, rsz);
        struct clk f;
        final_fields(b, &f);
        f.f[KF_BR] = b->end;
        b->final_k = kind_intern(f.f);
        for (int t = 0; t < 2; t++) {
            for (int mp = 0; mp < 2; mp++) {
                struct clk g = f;
                g.f[KF_TAKEN] = (uint8_t)t;
                g.f[KF_MISP] = (uint8_t)mp;
                b->var[t * 2 + mp] = kind_intern(g.f);
            }
        }
    }
    b->maxclk = (uint32_t)maxclk_calc(b);
    /* W per execution: the static clocks and the final clock (a misprediction's penalty is
     * added when it is known, or reserved: silent_reserve); REP: added at its resolution */
    b->wadd = b->nclocks + (dyn_end(b) && b->end != END_REP ? 1 : 0);
    const struct cinsn *last = &ins[n - 1];
    uint64_t nxt = last->addr + last->len;
    /* SB_X at entry: where the next block starts when no resolution is needed (static ends)
     * or when the outcome is silent; X_FORCE: the next block entry resolves it */
    b->xval = b->end == BRK_NONE ? nxt : b->end == BRK_JMP ? last->target : X_FORCE;
    if (lite_lvl && (b->end == BRK_NONE || b->end == BRK_JMP)) b->xval = X_LITE;
    b->back = last->target < last->addr;
    b->btarget = last->target;
    b->bnext = nxt;
    pthread_mutex_lock(&cnt_lock);
    uint32_t id = n_blocks;
    if (id >= MAX_BLOCKS) {
        pthread_mutex_unlock(&cnt_lock);
        if (!blocks_full_warned++) {
            fprintf(stderr, "p4pmu: more than %u translated blocks: later blocks are not "
                            "counted (see docs/guest-events.md, limits)\n", MAX_BLOCKS);
        }
        free(b->hk); free(b->pa); free(ins); free(b);
        return 0;
    }
    if (b->end == BRK_COND) group_join_locked(b, id, nxt);
    blocks[id] = b;
    if (b->gate) {
        struct grp *g = groups[b->gid];
        g->mem[g->nmem] = id;
        __atomic_store_n(&g->nmem, g->nmem + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&n_blocks, id + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cnt_lock);
    return id;
}

static inline uint64_t maxclk(const struct blk *b)
{
    return b->maxclk;
}

static int find_insn(const struct blk *b, uint64_t addr)
{
    for (unsigned j = 0; j < b->n; j++) {
        if (b->ins[j].addr == addr) return (int)j;
    }
    return -1;
}

/* find_insn for an address known to be inside an execution of b: QEMU's x86 blocks are
 * position-independent (CF_PCREL) and shared by every virtual address that maps the same
 * physical code, e.g. a shared library in two processes, so the execution may run at another
 * virtual address than b->vaddr, at the same page offset.  -1 if no instruction matches. */
static int find_insn_in(const struct blk *b, uint64_t addr)
{
    int j = find_insn(b, addr), hit = -1;
    if (j >= 0) return j;
    for (unsigned k = 0; k < b->n; k++) {
        if (((b->ins[k].addr ^ addr) & 0xFFF) == 0) {
            if (hit >= 0) return -1; /* ambiguous (a block longer than a page) */
            hit = (int)k;
        }
    }
    return hit;
}

/* ---------------------------------------------------------------------------------------- */
/* Resolution of dynamic block ends                                                          */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rd_rcx(struct vcpu *v); /* p4pmu_plugin.c */

static void rep_resolve(unsigned vi, struct cvcpu *c, const struct blk *pb, uint64_t a_new,
                        int regs_ok)
{
    const struct cinsn *r = &pb->ins[pb->n - 1];
    int os = pb->os;
    uint64_t mask = r->addr_size >= 8 ? ~0ull : r->addr_size == 4 ? 0xFFFFFFFFull : 0xFFFFull;
    uint64_t after = regs_ok ? (rd_rcx(&vcpus[vi]) & mask) : 0;
    uint64_t iters = (c->rep_rcx - after) & mask;
    int done = a_new != r->addr;
    uint64_t uops = 2 + (uint64_t)r->rep_iter * iters;
    uint64_t nfull = (uops - 1) / P4P_RETIRE_WIDTH;
    struct clk f;
    memset(&f, 0, sizeof(f));
    f.f[KF_UOPS] = (uint8_t)(uops - P4P_RETIRE_WIDTH * nfull);
    if (done) {
        f.f[KF_INSTR] = 1;
        f.f[KF_INSTR_LD] = r->loads > 0;
        f.f[KF_INSTR_ST] = r->stores > 0;
        f.f[KF_INSTR_LDST] = r->loads > 0 && r->stores > 0;
    }
    uint64_t ld = r->loads * iters, st = r->stores * iters;
    f.f[KF_LD] = ld > 255 ? 255 : (uint8_t)ld;
    f.f[KF_ST] = st > 255 ? 255 : (uint8_t)st;
    uint32_t fk = kind_intern(f.f);
    uint32_t prev = ext(pb->last_k, os);
    if (nfull) {
        acc_add(c, ext(k_rep_full, os), (int64_t)nfull);
        ph_add(&c->pairs, prev, ext(k_rep_full, os), 1);
        ph_add(&c->pairs, ext(k_rep_full, os), ext(k_rep_full, os), (int64_t)nfull - 1);
        prev = ext(k_rep_full, os);
    }
    acc_add(c, ext(fk, os), 1);
    ph_add(&c->pairs, prev, ext(fk, os), 1);
    acc_last_add(c, ext(fk, os), 1);
    c->res_last = ext(fk, os) + 1;
    if (nfull + 1 <= 64) {
        c->res_n = 0;
        for (uint64_t i = 0; i < nfull; i++) c->res_seq[c->res_n++] = ext(k_rep_full, os);
        c->res_seq[c->res_n++] = ext(fk, os);
    } else {
        c->res_n = -1;
    }
    sbv(vi)[SB_W] += nfull + 1;
    if (c->w2_on) {
        sbv(vi)[SB_W2] += (uint64_t)(w2_inc(&w2.sig, ext(k_rep_full, os), (int64_t)nfull) +
                                     w2_inc(&w2.sig, ext(fk, os), 1));
    }
}

/* a silent-capable block's bank word */
static inline uint64_t *bank_w(struct cvcpu *c, const struct blk *b)
{
    return &c->sbase[SB_BANK0 + b->gate - 1];
}

/* the executions of block id in the current batch */
static inline uint64_t en_total(const struct cvcpu *c, uint32_t id)
{
    const struct blk *b = blocks[id];
    return c->sbase[SB_HDR + id] + (b->gate ? c->sbase[SB_BANK0 + b->gate - 1] : 0);
}

/* gate (its next entry fires cb_first) / ungate a member */
static inline void gate_close(struct cvcpu *c, uint32_t id)
{
    uint64_t *sb = c->sbase;
    *bank_w(c, blocks[id]) += sb[SB_HDR + id];
    sb[SB_HDR + id] = 0;
}

static inline void gate_open(struct cvcpu *c, uint32_t id)
{
    uint64_t *sb = c->sbase, *bk = bank_w(c, blocks[id]);
    sb[SB_HDR + id] += *bk;
    *bk = 0;
}

/* The outcome variant v (taken * 2 + mispredicted) of an execution of b as the last
 * resolved one; res_seq is filled only when a fold needs it (res_fill). */
static inline void res_set(struct cvcpu *c, uint32_t pid, const struct blk *b, unsigned v)
{
    (void)b; /* (res_fill looks it up) */
    c->res_b = pid;
    c->res_v = (int)v;
    c->res_n = RES_LAZY;
}

/* res_seq and res_last of a lazily recorded resolution */
static void res_fill(struct cvcpu *c)
{
    if (c->res_n != RES_LAZY) return;
    const struct blk *b = blocks[c->res_b];
    unsigned v = (unsigned)c->res_v;
    c->res_n = 0;
    c->res_seq[c->res_n++] = ext(b->var[v], b->os);
    if (v & 1) {
        for (unsigned p = 0; p < n_penalty && c->res_n < 64; p++)
            c->res_seq[c->res_n++] = ext(k_penalty[p], b->os);
    }
    uint32_t e = ext(b->var[v], b->os);
    if ((v & 1) && n_penalty) e = ext(k_penalty[n_penalty - 1], b->os);
    c->res_last = e + 1;
}

/* n outcomes of variant v of block b straight into the batch's accumulators (final clock,
 * its pair with the block's last static clock, penalty clocks, the execution end) */
static void expand_outcomes(struct cvcpu *c, const struct blk *b, unsigned v, int64_t n)
{
    uint32_t e = ext(b->var[v], b->os);
    acc_add(c, e, n);
    ph_add(&c->pairs, ext(b->last_k, b->os), e, n);
    if (v & 1) {
        for (unsigned p = 0; p < n_penalty; p++) {
            uint32_t pe = ext(k_penalty[p], b->os);
            acc_add(c, pe, n);
            ph_add(&c->pairs, e, pe, n);
            e = pe;
        }
    }
    acc_last_add(c, e, n);
}

/* n outcomes of variant v of block `id`: counted per block while it is on the dirty list
 * (expanded at the fold), else (an execution carried over from the previous batch)
 * directly into the accumulators */
static inline void record(struct cvcpu *c, uint32_t id, const struct blk *b, struct bres *r,
                          unsigned v, int64_t n)
{
    if (en_total(c, id)) r->n[v] += (uint64_t)n;
    else expand_outcomes(c, b, v, n);
}

static void trace_line(const struct blk *b, uint64_t a_new, int taken, int pred, uint64_t n)
{
    const struct cinsn *last = &b->ins[b->n - 1];
    fprintf(br_trace, "%u %#llx %#llx %#llx %#llx %d %d %#llx %llu\n", b->end,
            (unsigned long long)last->addr, (unsigned long long)last->target,
            (unsigned long long)(last->addr + last->len), (unsigned long long)a_new, taken,
            pred, (unsigned long long)b->vaddr, (unsigned long long)n);
}

/* ---------------------------------------------------------------------------------------- */
/* Silent branch outcomes (docs/guest-events.md, "Silent branch outcomes")                   */
/* ---------------------------------------------------------------------------------------- */

/*
 * A conditional-end block B that is silent-capable stores at its entry SB_X = the address
 * its branch reaches in the group's silent direction; every block S checks at its entry
 * "SB_X != S.vaddr" (cb_xcheck) before anything else.  So an outcome in the silent direction
 * costs no callback; any other outcome, and every call, return, indirect branch and REP end
 * (SB_X = X_FORCE), is resolved by the next block's cb_xcheck as before.  The silent outcomes
 * of B are k = (B's executions in the batch) - (those accounted: resolved, replayed, cut)
 * - (the last one, if still pending), all in the same direction.
 *
 * Conditional predictor entries are independent (I5), so only the order of one entry's
 * outcomes matters.  The silent outcomes of an entry are replayed before anything else
 * touches it (an explicit outcome, a fold, a deadline check).  When several blocks end in
 * branches using the same entry, their silent outcomes interleave in an unknown order; that
 * is harmless only while the entry is saturated in the silent direction (all predicted, no
 * change).  Hence gates: every member may run silently while the entry is saturated in the
 * silent direction ("open" group), else only one member, the owner.  A member is gated by
 * zeroing its execution counter (its count moves to its bank word, SB_BANK0 + gate - 1):
 * its next entry then fires cb_first (the dirty-list callback, "counter == 0"), which makes
 * it the owner after the previous owner's silent outcomes were replayed (and banks that
 * one).  No extra operation per block.  Silent outcomes are therefore replayed exactly, in
 * order, per entry.  A block's executions in the batch = counter + bank (en_total); only a
 * gated member has a bank.
 *
 * W must not fall behind the clocks: an owner's silent outcomes can be mispredicted (at
 * most ct.mmax in a row from the entry's state); their penalty clocks are reserved in W
 * (gst.resv, cvcpu.w_resv, also re-added by arm()) until the replay knows them.
 */

static inline struct gst *gst_of(struct cvcpu *c, uint32_t gid)
{
    struct gst **ch = &c->gch[gid / GCHUNK];
    if (__builtin_expect(!*ch, 0)) *ch = calloc(GCHUNK, sizeof(struct gst));
    return &(*ch)[gid % GCHUNK];
}

/* this vCPU's state of b's group (the pointer is kept in b's per-vCPU record) */
static inline struct gst *bgst(struct cvcpu *c, const struct blk *b, struct bres *r)
{
    if (__builtin_expect(!r->g, 0)) r->g = gst_of(c, b->gid);
    return r->g;
}

/* reserve in W the penalties the owner's coming silent outcomes may have (branch-free:
 * this runs at every explicit outcome) */
static inline void silent_reserve(struct cvcpu *c, int silent_t, struct gst *g)
{
    unsigned want = ct.mmax[silent_t][g->oback][g->e];
    want = g->owner && !g->open ? want : 0;
    int64_t d = (int64_t)want - (int64_t)g->resv;
    c->sbase[SB_W] += (uint64_t)(d * (int64_t)ct.pen);
    c->w_resv += (uint64_t)d;
    g->resv = (uint8_t)want;
}

static inline void set_owner(struct gst *g, uint32_t id)
{
    g->owner = id;
    g->oback = id ? blocks[id]->back : 0;
}

/* the trace of k silent outcomes as counted: the first m mispredicted (a run of identical
 * outcomes is mispredicted at its start only), then predicted ones */
static void trace_silent(const struct blk *b, unsigned m, int64_t k)
{
    int t = b->silent_t;
    uint64_t to = t ? b->btarget : b->bnext;
    if (m) trace_line(b, to, t, 0, m);
    if (k > (int64_t)m) trace_line(b, to, t, 1, (uint64_t)k - m);
}

/* Replay the silent outcomes of member b (block `id`) not yet accounted (`pending`: its
 * last execution has no outcome yet).  Returns the variant of the last one replayed, or -1.
 * Branch-free in the usual case (k is as often 0 as not). */
static inline __attribute__((always_inline)) int
catch_up_b(unsigned vi, struct cvcpu *c, uint32_t id, const struct blk *b, int pending)
{
    struct bres *r = &b->res[vi];
    uint64_t *sb = c->sbase;
    uint64_t nb = sb[SB_HDR + id] + sb[SB_BANK0 + b->gate - 1];
    int64_t k = (int64_t)nb - r->acc - pending;
    if (__builtin_expect(k < 0, 0)) {
        c->silent_bad++;
        return -1;
    }
    struct gst *g = bgst(c, b, r);
    int t = b->silent_t;
    unsigned x = (unsigned)g->e;
    unsigned kk = k < 3 ? (unsigned)k : 3;
    unsigned rp = ct.replay[t][b->back][x][kk];
    r->acc += k;
    g->e = RP_E(rp);
    unsigned m = RP_M(rp);
    if (__builtin_expect(ct.trace, 0) && k) trace_silent(b, m, k);
    if (__builtin_expect(nb != 0, 1)) {
        r->n[t * 2 + 1] += m;
        r->n[t * 2] += (uint64_t)k - m;
    } else {
        if (m) expand_outcomes(c, b, (unsigned)t * 2 + 1, m);
        if (k > (int64_t)m) expand_outcomes(c, b, (unsigned)t * 2, k - m);
    }
    sb[SB_W] += (uint64_t)m * ct.pen;
    c->silent += (uint64_t)k;
    silent_reserve(c, t, g);
    return k ? t * 2 + !RP_LP(rp) : -1;
}

static int catch_up(unsigned vi, struct cvcpu *c, uint32_t id, int pending)
{
    return catch_up_b(vi, c, id, blocks[id], pending);
}

/* open: every member's gate; close: every member's but `keep`'s (their silent outcomes
 * must have been replayed: they happened while the entry was saturated) */
static void group_gates(struct cvcpu *c, const struct grp *gr, int open, uint32_t keep)
{
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t m = gr->mem[i];
        if (open || m == keep) gate_open(c, m);
        else gate_close(c, m);
    }
}

/* an open group: every member's silent outcomes (before an explicit outcome of block
 * `cur`, whose last execution is the one being resolved) */
static void catch_up_open(unsigned vi, struct cvcpu *c, const struct grp *gr, uint32_t cur)
{
    uint32_t nm = __atomic_load_n(&gr->nmem, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t m = gr->mem[i];
        catch_up(vi, c, m, m == cur);
    }
}

/* the entry changed by an explicit outcome of block `cur` and is not saturated in the
 * silent direction any more, or is now: reorganise the gates (rare) */
static void group_change(struct cvcpu *c, const struct blk *pb, struct gst *g, uint32_t cur,
                         int sat)
{
    const struct grp *gr = groups[pb->gid];
    if (sat) {
        g->open = 1;
        set_owner(g, 0);
        group_gates(c, gr, 1, 0);
        return;
    }
    uint32_t own = pb->gate ? cur : g->owner;
    if (g->open) {
        g->open = 0;
        set_owner(g, own);
        group_gates(c, gr, 0, own);
    } else {
        if (g->owner) gate_close(c, g->owner);
        if (own) gate_open(c, own);
        set_owner(g, own);
    }
}

/* explicit outcome of a conditional-end block's last execution: the next instruction is at
 * a_new.  The silent outcomes of its entry come first (the open group's members, or the
 * owner), then this one; then the group opens or closes if the entry's saturation changed. */
static void resolve_cond(unsigned vi, struct cvcpu *c, uint32_t pid, const struct blk *pb,
                         uint64_t a_new);

static __attribute__((noinline, cold)) void trace_fast(const struct blk *pb, uint64_t a_new,
                                                       int64_t k, unsigned u, int taken)
{
    if (k) trace_silent(pb, RP_M(u), k);
    trace_line(pb, a_new, taken, (int)RP_LP(u), 1);
}

/* The usual case of resolve_cond in a few instructions: the group is closed, this block is
 * its owner, the entry does not become saturated, on the dirty list, no trace.  The same
 * arithmetic as catch_up_b + cond_step + silent_reserve, from one table (ct.fast).  Reads
 * the block's constants from the xcache entry (xc). */
static inline __attribute__((always_inline)) void
resolve_cond_fast(unsigned vi, struct cvcpu *c, uint32_t pid, const struct xcache *xc,
                  uint64_t a_new)
{
    struct bres *r = xc->r;
    struct gst *g = xc->g;
    uint64_t *sb = c->sbase;
    uint64_t nb = sb[SB_HDR + pid];
    int64_t k = (int64_t)nb - r->acc - 1;
    if (__builtin_expect(g->open || g->owner != pid || !nb || k < 0, 0)) {
        resolve_cond(vi, c, pid, blocks[pid], a_new);
        return;
    }
    uint64_t taken = a_new == xc->btarget || xc->btarget == xc->bnext;
    uint64_t t = xc->t;
    /* (all 64-bit: a narrower spill and a wider reload of the table entry stalled here) */
    uint64_t u = ct.fast[t][xc->back][g->e][k < 3 ? k : 3][taken];
    if (__builtin_expect(u >> 8, 0)) { /* saturated: the group opens */
        resolve_cond(vi, c, pid, blocks[pid], a_new);
        return;
    }
    if (__builtin_expect(ct.trace, 0)) trace_fast(blocks[pid], a_new, k, (unsigned)u, (int)taken);
    uint64_t m = (u >> 3) & 3u, mis = !((u >> 5) & 1u), want = (u >> 6) & 3u;
    g->e = u & 7u;
    r->n[t * 2 + 1] += m;
    r->n[t * 2] += (uint64_t)k - m;
    uint64_t v = taken * 2 + mis;
    r->n[v]++;
    r->acc = (int64_t)nb;
    int64_t d = (int64_t)want - (int64_t)g->resv;
    sb[SB_W] += (uint64_t)(((int64_t)(m + mis) + d) * (int64_t)ct.pen);
    c->w_resv += (uint64_t)d;
    g->resv = (uint8_t)want;
    c->res_b = pid;
    c->res_v = (int)v;
    c->res_n = RES_LAZY;
    c->resolutions++;
    c->silent += (uint64_t)k;
}

static void resolve_cond(unsigned vi, struct cvcpu *c, uint32_t pid, const struct blk *pb,
                         uint64_t a_new)
{
    int taken = a_new == pb->btarget || pb->btarget == pb->bnext;
    c->resolutions++;
    struct bres *r = &pb->res[vi];
    struct gst *g = bgst(c, pb, r);
    if (__builtin_expect(g->open, 0)) {
        catch_up_open(vi, c, groups[pb->gid], pid);
    } else {
        if (__builtin_expect(g->owner != pid && g->owner, 0)) catch_up(vi, c, g->owner, 0);
        if (pb->gate) catch_up_b(vi, c, pid, pb, 1);
    }
    int pred = cond_step(&g->e, pb->back, taken);
    unsigned v = (unsigned)(taken * 2 + !pred);
    if (__builtin_expect(ct.trace, 0)) trace_line(pb, a_new, taken, pred, 1);
    r->acc++;
    uint64_t *sb = c->sbase;
    if (__builtin_expect(en_total(c, pid) != 0, 1)) r->n[v]++;
    else expand_outcomes(c, pb, v, 1);
    sb[SB_W] += (uint64_t)!pred * ct.pen;
    res_set(c, pid, pb, v);
    int sat = g->e == (pb->silent_t ? 4u : 1u);
    if (__builtin_expect(sat != g->open || (!sat && pb->gate && g->owner != pid), 0)) {
        group_change(c, pb, g, pid, sat);
    }
    silent_reserve(c, pb->silent_t, g);
}

static void resolve(unsigned vi, struct cvcpu *c, uint32_t pid, uint64_t a_new, int regs_ok)
{
    const struct blk *pb = blocks[pid];
    const struct cinsn *last = &pb->ins[pb->n - 1];
    int os = pb->os;
    int taken = 1, pred = 1;
    if (pb->end == BRK_COND) {
        resolve_cond(vi, c, pid, pb, a_new);
        return;
    }
    c->resolutions++;
    c->res_b = pid;
    if (pb->res && c->sbase[SB_HDR + pid]) {
        /* fast path: the block is on the dirty list; its outcomes are counted per variant and
         * expanded at the fold */
        struct bres *r = &pb->res[vi];
        uint64_t nxt = last->addr + last->len;
        switch (pb->end) {
        case BRK_CALL:
            pred_call(c, nxt);
            break;
        case BRK_CALL_IND:
        case BRK_JMP_IND:
            if (!r->pidx) {
                uint64_t k = P4P_BTB_ENTRIES
                                 ? last->addr % (P4P_BTB_ENTRIES ? P4P_BTB_ENTRIES : 1)
                                 : last->addr;
                r->pidx = pent_of(c, &c->btb, k);
            }
            pred = pred_ind_e(pent(c, r->pidx), a_new);
            if (pb->end == BRK_CALL_IND) pred_call(c, nxt);
            break;
        case BRK_RET:
            pred = pred_ret(c, a_new);
            break;
        default:
            return;
        }
        if (br_trace) trace_line(pb, a_new, taken, pred, 1);
        unsigned v = (unsigned)(taken * 2 + !pred);
        r->n[v]++;
        res_set(c, pid, pb, v);
        if (!pred) c->sbase[SB_W] += n_penalty;
        return;
    }
    switch (pb->end) {
    case BRK_CALL:
        pred_call(c, last->addr + last->len);
        break;
    case BRK_CALL_IND:
        pred = pred_ind(c, last->addr, a_new);
        pred_call(c, last->addr + last->len);
        break;
    case BRK_JMP_IND:
        pred = pred_ind(c, last->addr, a_new);
        break;
    case BRK_RET:
        pred = pred_ret(c, a_new);
        break;
    case END_REP:
        rep_resolve(vi, c, pb, a_new, regs_ok);
        return;
    default:
        return;
    }
    if (br_trace) trace_line(pb, a_new, taken, pred, 1);
    uint32_t fin = pb->var[taken * 2 + !pred];
    acc_add(c, ext(fin, os), 1);
    ph_add(&c->pairs, ext(pb->last_k, os), ext(fin, os), 1);
    uint32_t lastk = fin;
    c->res_n = 0;
    c->res_seq[c->res_n++] = ext(fin, os);
    if (!pred) {
        for (unsigned p = 0; p < n_penalty; p++) {
            acc_add(c, ext(k_penalty[p], os), 1);
            ph_add(&c->pairs, ext(lastk, os), ext(k_penalty[p], os), 1);
            lastk = k_penalty[p];
            if (c->res_n < 64) c->res_seq[c->res_n++] = ext(lastk, os);
        }
        sbv(vi)[SB_W] += n_penalty;
    }
    acc_last_add(c, ext(lastk, os), 1);
    c->res_last = ext(lastk, os) + 1;
}

/* Is the outcome of the last execution of the current block still to come?  (Callers at a
 * block entry settle the previous block first: entry_settle.) */
static inline int cur_pending(struct cvcpu *c, uint32_t id)
{
    return id && c->sbase[SB_CUR] == id && c->sbase[SB_X] != X_DONE;
}

/* At the entry of block S, after cb_xcheck's place: the previous block's outcome is decided
 * (resolved, or silent when SB_X == S.vaddr); account a silent one now, so that a fold or a
 * set_pc here sees it.  SB_X = X_DONE afterwards (S stores its own value if it runs). */
static void entry_settle(unsigned vi, struct cvcpu *c)
{
    uint64_t *sb = c->sbase;
    if (sb[SB_X] == X_DONE) return;
    sb[SB_X] = X_DONE;
    uint32_t prev = (uint32_t)sb[SB_CUR];
    if (!prev || !blocks[prev]->gate) return;
    int v = catch_up(vi, c, prev, 0);
    if (v >= 0) res_set(c, prev, blocks[prev], (unsigned)v);
}

/* every dirty (and the carried) silent-capable block: replay what is not yet accounted;
 * the current block's last execution stays pending if its outcome is */
static void silent_catch_up_all(unsigned vi)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = c->sbase;
    uint32_t cur = (uint32_t)sb[SB_CUR];
    for (uint32_t i = 0; i < c->ndirty; i++) {
        uint32_t id = c->dirty[i];
        if (blocks[id]->gate) catch_up(vi, c, id, cur_pending(c, id));
    }
    uint32_t cb = c->carry_b;
    if (cb && !en_total(c, cb)) catch_up(vi, c, cb, cur_pending(c, cb));
    (void)cur;
}

/* before a batch is closed (fold_close): all silent outcomes in, and the per-batch
 * bookkeeping restarted where the block counters restart (an execution whose outcome is
 * still pending is carried into the next batch) */
static void silent_before_fold(unsigned vi)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = c->sbase;
    silent_catch_up_all(vi);
    for (uint32_t i = 0; i < c->ndirty; i++) {
        const struct blk *b = blocks[c->dirty[i]];
        if (b->end == BRK_COND) b->res[vi].acc = -cur_pending(c, c->dirty[i]);
    }
    uint32_t cur = (uint32_t)sb[SB_CUR];
    if (c->carry_b && c->carry_b != cur && !en_total(c, c->carry_b)) {
        blocks[c->carry_b]->res[vi].acc = 0;
    }
    c->carry_b = cur && blocks[cur]->gate && cur_pending(c, cur) ? cur : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Splits (PMU accesses), cuts (exceptions, abandoned blocks)                                */
/* ---------------------------------------------------------------------------------------- */

/* start index of the open execution of block id in the current batch, and whether it is
 * represented by the block's counter (else by a credited portion) */
static unsigned open_start(struct cvcpu *c, uint32_t id, uint64_t *sb)
{
    (void)sb;
    if (c->open_b == id && c->open_stamp == en_total(c, id)) {
        return c->open_a;
    }
    return 0;
}

/* The execution of block `id` stops after instruction e-1 (instructions e.. do not retire in
 * it); `pending`: its outcome was still to come (so it has none now, not even a silent one).
 * Called on the vCPU's thread (exception callback, abandoned blocks). */
static void cut_exec(unsigned vi, uint32_t id, unsigned e, int pending)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    const struct blk *b = blocks[id];
    if (e >= b->n) return;
    unsigned a = open_start(c, id, sb);
    if (e < pos_insn(a)) e = pos_insn(a);
    acc_portion(c, b, a, b->n, !dyn_end(b), -1);
    acc_portion(c, b, a, e, 1, +1);
    uint32_t *s;
    unsigned n = portion_seq(b, a, e, &s);
    c->cut_last = n ? ext(s[n - 1], b->os) + 1 : 0;
    if (a) {
        /* the rest of an execution split by an access began this batch: it now begins with
         * what retired of it, or (nothing did: the access instruction faulted) with the
         * next block execution, found at the fold */
        c->next_first = n ? ext(s[0], b->os) + 1 : 0;
        c->next_first_bubble = 0;
    }
    free(s);
    if (pending && b->end == BRK_COND) {
        b->res[vi].acc++; /* this execution has no outcome (not a silent one either) */
    }
    sb[SB_X] = X_DONE;
    sb[SB_CUR] = 0;
    c->open_b = 0;
    c->batch_entry_b = 0;
}

static void counting_cut(unsigned vi, uint32_t id, unsigned e)
{
    cut_exec(vi, id, e, sbv(vi)[SB_X] != X_DONE);
}

/* The next instruction is at `a`, an instruction of the block `id` that ran last other than
 * its first, and not where that block's last instruction goes: QEMU left the block there
 * without a discontinuity callback and went on at that instruction in a new block.  That
 * happens when an instruction in the middle of a block accesses MMIO (e.g. the local APIC):
 * QEMU stops, runs the instructions up to the access in a block built for that alone
 * (CF_MEMI_ONLY, which plugins see no block callbacks of) and continues after it.  The
 * block's execution is then cut there (the instructions before `a` retired, the rest did
 * not: it runs again as the new block).  Returns 1 if so. */
static int abandoned_at(unsigned vi, uint32_t id, uint64_t a)
{
    const struct blk *b = blocks[id];
    if (a <= b->vaddr || a > b->ins[b->n - 1].addr) return 0;
    if (b->lite_cond && (a == b->btarget || a == b->bnext)) return 0; /* its branch went there */
    const struct cinsn *last = &b->ins[b->n - 1];
    switch (b->end) {
    case BRK_COND:
        if (a == b->btarget || a == b->bnext) return 0;
        break;
    case BRK_JMP:
    case BRK_CALL:
        if (a == last->target) return 0;
        break;
    case BRK_JMP_IND:
    case BRK_CALL_IND:
        return 0; /* may go anywhere, also into its own block: taken as its outcome */
    case END_REP:
        if (a == last->addr) return 0; /* the REP itself again (left for an interrupt) */
        break;
    default:
        break;
    }
    int j = find_insn(b, a);
    if (j < 1) return 0;
    cut_exec(vi, id, (unsigned)j, 1); /* (callers: its outcome was pending, SB_X != X_DONE) */
    return 1;
}

/* An exception (`interrupt` = 0) or a hardware interrupt (1) at linear address `from`;
 * `retires`: the instruction there completes (INT n, our emulated RDPMC).  A hardware
 * interrupt is taken between blocks: the block that ran last completed, and its pending end
 * goes to `from`.  An exception is raised inside the current block (whose entry operations
 * ran): its execution stops there. */
static void counting_discon(unsigned vi, uint64_t from, int retires, int interrupt)
{
    if (!cnt_instrument || !cv || !cv[vi].init) return;
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    uint32_t id = (uint32_t)sb[SB_CUR];
    const struct blk *b = id ? blocks[id] : NULL;
    if (!interrupt) {
        c->exc_from = from;
        c->exc_seen = 1;
    } else if (c->exc_seen) {
        /* QEMU 11.1 calls the exception callback when an exception is raised and then the
         * interrupt callback when it delivers it, with the same address: that exception was
         * accounted when it was raised (its block cut, or complete when its last instruction
         * traps: INT n, a served RDPMC); this is no interrupt between blocks.  (Taken as one,
         * a trapping last instruction was cut as if QEMU had left its block there.) */
        c->exc_seen = 0;
        if (from == c->exc_from) return;
    }
    /* an exception at an instruction of the current block: it is inside it (the block's
     * entry operations ran); a hardware interrupt is taken between blocks.  A block whose
     * outcome is still to come has not finished, so the exception is inside it even when it
     * runs at another virtual address than the one it was translated at (QEMU shares x86
     * blocks across mappings of the same code, CF_PCREL): find_insn_in */
    int j = b && !interrupt ? find_insn(b, from) : -1;
    if (j < 0 && b && !interrupt && dyn_end(b) && cur_pending(c, id)) j = find_insn_in(b, from);
    if (j >= 0) {
        if (!retires && b->ins[j].br == BRK_FAR) {
            retires = 1; /* INT n, INT3, INTO, SYSCALL: trap-like, they complete */
        }
        counting_cut(vi, id, (unsigned)j + (retires ? 1 : 0));
        return;
    }
    /* not inside the current block: the block that ended before completed; its outcome,
     * if still pending (even a silent one: the next block has not started), goes to
     * `from` -- unless QEMU left it in the middle (abandoned_at) */
    if (b && sb[SB_X] != X_DONE && interrupt && abandoned_at(vi, id, from)) return;
    if (b && dyn_end(b) && sb[SB_X] != X_DONE) {
        sb[SB_X] = X_DONE;
        resolve(vi, c, id, from, 1);
    }
}

/* The bridge leaves the current block at instruction address `addr` (qemu_plugin_set_pc):
 * that instruction retired (`retired`) or not, the rest of the block does not run. */
static void counting_abandon(int vi, uint64_t addr, int retired)
{
    if (vi < 0 || !cnt_instrument || !cv || !cv[vi].init) return;
    uint64_t *sb = sbv((unsigned)vi);
    uint32_t id = (uint32_t)sb[SB_CUR];
    if (!id) return;
    int j = find_insn(blocks[id], addr);
    if (j < 0) return;
    counting_cut((unsigned)vi, id, (unsigned)j + (retired ? 1 : 0));
}

/* ---------------------------------------------------------------------------------------- */
/* Folds                                                                                    */
/* ---------------------------------------------------------------------------------------- */

struct p4c_out {
    uint32_t *ext;
    int64_t *cnt;
    uint32_t n;
    uint32_t *pa, *pb;
    int64_t *pn;
    uint32_t np;
    uint32_t first, last;
    int64_t clocks;
    int bad;
    int other_active, other_os;
    int64_t shared;   /* threads=2: the batch's first `shared` clocks coincide with clocks of
                       * the sibling already on the core's timeline (lp_timeline) */
    /* written by Python */
    int64_t budget;   /* clocks until the next deadline (<= 0: none) */
    int pmi[2];       /* deliver a PMI to LP 0 / LP 1 of this core now */
    int start;        /* count=auto: start instrumenting */
    uint32_t *seq;    /* a batch of one block execution: its clocks in order (else NULL) */
    uint32_t nseq;
    /* written by Python: the counters that could overflow (or arm a PMI) and their exact
     * per-clock increments per ext kind, so that deadlines can be checked in C
     * (fast_check): nwatch counters, whead[w] = events that may still be counted before the
     * next OVF 0 -> 1 or arming, wrate[w] = most events per clock, winc[ext * 18 + w] for
     * ext < nkext; nwatch < 0: no C check possible (always ask Python) */
    int nwatch;
    uint32_t nkext;
    int64_t whead[18];
    int32_t wrate[18];
    int32_t *winc;     /* [ext * 18 + counter] for all 18 counters */
    int32_t widx[18];  /* watched w -> counter */
    /* written by C at a fold: the batch's increment of every counter, from winc (exact when
     * Python marked the table exact, i.e. no EDGE counter); tot_ok = 0: not available */
    int tot_ok;
    int64_t tot[18];
    /* written by Python or the mirror: the columns of tot[] wanted (bit n: counter n; the
     * others are left 0), and 1 when no counter needs the adjacent pairs (pa/pb/pn then
     * stay empty, threads=1 only) */
    uint32_t tmask;
    int nopairs;
    int lite;          /* written by Python: the enabled counters need no branch outcome
                        * (the outcome-free level may be installed: lite_update) */
};

static struct p4c_out *outs;

static void out_push(struct cvcpu *c, uint32_t e, int64_t n)
{
    if (c->o_n == c->o_cap) {
        c->o_cap *= 2;
        c->o_ext = realloc(c->o_ext, sizeof(uint32_t) * c->o_cap);
        c->o_cnt = realloc(c->o_cnt, sizeof(int64_t) * c->o_cap);
    }
    c->o_ext[c->o_n] = e;
    c->o_cnt[c->o_n++] = n;
}

static void out_pair(struct cvcpu *c, uint32_t a, uint32_t b, int64_t n)
{
    if (c->o_np == c->o_pcap) {
        c->o_pcap *= 2;
        c->o_pa = realloc(c->o_pa, sizeof(uint32_t) * c->o_pcap);
        c->o_pb = realloc(c->o_pb, sizeof(uint32_t) * c->o_pcap);
        c->o_pn = realloc(c->o_pn, sizeof(int64_t) * c->o_pcap);
    }
    c->o_pa[c->o_np] = a;
    c->o_pb[c->o_np] = b;
    c->o_pn[c->o_np++] = n;
}

/* threads=2: one clock timeline per core (docs/guest-events.md I8).  Each LP has a local
 * clock that its own clocks advance; the core's clock is the larger of the two.  A clock of
 * an LP at or before the core's clock coincides with a clock the sibling already put on the
 * timeline (both LPs ran in it: one core clock, SDM 18.16 -- the LPs share the core's clock);
 * only the clocks beyond it are new core clocks.  A halted LP's local clock stands still;
 * when it runs again it joins the core's clock (lp_resync).  Returns the batch's shared
 * clocks (its first ones, in time). */
static void lp_resync(unsigned vi)
{
    struct cvcpu *c = &cv[vi];
    if (cnt_threads != 2 || !core_clk) return;
    uint64_t core = __atomic_load_n(&core_clk[vi >> 1], __ATOMIC_SEQ_CST);
    if (!c->lclk_on || c->lclk < core) c->lclk = core;
    c->lclk_on = 1;
}

static int64_t lp_timeline(unsigned vi, int64_t clocks)
{
    struct cvcpu *c = &cv[vi];
    if (cnt_threads != 2 || !core_clk || clocks <= 0) return 0;
    if (!c->lclk_on) lp_resync(vi); /* the LP's first clocks start at the core's clock */
    uint64_t *cc = &core_clk[vi >> 1];
    c->lclk += (uint64_t)clocks;
    uint64_t cur = __atomic_load_n(cc, __ATOMIC_SEQ_CST);
    while (cur < c->lclk &&
           !__atomic_compare_exchange_n(cc, &cur, c->lclk, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
    int64_t fresh = cur < c->lclk ? (int64_t)(c->lclk - cur) : 0;
    return fresh >= clocks ? 0 : clocks - fresh;
}

/*
 * Close the current batch of vCPU vi into its p4c_out (for Python).  `last` = ext kind + 1 of
 * the batch's last clock, `last_is_end` = that clock ends an execution (it is then not paired
 * with a following bubble inside this batch).
 */
static void fold_close(unsigned vi, uint32_t last, int last_is_end)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    c->folds++;
    /* the batch's adjacent clock pairs only when a counter needs them (an EDGE detector:
     * Python says so for the programming of this batch, threads=1); else only the few
     * collected during execution, dropped below, and no pair check */
    const int pairs = !(outs[vi].nopairs && cnt_threads == 1);
    c->pairless_folds += !pairs;
    silent_before_fold(vi);
    /* the block counters */
    for (uint32_t i = 0; i < c->ndirty; i++) {
        uint32_t id = c->dirty[i];
        uint64_t n = en_total(c, id);
        if (!n) continue;
        sb[SB_HDR + id] = 0;
        const struct blk *b = blocks[id];
        if (b->gate) *bank_w(c, b) = 0;
        for (uint32_t k = 0; k < b->nk; k++) acc_add(c, ext(b->hk[k], b->os), (int64_t)(n * b->hc[k]));
        for (uint32_t k = 0; k < b->np && pairs; k++)
            ph_add(&c->pairs, ext(b->pa[k], b->os), ext(b->pb[k], b->os), (int64_t)(n * b->pc[k]));
        c->firsts[b->os ? 1 : 0] += (int64_t)n;
        if (!dyn_end(b)) acc_last_add(c, ext(b->last_k, b->os), (int64_t)n);
    }
    /* outcomes counted by the fast resolution path */
    for (uint32_t i = 0; i < c->ndirty; i++) {
        const struct blk *b = blocks[c->dirty[i]];
        if (!b->res) continue;
        struct bres *r = &b->res[vi];
        for (unsigned v = 0; v < 4; v++) {
            int64_t n = (int64_t)r->n[v];
            if (!n) continue;
            r->n[v] = 0;
            expand_outcomes(c, b, v, n);
        }
    }
    c->ndirty = 0;
    if (c->open_b) c->open_stamp = en_total(c, c->open_b);
    /* batch boundaries */
    struct p4c_out *o = &outs[vi];
    c->o_n = c->o_np = 0;
    c->o_bad = 0;
    int64_t clocks = 0;
    int tot_ok = o->winc != NULL && o->tot_ok >= 0;
    int64_t tot[18];
    memset(tot, 0, sizeof(tot));
    /* only the columns asked for (the running counters): tmask */
    int tcol[18], ntcol = 0;
    for (int k = 0; k < 18; k++) {
        if (o->tmask & (1u << k)) tcol[ntcol++] = k;
    }
    for (uint32_t i = 0; i < c->ntouched; i++) {
        uint32_t e = c->touched[i];
        if (c->acc[e] < 0) { c->o_bad++; c->acc[e] = 0; }
        if (c->acc[e]) {
            out_push(c, e, c->acc[e]);
            clocks += c->acc[e];
            if (tot_ok) {
                if (e >= o->nkext) {
                    tot_ok = 0;
                } else {
                    const int32_t *row = o->winc + (size_t)e * 18;
                    for (int j = 0; j < ntcol; j++) tot[tcol[j]] += c->acc[e] * row[tcol[j]];
                }
            }
        }
    }
    if (!c->next_first) {
        /* first batch (or after an access outside any known block): it starts with the
         * first block execution in it */
        if (c->firsts[1] > 0) c->next_first = ext(k_bubble, 1) + 1;
        else if (c->firsts[0] > 0) c->next_first = ext(k_bubble, 0) + 1;
        c->next_first_bubble = 1;
    }
    if (c->next_first && c->next_first_bubble) {
        c->firsts[(c->next_first - 1) & 1]--;
    }
    /* (not after an empty batch -- two folds with nothing in between: its last clock was the
     * previous batch's; through acc_last_add, so that the entry is reset below) */
    if (last && last_is_end && clocks) acc_last_add(c, last - 1, -1);
    /* boundary pairs: execution ends -> bubbles, same CPL first */
    int64_t cols[2] = {c->firsts[0], c->firsts[1]};
    uint32_t bub[2] = {ext(k_bubble, 0), ext(k_bubble, 1)};
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < c->ntouched; i++) {
            uint32_t e = c->touched[i];
            int64_t r = c->acc_last[e];
            if (r <= 0) continue;
            int os = (int)(e & 1);
            int col = pass == 0 ? os : !os;
            int64_t t = r < cols[col] ? r : cols[col];
            if (t > 0) {
                if (pairs) ph_add(&c->pairs, e, bub[col], t);
                cols[col] -= t;
                c->acc_last[e] -= t;
            }
        }
    }
    for (uint32_t i = 0; i < c->ntouched; i++) {
        if (c->acc_last[c->touched[i]] > 0) c->o_bad++;
    }
    if (cols[0] > 0 || cols[1] > 0) c->o_bad++;
    int64_t npairs = 0;
    for (uint32_t i = 0; i < c->pairs.n && pairs; i++) {
        uint32_t s = c->pairs.used[i];
        int64_t v = c->pairs.val[s];
        if (v < 0) { c->o_bad++; continue; }
        if (!v) continue;
        uint64_t k = c->pairs.key[s] - 1;
        out_pair(c, (uint32_t)(k >> 32), (uint32_t)k, v);
        npairs += v;
    }
    if (clocks && npairs != clocks - 1 && pairs) c->o_bad++;
    if (c->o_bad && !c->bad_folds++) {
        /* never expected: say so at once (and at exit, counting_report), not only in the
         * access log's "# feeder: ... repaired" */
        fprintf(stderr, "p4pmu: warning: counting bookkeeping error on vCPU %u at fold %llu "
                "(a plugin bug; the batch is repaired: totals kept, adjacent clock pairs and "
                "so EDGE counts may be off)\n", vi, (unsigned long long)c->folds);
    }
    if (c->o_bad && debug) {
        fprintf(stderr, "p4pmu-debug: fold vCPU %u: bad=%d clocks=%lld pairs=%lld cols=%lld/%lld "
                "first=%u(b%d) last=%u end=%d\n", vi, c->o_bad, (long long)clocks,
                (long long)npairs, (long long)cols[0], (long long)cols[1], c->next_first,
                c->next_first_bubble, last, last_is_end);
        for (uint32_t i = 0; i < c->ntouched; i++) {
            uint32_t e = c->touched[i];
            if (c->acc[e] || c->acc_last[e])
                fprintf(stderr, "p4pmu-debug:   ext %u acc %lld last-left %lld\n", e,
                        (long long)c->acc[e], (long long)c->acc_last[e]);
        }
    }
    /* reset the accumulators */
    for (uint32_t i = 0; i < c->ntouched; i++) {
        uint32_t e = c->touched[i];
        c->acc[e] = c->acc_last[e] = 0;
        c->tmark[e] = 0;
    }
    c->ntouched = 0;
    c->firsts[0] = c->firsts[1] = 0;
    ph_clear(&c->pairs);
    o->ext = c->o_ext;
    o->cnt = c->o_cnt;
    o->n = c->o_n;
    o->pa = c->o_pa;
    o->pb = c->o_pb;
    o->pn = c->o_pn;
    o->np = c->o_np;
    o->first = c->next_first ? c->next_first - 1 : (c->o_n ? c->o_ext[0] : 0);
    o->last = last ? last - 1 : o->first;
    o->clocks = clocks;
    o->bad = c->o_bad;
    o->tot_ok = tot_ok ? 1 : 0;
    memcpy(o->tot, tot, sizeof(tot));
    int sib = cnt_threads == 2 ? (int)(vi ^ 1) : -1;
    o->other_active = c->oth_active;
    o->other_os = c->oth_os;
    o->shared = lp_timeline(vi, clocks);
    c->oth_active = sib >= 0 && sib < n_vcpus_max && cv[sib].init && !lp_halted(&cv[sib]);
    c->oth_os = sib >= 0 && sib < n_vcpus_max ? cv[sib].cpl_os : 0;
    /* budget, pmi[] and start keep what Python wrote last (it rewrites them whenever they
     * may change) */
    o->seq = NULL;
    o->nseq = 0;
}

/* Fold at the entry of block `id` (before it runs): the batch ends with the previous
 * execution. */
static void fold_at_entry(unsigned vi, uint32_t id)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    uint32_t prev = (uint32_t)sb[SB_CUR];
    uint32_t last = 0;
    res_fill(c);
    /* a batch of exactly one block execution (the previous fold was at its entry): give
     * its clocks in order, so that an overflow inside it can be placed exactly */
    uint32_t nseq = 0;
    if (prev && c->batch_entry_b == prev && c->ndirty == 1 && c->dirty[0] == prev &&
        en_total(c, prev) == 1 && (!dyn_end(blocks[prev]) || (c->res_b == prev && c->res_n > 0))) {
        const struct blk *b = blocks[prev];
        uint32_t *s;
        unsigned n = portion_seq(b, 0, b->n, &s);
        unsigned need = n + (dyn_end(b) ? (unsigned)c->res_n : 0);
        if (need > c->seq_cap) {
            c->seq_cap = need * 2;
            c->seq = realloc(c->seq, sizeof(uint32_t) * c->seq_cap);
        }
        for (unsigned i = 0; i < n; i++) c->seq[nseq++] = ext(s[i], b->os);
        if (dyn_end(b)) {
            for (int i = 0; i < c->res_n; i++) c->seq[nseq++] = c->res_seq[i];
        }
        free(s);
    }
    if (!prev) {
        last = c->cut_last;
    } else if (dyn_end(blocks[prev])) {
        last = c->res_b == prev ? c->res_last : 0;
    } else {
        last = ext(blocks[prev]->last_k, blocks[prev]->os) + 1;
    }
    fold_close(vi, last, last != 0); /* (cut_last, too, ends an execution) */
    outs[vi].seq = nseq ? c->seq : NULL;
    outs[vi].nseq = nseq;
    c->next_first = ext(k_bubble, blocks[id]->os) + 1;
    c->next_first_bubble = 1;
    c->cut_last = 0;
    c->batch_entry_b = id;
}

/* Fold at a PMU access at instruction address `addr` of the current block (before it):
 * returns the clocks of the rest of the block (already in W). */
static int64_t fold_at_access(unsigned vi, uint64_t addr)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    uint32_t id = (uint32_t)sb[SB_CUR];
    const struct blk *b = id ? blocks[id] : NULL;
    int i = b ? find_insn(b, addr) : -1;
    if (i < 0) {
        /* (nothing ran since a cut: its last clock ends the batch and an execution) */
        fold_close(vi, c->cut_last, !id && c->cut_last);
        c->next_first = 0;
        c->batch_entry_b = 0;
        return 0;
    }
    unsigned a = open_start(c, id, sb);
    if ((unsigned)i < pos_insn(a)) i = (int)pos_insn(a);
    acc_portion(c, b, a, b->n, !dyn_end(b), -1);
    acc_portion(c, b, a, (unsigned)i, 0, +1);
    uint32_t *s;
    unsigned n = portion_seq(b, a, (unsigned)i, &s);
    uint32_t last = n ? ext(s[n - 1], b->os) + 1 : 0;
    free(s);
    fold_close(vi, last, 0);
    /* the rest of this execution is credited to the next batch */
    acc_portion(c, b, (unsigned)i + 1, b->n, !dyn_end(b), +1);
    n = portion_seq(b, (unsigned)i + 1, b->n, &s);
    c->next_first = n ? ext(s[0], b->os) + 1 : 0;
    c->next_first_bubble = 0;
    free(s);
    c->open_b = id;
    c->open_a = (unsigned)i + 1;
    c->open_stamp = en_total(c, id);
    c->cut_last = 0;
    c->batch_entry_b = 0;
    /* W holds the final clock of a dynamic end from the block's entry on (not REP's) */
    return n + (dyn_end(b) && b->end != END_REP ? 1 : 0);
}

/* ---------------------------------------------------------------------------------------- */
/* PMI delivery through the local APIC (pmi.c)                                              */
/* ---------------------------------------------------------------------------------------- */

#include "pmi.c"

/* ---------------------------------------------------------------------------------------- */
/* After Python ran (access or deadline): arm the deadline, start counting, deliver PMIs     */
/* ---------------------------------------------------------------------------------------- */

static void counting_start(void); /* below */

#define PMI_RECHECK 64 /* clocks between looks at the LVT while a request is asserted */

/* threads=2: this vCPU's step raised the request of the sibling's LP.  A running sibling
 * delivers it itself at its next block entry (it reads its own LVT).  A halted sibling
 * cannot run anything: if its LVT entry (snapshot taken at its HLT, exact while it is
 * halted) is unmasked, the MSI is sent from here, which wakes it, and the sibling sets its
 * mask bit at its first block entry (the handler's), before the handler runs. */
static void sibling_pmi(unsigned vi, unsigned sib)
{
    struct cvcpu *s = &cv[sib];
    if (lp_halted(s) && s->hlt_valid && !same_thread(sib)) {
        uint32_t lvt = s->hlt_lvt;
        if (!(lvt & LVT_MASKED)) {
            unsigned mode = (lvt >> 8) & 7, vec = lvt & 0xFF;
            s->hlt_lvt = lvt | LVT_MASKED;
            __atomic_store_n(&s->mask_pending, 1, __ATOMIC_SEQ_CST);
            __atomic_store_n(&sbv(sib)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
            apic_wr(V(vi), APIC_BASE | ((uint64_t)(s->hlt_apic >> 24) << 12), vec | (mode << 8));
            n_pmi_delivered++;
            DBG("PMI for halted vCPU %u sent from vCPU %u: LVT %#x\n", sib, vi, lvt);
            return;
        }
    }
    __atomic_store_n(&s->pmi_pending, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sbv(sib)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
}

/* the clocks before watched counter w may have received `events` more: at its largest
 * per-clock increment (the clock budget of W) */
static inline int64_t watch_clocks(const struct p4c_out *o, int w, int64_t events)
{
    int64_t rate = o->wrate[w] > 0 ? o->wrate[w] : 1;
    return (events + rate - 1) / rate;
}

static void w2_request(const struct p4c_out *o, int slot); /* below */
static void lite_update(void);                             /* below */

/* does the increment table of outs[vi] give counter `ctr` the signature's increments? */
static int w2_matches(const struct p4c_out *o, int ctr)
{
    const struct w2sig *g = &w2.sig;
    if (ctr != g->ctr || !o->winc) return 0;
    uint32_t nk = o->nkext < g->nk ? o->nkext : g->nk;
    for (uint32_t e = 0; e < nk; e++) {
        if (o->winc[(size_t)e * 18 + ctr] != g->col[e]) return 0;
    }
    /* kinds the signature does not know are weighted at its rate: no new kind may exceed it */
    for (uint32_t e = nk; e < o->nkext; e++) {
        if (o->winc[(size_t)e * 18 + ctr] > g->rate) return 0;
    }
    return 1;
}

/* After a step (Python or the mirror wrote outs[vi]; the batch was just folded): is this
 * vCPU's deadline counter the signature's?  Then W2 watches it, with its headroom.  Else
 * count how long the same counter has driven the deadline, and install it as the signature
 * when it has for long enough. */
static void w2_update(unsigned vi)
{
    struct cvcpu *c = &cv[vi];
    const struct p4c_out *o = &outs[vi];
    c->w2_on = 0;
    if (!w2_mode || !cnt_instrument || o->nwatch <= 0 || !o->winc || o->budget <= 0) return;
    int nw = o->nwatch;
    /* the counter that drives the clock deadline */
    int cand = -1;
    int64_t best = INT64_MAX;
    for (int w = 0; w < nw; w++) {
        int64_t clk = watch_clocks(o, w, o->whead[w]);
        if (clk < best) { best = clk; cand = w; }
    }
    if (w2.active) {
        int slot = -1;
        for (int w = 0; w < nw; w++) {
            if (o->widx[w] == w2.sig.ctr) slot = w;
        }
        if (slot >= 0) {
            if (c->w2_key_winc != o->winc || c->w2_key_nk != o->nkext ||
                c->w2_key_ctr != w2.sig.ctr) {
                c->w2_key_winc = o->winc;
                c->w2_key_nk = o->nkext;
                c->w2_key_ctr = w2.sig.ctr;
                c->w2_key_ok = w2_matches(o, w2.sig.ctr);
            }
            if (c->w2_key_ok) {
                c->w2_on = 1;
                c->w2_slot = slot;
                c->w2_left = o->whead[slot];
                c->w2_fresh = 1;
                c->w2_streak = 0;
                return;
            }
        }
    }
    if (cand < 0 || flush_pending || w2.flushes >= W2_MAX_FLUSHES) return;
    if (c->w2_cand == o->widx[cand] && c->w2_cand_winc == o->winc && c->w2_cand_nk == o->nkext) {
        c->w2_streak++;
    } else {
        c->w2_cand = o->widx[cand];
        c->w2_cand_winc = o->winc;
        c->w2_cand_nk = o->nkext;
        c->w2_streak = 1;
    }
    if (c->w2_streak >= (w2.flushes ? W2_RESTREAK : W2_STREAK)) {
        c->w2_streak = 0;
        w2_request(o, cand);
    }
}

/* W2 watches its counter exactly: W's clock deadline covers only the other watched
 * counters (what fast_check leaves in py_left), not W2's at its most events per clock */
static void w2_budget(struct cvcpu *c, const struct p4c_out *o)
{
    if (!c->w2_on || c->py_left <= 0) return;
    int64_t best = INT64_MAX;
    for (int w = 0; w < o->nwatch; w++) {
        if (w == c->w2_slot) continue;
        int64_t clk = watch_clocks(o, w, o->whead[w]);
        if (clk < best) best = clk;
    }
    c->py_left = best > 0 ? best : 1;
}

/* Arm W: fire after min(py_left, PMI_RECHECK if a request is asserted) clocks from now;
 * `rest` clocks already added to W belong after this point. */
static void arm(unsigned vi, int64_t rest)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    int64_t h = c->py_left > 0 ? c->py_left : (int64_t)(W_THRESH >> 2);
    if (c->pmi_level && pmi_on && h > PMI_RECHECK) h = PMI_RECHECK;
    if (h > (int64_t)(W_THRESH >> 2)) h = (int64_t)(W_THRESH >> 2);
    c->w_base = W_THRESH - (uint64_t)h;
    /* + the penalties reserved for silent branch outcomes not yet replayed; + W_PEND while
     * cb_first's fold request is pending (cb_sched takes it off again) */
    sb[SB_W] = c->w_base + (uint64_t)rest + c->w_resv * n_penalty +
               (c->force_fold ? W_PEND : 0);
    if (!c->w2_on) {
        sb[SB_W2] = 0; /* idle: 2^62 events away */
    } else if (c->w2_fresh) {
        /* w2_left counts from the fold or check just made; after an access inside a block
         * (rest > 0), the rest of that block runs in the next batch but its W2 increment
         * is in already: add the whole increment again (it may only fire early) */
        uint32_t cur = (uint32_t)sb[SB_CUR];
        int64_t h = c->w2_left > 0 ? c->w2_left : 0;
        if (h > (int64_t)(W_THRESH >> 2)) h = (int64_t)(W_THRESH >> 2);
        sb[SB_W2] = W_THRESH - (uint64_t)h + (rest > 0 && cur ? blocks[cur]->w2add : 0);
        c->w2_fresh = 0;
    }
    /* else: W2 keeps counting from its last arming */
}

/* Returns 1 if an interrupt was delivered to this vCPU. */
static int after_python(unsigned vi, int64_t rest_clocks)
{
    struct p4c_out *o = &outs[vi];
    struct cvcpu *c = &cv[vi];
    if (o->start) {
        o->start = 0;
        if (cnt_mode && !cnt_instrument && !cnt_start_requested) counting_start();
    }
    c->py_left = o->budget > 0 ? o->budget : -1;
    int lp = cnt_threads == 2 ? (int)(vi & 1) : 0;
    c->pmi_level = o->pmi[lp] != 0;
    w2_update(vi);
    w2_budget(c, o);
    lite_update();
    arm(vi, rest_clocks);
    int delivered = 0;
    if (pmi_on) {
        for (int t = 0; t < cnt_threads; t++) {
            if (!o->pmi[t]) continue;
            if (t == lp) {
                delivered |= pmi_deliver_here(vi) == 1;
            } else {
                unsigned sib = vi ^ 1;
                if ((int)sib < n_vcpus_max && cv[sib].init) {
                    sibling_pmi(vi, sib);
                }
            }
        }
    }
    return delivered;
}

static int py_deadline(unsigned vi)
{
    py_thread_ready();
    return p4pmu_py_deadline(vi);
}

/* ---------------------------------------------------------------------------------------- */
/* Execution callbacks                                                                      */
/* ---------------------------------------------------------------------------------------- */

/* first execution of a block since the last fold (or a gated silent-capable block): put it
 * on the dirty list */
static void member_entry(unsigned vi, struct cvcpu *c, uint32_t id, const struct blk *b);

static void cb_first(unsigned int vi, void *ud)
{
    struct cvcpu *c = &cv[vi];
    const struct blk *b = blocks[(uint32_t)(uintptr_t)ud];
    if (b->gate) {
        /* a gated member: executions banked in this batch mean it is listed already */
        int listed = *bank_w(c, b) != 0;
        member_entry(vi, c, (uint32_t)(uintptr_t)ud, b);
        if (listed) return;
    }
    if (c->ndirty == MAX_DIRTY) {
        /* cannot happen: the fold request below empties the list first */
        return;
    }
    c->dirty[c->ndirty++] = (uint32_t)(uintptr_t)ud;
    if (c->ndirty == MAX_DIRTY - 1 && !c->force_fold) {
        c->force_fold = 1;
        sbv(vi)[SB_W] += W_PEND;
    }
}

/* block entry, conditional on SB_X != this block's address: the previous block's outcome
 * was not silent (or it was a call, return, indirect branch, REP, far transfer, or followed
 * by a discontinuity): resolve it with this block as its successor */
static struct xcache *xcache_of(unsigned vi, struct blk *b)
{
    if (!vi) return &b->xc0;
    struct xcache *v = __atomic_load_n(&b->xcv, __ATOMIC_ACQUIRE);
    if (!v) {
        struct xcache *n = calloc((size_t)n_vcpus_max, sizeof(*n));
        if (!__atomic_compare_exchange_n(&b->xcv, &v, n, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE)) {
            free(n); /* another vCPU was first: v holds its array */
        } else {
            v = n;
        }
    }
    return &v[vi - 1];
}

static void cb_xcheck(unsigned int vi, void *ud)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = c->sbase;
    struct blk *b = ud; /* this block */
    uint64_t vaddr = b->vaddr;
    uint64_t x = sb[SB_X];
    sb[SB_X] = X_DONE;
    c->cpl_os = b->os; /* every CPL change passes here (far transfers, interrupts, faults) */
    if (x == X_DONE) return;
    uint32_t prev = (uint32_t)sb[SB_CUR];
    if (!prev) return;
    const struct xcache *xc = vi ? (b->xcv ? &b->xcv[vi - 1] : NULL) : &b->xc0;
    if (__builtin_expect(xc && xc->prev == prev, 1)) {
        /* the silent-capable block resolved here last time, going the same way */
        resolve_cond_fast(vi, c, prev, xc, vaddr);
        return;
    }
    const struct blk *pb = blocks[prev];
    if (pb->end == BRK_COND && (vaddr == pb->btarget || vaddr == pb->bnext)) {
        if (pb->gate && vaddr != (pb->silent_t ? pb->btarget : pb->bnext)) {
            struct xcache *w = xcache_of(vi, b);
            struct bres *r = &pb->res[vi];
            *w = (struct xcache){prev, pb->silent_t, pb->back, {0, 0}, pb->btarget, pb->bnext,
                                 r, bgst(c, pb, r)};
            resolve_cond_fast(vi, c, prev, w, vaddr);
        } else {
            resolve_cond(vi, c, prev, pb, vaddr);
        }
        return;
    }
    if (abandoned_at(vi, prev, vaddr)) return;
    if (pb->end == BRK_COND) resolve_cond(vi, c, prev, pb, vaddr);
    else if (dyn_end(pb)) resolve(vi, c, prev, vaddr, 1);
}

/* Entry of a silent-capable block whose counter is 0 (cb_first): the first execution in
 * the batch, or the block is gated (its group is not open and it is not the owner).  Replay
 * the owner's silent outcomes, then open the group (entry saturated) or take over as the
 * owner (the previous owner is gated). */
static void member_entry(unsigned vi, struct cvcpu *c, uint32_t id, const struct blk *b)
{
    entry_settle(vi, c);
    struct gst *g = bgst(c, b, &b->res[vi]);
    if (g->open) {
        gate_open(c, id); /* (a member that joined the group while it was open) */
        return;
    }
    uint32_t o = g->owner;
    if (o == id) return;
    c->gates++;
    const struct grp *gr = groups[b->gid];
    if (o) catch_up(vi, c, o, 0);
    if (g->e == (gr->silent_t ? 4u : 1u)) {
        g->open = 1;
        set_owner(g, 0);
        group_gates(c, gr, 1, 0);
    } else {
        if (o) gate_close(c, o);
        set_owner(g, id);
        gate_open(c, id);
    }
    silent_reserve(c, gr->silent_t, g);
}

/* REP string instruction about to run: remember RCX */
static void cb_rep(unsigned int vi, void *ud)
{
    const struct blk *b = blocks[(uint32_t)(uintptr_t)ud];
    const struct cinsn *r = &b->ins[b->n - 1];
    uint64_t mask = r->addr_size >= 8 ? ~0ull : r->addr_size == 4 ? 0xFFFFFFFFull : 0xFFFFull;
    cv[vi].rep_rcx = rd_rcx(V(vi)) & mask;
}

/* A memory access of the one instruction of block `ud` (outcome-free level).  A block's entry
 * operations run before its instruction, so SB_CUR is the block itself -- unless this is the
 * CF_MEMI_ONLY block QEMU runs to re-execute an MMIO access it left another block at (the
 * plugin sees its translation and its memory callbacks, not its entry operations): then the
 * block in SB_CUR stopped at this instruction, which retires here (docs/guest-events.md,
 * "Execution abandoned by QEMU"; at the full level the successor's X check finds it). */
static void cb_memi(unsigned int vi, uint32_t info, uint64_t vaddr, void *ud)
{
    (void)info;
    (void)vaddr;
    uint32_t self = (uint32_t)(uintptr_t)ud;
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = c->sbase;
    uint32_t cur = (uint32_t)sb[SB_CUR];
    if (!cur || cur == self) return;
    int j = find_insn(blocks[cur], blocks[self]->vaddr);
    if (j < 0) return;
    c->memi_cuts++;
    cut_exec(vi, cur, (unsigned)j + 1, sb[SB_X] != X_DONE);
}

/* per vCPU: the increments of the n_penalty clocks after a misprediction, summed, per CPL and
 * counter, for the per-kind table they were summed from (fast_check adds a penalty once
 * instead of clock by clock) */
struct pensum {
    const int32_t *winc;
    uint32_t nkext;
    int ok;
    int64_t v[2][18];
};
static struct pensum *pensums;

static const struct pensum *pen_sum(unsigned vi, const struct p4c_out *o)
{
    struct pensum *p = &pensums[vi];
    if (p->winc != o->winc || p->nkext != o->nkext) {
        p->winc = o->winc;
        p->nkext = o->nkext;
        p->ok = 1;
        memset(p->v, 0, sizeof(p->v));
        for (int os = 0; os < 2; os++) {
            for (unsigned q = 0; q < n_penalty; q++) {
                uint32_t pe = ext(k_penalty[q], os);
                if (pe >= o->nkext) { p->ok = 0; break; }
                for (int k = 0; k < 18; k++) p->v[os][k] += o->winc[(size_t)pe * 18 + k];
            }
        }
    }
    return p;
}

/* Deadline check without Python: the increments of the activity not yet folded, computed
 * from the per-kind tables Python left in outs[vi].  Returns the clocks that may safely pass
 * from here (> 0), or 0 when Python must look (an overflow may have happened, unknown kinds,
 * or the next block may overflow). */
static int64_t fast_check(unsigned vi, const struct blk *next)
{
    struct cvcpu *c = &cv[vi];
    struct p4c_out *o = &outs[vi];
    int nw = o->nwatch;
    if (nw <= 0 || !o->winc) return 0;
    silent_catch_up_all(vi); /* the silent branch outcomes so far */
    const int32_t *inc = o->winc;
    uint32_t nk = o->nkext;
    const struct pensum *pen = pen_sum(vi, o);
    if (!pen->ok) return 0;
    int64_t U[18];
    memset(U, 0, sizeof(U));
    for (uint32_t i = 0; i < c->ndirty; i++) {
        uint32_t id = c->dirty[i];
        const struct blk *b = blocks[id];
        int64_t n = (int64_t)en_total(c, id);
        if (n) {
            for (uint32_t k = 0; k < b->nk; k++) {
                uint32_t e = ext(b->hk[k], b->os);
                if (e >= nk) return 0;
                const int32_t *row = inc + (size_t)e * 18;
                for (int w = 0; w < nw; w++) U[w] += n * (int64_t)b->hc[k] * row[o->widx[w]];
            }
        }
        if (b->res) {
            const struct bres *r = &b->res[vi];
            for (unsigned v = 0; v < 4; v++) {
                if (!r->n[v]) continue;
                uint32_t e = ext(b->var[v], b->os);
                if (e >= nk) return 0;
                for (int w = 0; w < nw; w++)
                    U[w] += (int64_t)r->n[v] * inc[(size_t)e * 18 + o->widx[w]];
                if (v & 1) {
                    for (int w = 0; w < nw; w++)
                        U[w] += (int64_t)r->n[v] * pen->v[b->os ? 1 : 0][o->widx[w]];
                }
            }
        }
    }
    for (uint32_t i = 0; i < c->ntouched; i++) {
        uint32_t e = c->touched[i];
        if (!c->acc[e]) continue;
        if (e >= nk) return 0;
        for (int w = 0; w < nw; w++) U[w] += c->acc[e] * inc[(size_t)e * 18 + o->widx[w]];
    }
    /* the most the next block can add (REP: unbounded -> Python) */
    int64_t N[18];
    memset(N, 0, sizeof(N));
    if (next->end == END_REP) return 0;
    for (uint32_t k = 0; k < next->nk; k++) {
        uint32_t e = ext(next->hk[k], next->os);
        if (e >= nk) return 0;
        for (int w = 0; w < nw; w++)
            N[w] += (int64_t)next->hc[k] * inc[(size_t)e * 18 + o->widx[w]];
    }
    if (next->res) {
        for (int w = 0; w < nw; w++) {
            int64_t m = 0;
            for (unsigned v = 0; v < 4; v++) {
                uint32_t e = ext(next->var[v], next->os);
                if (e >= nk) return 0;
                int64_t x = inc[(size_t)e * 18 + o->widx[w]];
                if (v & 1) x += pen->v[next->os ? 1 : 0][o->widx[w]];
                if (x > m) m = x;
            }
            N[w] += m;
        }
    }
    int64_t best = INT64_MAX;
    for (int w = 0; w < nw; w++) {
        int64_t r = o->whead[w] - U[w];
        if (r <= N[w]) return 0; /* the next block may take it over the edge: Python */
        if (c->w2_on && w == c->w2_slot) {
            /* W2 watches it exactly: events left before `next` runs */
            c->w2_left = r;
            c->w2_fresh = 1;
            continue;
        }
        int64_t clk = watch_clocks(o, w, r);
        if (clk < best) best = clk;
    }
    c->fast_deadlines++;
    return best > 0 ? best : 1;
}

static int mirror_deadline(unsigned vi); /* mirror.c: the deadline served in C, or 0 */
static void deadline_step(unsigned vi, uint32_t id);

/* block entry, conditional on W >= 2^62: a pending block end to resolve, a deadline, or a
 * fold request */
static void cb_sched(unsigned int vi, void *ud)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = c->sbase;
    uint32_t id = (uint32_t)(uintptr_t)ud;
    const struct blk *b = blocks[id];
    c->cpl_os = b->os;
    int need = 0;
    if (c->force_fold) {
        c->force_fold = 0;
        sb[SB_W] -= W_PEND;
        need = 1;
    }
    uint64_t mx = maxclk(b);
    if (sb[SB_W] + mx < W_THRESH && !need) return;
    entry_settle(vi, c); /* the previous block's outcome, before a fold or a set_pc */
    /* clocks since the last arm; this block might take the deadline */
    int64_t elapsed = (int64_t)(sb[SB_W] - c->w_base);
    c->w_base = sb[SB_W];
    if (c->py_left > 0) {
        c->py_left -= elapsed;
        if (c->py_left <= (int64_t)mx && !need) {
            int64_t ok = fast_check(vi, b);
            if (ok > 0) {
                c->py_left = ok;
            } else {
                need = 1;
            }
        }
    }
    if (!need) {
        /* only a look at the LVT: the request is still asserted */
        int got = c->pmi_level && pmi_on ? pmi_deliver_here(vi) : 0;
        arm(vi, 0);
        if (got == 1) {
            c->batch_entry_b = 0;
            qemu_plugin_set_pc(rd(V(vi), R.rip));
        }
        return;
    }
    deadline_step(vi, id);
}

/* block entry, conditional on W2 >= 2^62 - w2add: the exact-deadline counter may reach its
 * limit in this block (W2's increments are upper bounds): decide exactly */
static void cb_w2(unsigned int vi, void *ud)
{
    struct cvcpu *c = &cv[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    const struct blk *b = blocks[id];
    if (!c->w2_on) {
        c->sbase[SB_W2] = 0;
        return;
    }
    c->cpl_os = b->os;
    c->w2_checks++;
    entry_settle(vi, c);
    int64_t ok = fast_check(vi, b);
    if (ok > 0) {
        /* not yet: fast_check re-computed the events left (and the clock budget of the
         * other watched counters) */
        c->py_left = ok;
        arm(vi, 0);
        return;
    }
    deadline_step(vi, id);
}

/* a deadline at the entry of block `id`, before it runs: fold, the mirror or Python steps
 * the PMU, and an interrupt it raises is taken before the block */
static void deadline_step(unsigned vi, uint32_t id)
{
    struct cvcpu *c = &cv[vi];
    c->deadlines++;
    fold_at_entry(vi, id);
    if (!mirror_deadline(vi) && py_deadline(vi) != P4_PY_OK) {
        outs[vi].budget = 0;
    }
    if (after_python(vi, 0)) {
        /* take the interrupt before this block runs (its counting ops have not run yet);
         * the next batch starts with the handler's first block, not this one */
        c->next_first = 0;
        c->batch_entry_b = 0;
        qemu_plugin_set_pc(rd(V(vi), R.rip));
    }
}

/* Fold the activity of vCPU vi while it is between two blocks (round-robin TCG: called on
 * its sibling's turn).  Its pending block end, if any, stays pending. */
static void fold_between_blocks(unsigned vi)
{
    struct cvcpu *c = &cv[vi];
    uint64_t *sb = sbv(vi);
    uint32_t prev = (uint32_t)sb[SB_CUR];
    uint32_t last = 0;
    if (!prev) {
        last = c->cut_last;
    } else if (!dyn_end(blocks[prev])) {
        last = ext(blocks[prev]->last_k, blocks[prev]->os) + 1;
    }
    fold_close(vi, last, last != 0); /* (cut_last, too, ends an execution) */
    c->next_first = 0;
    c->batch_entry_b = 0;
    c->cut_last = 0;
}

/* after_python for a vCPU that is not the current one (round robin): arm its deadline; its
 * PMIs are delivered by itself at its next block entry */
static void after_python_other(unsigned vi)
{
    struct p4c_out *o = &outs[vi];
    struct cvcpu *c = &cv[vi];
    c->py_left = o->budget > 0 ? o->budget : -1;
    int lp = (int)(vi & 1);
    c->pmi_level = o->pmi[lp] != 0;
    w2_update(vi);
    arm(vi, 0);
    for (int t = 0; t < 2; t++) {
        if (o->pmi[t] && pmi_on) {
            unsigned target = (vi & ~1u) | (unsigned)t;
            if ((int)target < n_vcpus_max && cv[target].init) {
                __atomic_store_n(&cv[target].pmi_pending, 1, __ATOMIC_SEQ_CST);
                __atomic_store_n(&sbv(target)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
            }
        }
    }
}

/* vCPU vi's halted state changed: the sibling's clocks change label (ACTIVE_THREAD) */
static void sibling_relabel(unsigned vi)
{
    if (cnt_threads != 2 || !cnt_instrument) return;
    unsigned sib = vi ^ 1;
    if ((int)sib >= n_vcpus_max || !cv[sib].init || lp_halted(&cv[sib])) return;
    if (same_thread(sib)) {
        fold_between_blocks(sib);
        if (py_deadline(sib) != P4_PY_OK) outs[sib].budget = 0;
        after_python_other(sib);
        return;
    }
    __atomic_store_n(&cv[sib].fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sbv(sib)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
}

/* threads=2: the sibling asked for something (fold, PMI) -- block entry, before the block */
static void cb_xpend(unsigned int vi, void *ud)
{
    struct vcpu *v = V(vi);
    struct cvcpu *c = &cv[vi];
    uint32_t id = (uint32_t)(uintptr_t)ud;
    uint64_t *sb = sbv(vi);
    __atomic_store_n(&sb[SB_XPEND], 0, __ATOMIC_SEQ_CST);
    entry_settle(vi, c); /* the previous block's outcome, before a fold or a set_pc */
    int delivered = 0, folded = 0;
    if (c->hlt_halted) {
        c->hlt_halted = 0; /* running again after the HLT */
        c->hlt_valid = 0;
        lp_resync(vi);
        sibling_relabel(vi);
    }
    if (__atomic_exchange_n(&c->mask_pending, 0, __ATOMIC_SEQ_CST)) {
        /* the sibling sent our PMI while we were halted: NetBurst's mask-on-delivery */
        uint32_t lvt;
        if (apic_rd(v, APIC_LVT_PERF, &lvt)) apic_wr(v, APIC_BASE + APIC_LVT_PERF, lvt | LVT_MASKED);
        c->pmi_level = 1;
        __atomic_store_n(&c->pmi_pending, 0, __ATOMIC_SEQ_CST);
    }
    if (__atomic_exchange_n(&c->fold_req, 0, __ATOMIC_SEQ_CST)) {
        fold_at_entry(vi, id);
        folded = 1;
        DBG("xpend vCPU %u: fold %lld clocks (other active %d)\n", vi,
            (long long)outs[vi].clocks, outs[vi].other_active);
        if (py_deadline(vi) != P4_PY_OK) outs[vi].budget = 0;
        delivered = after_python(vi, 0);
        __atomic_add_fetch(&c->fold_seq, 1, __ATOMIC_SEQ_CST);
    }
    /* a request the sibling's step saw; delivered only if still asserted: Python writes the
     * levels of both LPs into both vCPUs' outs at every step, so outs[vi].pmi is the latest
     * (this LP's own handler may have cleared OVF since -- an NMI then would find no
     * overflow: Linux's "NMI received for unknown reason") */
    if (__atomic_exchange_n(&c->pmi_pending, 0, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&outs[vi].pmi[vi & 1], __ATOMIC_SEQ_CST)) {
        c->pmi_level = 1;
        if (!delivered) delivered = pmi_deliver_here(vi) == 1;
        arm(vi, 0);
    }
    if (delivered) {
        /* this block does not run: a batch that was to start with it (the fold above)
         * starts with the handler's first block instead */
        c->batch_entry_b = 0;
        if (folded) c->next_first = 0;
        qemu_plugin_set_pc(rd(v, R.rip));
    }
}

/* threads=2, before a PMU access of vCPU vi at instruction `addr`: make the sibling hand its
 * activity to the shared PMU first (it folds at its next block entry), waiting at most
 * SIBLING_WAIT_NS; a halted sibling folded before it halted.  While waiting, requests of the
 * sibling for our own activity are served (both may access at the same time). */
#define SIBLING_WAIT_NS 20000000ll
static int64_t fold_at_access(unsigned vi, uint64_t addr); /* below */

static void serve_fold_request(unsigned vi, uint64_t addr)
{
    struct cvcpu *c = &cv[vi];
    if (!__atomic_exchange_n(&c->fold_req, 0, __ATOMIC_SEQ_CST)) return;
    int64_t rest = fold_at_access(vi, addr);
    if (py_deadline(vi) != P4_PY_OK) outs[vi].budget = 0;
    after_python(vi, rest);
    __atomic_add_fetch(&c->fold_seq, 1, __ATOMIC_SEQ_CST);
}

static void sibling_sync(unsigned vi, uint64_t addr)
{
    if (cnt_threads != 2 || !cnt_instrument) return;
    unsigned sib = vi ^ 1;
    if ((int)sib >= n_vcpus_max || !cv[sib].init) return;
    struct cvcpu *s = &cv[sib];
    serve_fold_request(vi, addr);
    if (lp_halted(s)) {
        DBG("sync vCPU %u: sibling halted\n", vi);
        return;
    }
    if (same_thread(sib)) {
        /* round robin: the sibling is between blocks; fold it from here */
        fold_between_blocks(sib);
        if (py_deadline(sib) != P4_PY_OK) outs[sib].budget = 0;
        after_python_other(sib);
        return;
    }
    uint32_t seq0 = __atomic_load_n(&s->fold_seq, __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sbv(sib)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (__atomic_load_n(&s->fold_seq, __ATOMIC_SEQ_CST) != seq0 || lp_halted(s)) break;
        serve_fold_request(vi, addr);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000ll + (t.tv_nsec - t0.tv_nsec) > SIBLING_WAIT_NS) {
            static int warned;
            if (!warned++) {
                fprintf(stderr, "p4pmu: note: vCPU %u did not fold its activity within 20 ms "
                                "for a PMU access of its sibling (it may be blocked); reads "
                                "may miss its latest events\n", sib);
            }
            break;
        }
        sched_yield();
    }
    DBG("sync vCPU %u: sibling seq %u -> %u halted %d\n", vi, seq0, s->fold_seq, lp_halted(s));
}

/* threads=2: HLT -- hand this LP's activity to the shared PMU before halting, and snapshot
 * the LVT entry and APIC ID for the sibling (sibling_pmi) */
static void cb_hlt(unsigned int vi, void *ud)
{
    struct vcpu *v = V(vi);
    struct cvcpu *c = &cv[vi];
    const struct blk *b = blocks[(uint32_t)(uintptr_t)ud];
    (void)b;
    uint64_t addr = (uint64_t)0;
    /* the HLT is the last instruction of its block (it ends the block in QEMU) */
    addr = b->ins[b->n - 1].addr;
    for (unsigned j = 0; j < b->n; j++) {
        if (b->ins[j].flags & CI_HLT) { addr = b->ins[j].addr; break; }
    }
    int64_t rest = fold_at_access(vi, addr);
    DBG("hlt vCPU %u: fold %lld clocks\n", vi, (long long)outs[vi].clocks);
    if (py_deadline(vi) != P4_PY_OK) outs[vi].budget = 0;
    after_python(vi, rest);
    __atomic_store_n(&c->fold_req, 0, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&c->fold_seq, 1, __ATOMIC_SEQ_CST);
    uint32_t lvt, id;
    if (apic_rd(v, APIC_LVT_PERF, &lvt) && apic_rd(v, APIC_ID_REG, &id)) {
        c->hlt_lvt = lvt;
        c->hlt_apic = id;
        c->hlt_valid = 1;
    }
    c->hlt_halted = 1;
    __atomic_store_n(&sbv(vi)[SB_XPEND], 1, __ATOMIC_SEQ_CST); /* cleared at the next entry */
    sibling_relabel(vi);
}

/* ---------------------------------------------------------------------------------------- */
/* Translation                                                                              */
/* ---------------------------------------------------------------------------------------- */

static __thread int tl_mode_pref = -1;

/* the most events of the exact-deadline counter one execution of b can add (fast_check's
 * bound for the next block; kinds the signature does not know at its rate); REP iterations
 * are added when the REP resolves (rep_resolve) */
static uint32_t w2_weight(const struct blk *b)
{
    const struct w2sig *g = &w2.sig;
    int64_t n = 0;
    for (uint32_t k = 0; k < b->nk; k++) n += w2_inc(g, ext(b->hk[k], b->os), b->hc[k]);
    if (b->res) {
        int64_t m = 0;
        for (unsigned v = 0; v < 4; v++) {
            int64_t x = w2_inc(g, ext(b->var[v], b->os), 1) + ((v & 1) ? g->pen[b->os ? 1 : 0] : 0);
            if (x > m) m = x;
        }
        n += m;
    }
    if (n < 0) n = 0;
    return n > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* Classify the n instructions of a block in Capstone mode mi (16, 32 or 64 bit); returns how
 * many decoded to QEMU's instruction length (the others are classified as unknown). */
static size_t classify_all(int mi, size_t n, const uint8_t (*bytes)[16], const uint8_t *lens,
                           const uint64_t *addrs, struct cinsn *ins)
{
    csh h;
    cs_insn *x = cs_get(mi, &h);
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = bytes[i];
        size_t sz = lens[i];
        uint64_t ad = addrs[i];
        if (x && cs_disasm_iter(h, &p, &sz, &ad, x) && x->size == lens[i]) {
            classify_insn(h, x, addrs[i], &ins[i]);
            ok++;
        } else {
            classify_unknown(addrs[i], lens[i], &ins[i]);
        }
    }
    return ok;
}

/* Classify the block's instructions and register its counting operations.  Called by
 * translate() (p4pmu_plugin.c) after the bridge's entry hook, before anything else. */
static uint32_t counting_translate(struct qemu_plugin_tb *tb, struct vcpu *v, unsigned vi)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (!n) return 0;
    uint64_t cr0 = rd(v, R.cr0), efl = rd(v, R.eflags), efer = rd(v, R.efer);
    int os, cands[3], nc = 0;
    if (!(cr0 & CR0_PE)) {
        os = 1;
        cands[nc++] = 0; cands[nc++] = 1;
    } else if (efl & EFL_VM) {
        os = 0;
        cands[nc++] = 0;
    } else {
        os = (rd(v, R.cs) & 3) == 0;
        if (efer & EFER_LMA) { cands[nc++] = 2; cands[nc++] = 1; cands[nc++] = 0; }
        else { cands[nc++] = 1; cands[nc++] = 0; }
    }
    if (tl_mode_pref >= 0) {
        for (int i = 0; i < nc; i++) {
            if (cands[i] == tl_mode_pref && i) { int t = cands[0]; cands[0] = cands[i]; cands[i] = t; }
        }
    }
    struct cinsn *ins = calloc(n, sizeof(*ins));
    uint8_t (*bytes)[16] = malloc(16 * n);
    uint8_t *lens = malloc(n);
    uint64_t *addrs = malloc(8 * n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        lens[i] = (uint8_t)qemu_plugin_insn_data(insn, bytes[i], 16);
        addrs[i] = qemu_plugin_insn_vaddr(insn);
    }
    int best = -1;
    for (int ci = 0; ci < nc && best < 0; ci++) {
        if (classify_all(cands[ci], n, (const uint8_t (*)[16])bytes, lens, addrs, ins) == n) best = cands[ci];
    }
    if (best < 0) {
        /* no mode decodes every instruction to QEMU's length: use the first candidate */
        best = cands[0];
        classify_all(best, n, (const uint8_t (*)[16])bytes, lens, addrs, ins);
    }
    tl_mode_pref = best;
    free(bytes);
    free(lens);
    free(addrs);
    int lt = __atomic_load_n(&lite.active, __ATOMIC_ACQUIRE);
    uint32_t id = block_new(qemu_plugin_tb_vaddr(tb), (unsigned)n, ins, os, best, lt);
    if (!id) return 0;
    if (__atomic_load_n(&w2.active, __ATOMIC_ACQUIRE)) blocks[id]->w2add = w2_weight(blocks[id]);
    const struct blk *b = blocks[id];
    void *ud = (void *)(uintptr_t)id;
    p4_plugin_u64 eW = {sb_cnt, SB_W * 8}, eCur = {sb_cnt, SB_CUR * 8},
                  eXp = {sb_cnt, SB_XPEND * 8}, eX = {sb_cnt, SB_X * 8},
                  eN = {sb_cnt, (SB_HDR + id) * 8}, eW2 = {sb_cnt, SB_W2 * 8};
    /* in this order (TB entry operations run in registration order): */
    /* the previous block's outcome unless it is the silent one (or none is needed) */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_xcheck, P4_CB_R_REGS, P4_COND_NE, eX,
                                              lt ? X_LITE : b->vaddr, (void *)b);
    /* fires when this block might cross the deadline */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_sched, P4_CB_RW_REGS_PC, P4_COND_GE, eW,
                                              W_THRESH - maxclk(b), ud);
    if (cnt_threads == 2) {
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_xpend, P4_CB_RW_REGS_PC, P4_COND_NE,
                                                  eXp, 0, ud);
    }
    if (b->w2add) {
        /* fires when this block might take the exact-deadline counter to its limit */
        qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_w2, P4_CB_RW_REGS_PC, P4_COND_GE, eW2,
                                                  W_THRESH - b->w2add, ud);
    }
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, eW, b->wadd);
    if (b->w2add) qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, eW2,
                                                                   b->w2add);
    /* the first execution in the batch (dirty list), or a gated silent-capable block */
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, cb_first, P4_CB_NO_REGS, P4_COND_EQ, eN, 0,
                                              ud);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_ADD_U64, eN, 1);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_STORE_U64, eCur, id);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, P4_INLINE_STORE_U64, eX, b->xval);
    if (b->end == END_REP) {
        qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, n - 1), cb_rep,
                                               P4_CB_R_REGS, ud);
    }
    if (lt && n == 1) {
        /* may be the re-execution of an MMIO access QEMU left a block at (cb_memi) */
        qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, 0), cb_memi, P4_CB_NO_REGS,
                                         P4_MEM_RW, ud);
    }
    if (cnt_threads == 2) {
        for (size_t i = 0; i < n; i++) {
            if (b->ins[i].flags & CI_HLT) {
                DBG("HLT hook at %#llx (block %#llx, %zu insns)\n",
                    (unsigned long long)b->ins[i].addr, (unsigned long long)b->vaddr, n);
                qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i), cb_hlt,
                                                       P4_CB_RW_REGS, ud);
            }
        }
    }
    return id;
}

/* count=auto: counting starts with the WRMSR that first enables a counter, which ran in a
 * block translated without instrumentation: credit that WRMSR's own clocks (it retires after
 * the access, Interfaces I3) to the first batch. */
static void counting_credit_wrmsr(unsigned vi, uint64_t addr, int os)
{
    static const uint8_t code[2] = {0x0F, 0x30};
    csh h;
    cs_insn *x = cs_get(1, &h);
    const uint8_t *p = code;
    size_t sz = 2;
    uint64_t ad = addr;
    struct cinsn in;
    if (!x || !cs_disasm_iter(h, &p, &sz, &ad, x)) return;
    classify_insn(h, x, addr, &in);
    struct clk c[64];
    unsigned m = schedule(&in, 0, 1, c, 64);
    struct cvcpu *cc = &cv[vi];
    uint32_t prev = 0;
    for (unsigned i = 0; i < m; i++) {
        uint32_t k = kind_intern(c[i].f);
        acc_add(cc, ext(k, os), 1);
        if (i) ph_add(&cc->pairs, prev, ext(k, os), 1);
        else {
            cc->next_first = ext(k, os) + 1;
            cc->next_first_bubble = 0;
        }
        prev = ext(k, os);
    }
    if (m) {
        acc_last_add(cc, prev, 1);
        cc->cut_last = prev + 1; /* the batch's last clock until a block runs */
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Start / set-up                                                                           */
/* ---------------------------------------------------------------------------------------- */

static void register_callbacks(void); /* p4pmu_plugin.c */

static int lite_wanted(void)
{
    if (!lite_mode || cnt_threads != 1 || n_vcpus_max != 1 || br_trace || !outs) return 0;
    return cv[0].init && outs[0].lite;
}

/* the translation level for the blocks translated from now on (all vCPUs are stopped) */
static void lite_set(int on)
{
    if (on == lite.active) return;
    if (on) lite.installs++;
    else lite.removals++;
    lite.streak = 0;
    __atomic_store_n(&lite.active, on, __ATOMIC_RELEASE);
    DBG("counting: %s level (translation cache flushed)\n", on ? "outcome-free" : "full");
}

static void reset_done(void *ud)
{
    (void)ud;
    lite_set(lite_wanted());
    __atomic_store_n(&cnt_instrument, 1, __ATOMIC_SEQ_CST);
    register_callbacks();
    DBG("counting: instrumentation on (translation cache flushed)\n");
}

/* The flush asked for by flush_request is done (all vCPUs stopped): install what is wanted
 * now.  A new exact-deadline signature: blocks translated from now on carry W2 operations
 * for it; every vCPU takes it up at its next step (w2_update).  The level: lite_wanted(). */
static void flush_installed(void *ud)
{
    (void)ud;
    lite_set(lite_wanted());
    if (!w2.req) {
        __atomic_store_n(&flush_pending, 0, __ATOMIC_RELEASE);
        register_callbacks();
        return;
    }
    w2.req = 0;
    w2.sig = w2.next;
    w2.flushes++;
    for (int i = 0; i < n_vcpus_max; i++) {
        if (!cv[i].init) continue;
        cv[i].w2_on = 0;
        cv[i].w2_key_winc = NULL;
        sbv((unsigned)i)[SB_W2] = 0;
    }
    __atomic_store_n(&w2.active, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&flush_pending, 0, __ATOMIC_RELEASE);
    register_callbacks();
    DBG("counting: exact deadlines for counter %d (signature %u; translation cache flushed)\n",
        w2.sig.ctr, w2.flushes);
}

/* Ask for a flush (no-op while one is under way: it installs what is wanted when it runs).
 * Returns 1 if this call asked. */
static int flush_request(void)
{
    int idle = 0; /* one request at a time, whichever vCPU thread asks first */
    if (!__atomic_compare_exchange_n(&flush_pending, &idle, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        return 0;
    }
    return 1;
}

/* After a step: does the translation level still fit the programming?  To the full level at
 * once (the next block entry flushes); to the outcome-free level after LITE_STREAK steps in
 * a row that want it. */
static void lite_update(void)
{
    if (!cnt_instrument) return; /* not started: reset_done chooses */
    int want = lite_wanted();
    if (want == lite.active) {
        lite.streak = 0;
        return;
    }
    if (want && (lite.installs >= LITE_MAX_INSTALLS || ++lite.streak < LITE_STREAK)) return;
    if (flush_request()) qemu_plugin_reset(plugin_id, flush_installed, NULL);
}

/* Ask for counter widx[slot] of outs `o` as the exact-deadline signature (a flush). */
static void w2_request(const struct p4c_out *o, int slot)
{
    if (!flush_request()) return;
    int ctr = o->widx[slot];
    uint32_t nk = o->nkext;
    int32_t *col = malloc(sizeof(int32_t) * (nk ? nk : 1));
    int64_t rate = 1;
    for (uint32_t e = 0; e < nk; e++) {
        col[e] = o->winc[(size_t)e * 18 + ctr];
        if (col[e] > rate) rate = col[e];
    }
    if (o->wrate[slot] > rate) rate = o->wrate[slot];
    struct w2sig g = {ctr, nk, col, rate, {0, 0}};
    for (int os = 0; os < 2; os++) {
        for (unsigned q = 0; q < n_penalty; q++) g.pen[os] += w2_inc(&g, ext(k_penalty[q], os), 1);
    }
    w2.next = g; /* (the previous signature's column stays allocated: blocks were weighted
                  * with it until the flush) */
    w2.req = 1;
    qemu_plugin_reset(plugin_id, flush_installed, NULL);
}

/* count=auto: the guest enabled a counter for the first time.  qemu_plugin_reset flushes the
 * translation cache (asynchronously, between blocks) and unregisters our callbacks;
 * reset_done registers them again with instrumentation on. */
static void counting_start(void)
{
    cnt_start_requested = 1;
    qemu_plugin_reset(plugin_id, reset_done, NULL);
}

/* options: parsed by plugin/options.c (docs/options.md) */
static int counting_setup(qemu_plugin_id_t id, const struct p4_options *o, int max_vcpus)
{
    plugin_id = id;
    cnt_mode = o->count == P4_OPT_COUNT_OFF ? 0 : o->count == P4_OPT_COUNT_ON ? 2 : 1;
    pmi_on = o->pmi;
    if (o->bp_penalty >= 0) bp_penalty = (unsigned)o->bp_penalty;
    w2_mode = o->exact;
    lite_mode = o->lite;
    cnt_threads = o->threads;
    if (cs_setup() < 0) return -1;
    if (getenv("P4PMU_BRANCH_TRACE")) br_trace = fopen(getenv("P4PMU_BRANCH_TRACE"), "w");
    ct.trace = br_trace != NULL;
    cv = aligned_alloc(64, (size_t)max_vcpus * sizeof(*cv));
    core_clk = calloc((size_t)max_vcpus / 2 + 1, sizeof(*core_clk));
    memset(cv, 0, (size_t)max_vcpus * sizeof(*cv));
    outs = calloc((size_t)max_vcpus, sizeof(*outs));
    for (int i = 0; outs && i < max_vcpus; i++) outs[i].tmask = (1u << 18) - 1;
    pensums = calloc((size_t)max_vcpus, sizeof(*pensums));
    sb_cnt = qemu_plugin_scoreboard_new(sizeof(uint64_t) * SB_WORDS);
    cond_tables();
    uint8_t f[KF_N];
    memset(f, 0, sizeof(f));
    k_bubble = kind_intern(f); /* the bubble and an empty stall clock are the same kind */
    k_empty = k_bubble;
    unsigned b = P4P_BOGUS_INSNS;
    n_penalty = bp_penalty;
    for (unsigned p = 0; p < n_penalty; p++) {
        memset(f, 0, sizeof(f));
        unsigned x = b < P4P_RETIRE_WIDTH ? b : P4P_RETIRE_WIDTH;
        f[KF_BOGUS_INSTR] = (uint8_t)x;
        f[KF_BOGUS_UOPS] = (uint8_t)x;
        b -= x;
        k_penalty[p] = kind_intern(f);
    }
    k_pen_last = n_penalty ? k_penalty[n_penalty - 1] : k_bubble;
    ct.pen = (uint8_t)n_penalty;
    ct.pen_last = k_pen_last;
    memset(f, 0, sizeof(f));
    f[KF_UOPS] = P4P_RETIRE_WIDTH;
    k_rep_full = kind_intern(f);
    cnt_instrument = cnt_mode == 2;
    return 0;
}

static void counting_vcpu_init(unsigned vi)
{
    cvcpu_init(&cv[vi]);
    cv[vi].thread = pthread_self();
    for (int i = 0; i < n_vcpus_max; i++) {
        if (cv[i].init) cv[i].sbase = sbv((unsigned)i);
    }
    /* Single-threaded TCG with several vCPUs: QEMU 11.1 compiles the translating vCPU's
     * index into the plugin code of a block (gen_cpu_index() without CF_PARALLEL) and
     * multiplies that constant in place, so per-vCPU scoreboards and callbacks get wrong
     * vCPU indices (seen: callbacks called with vCPU index = scoreboard element size).
     * Counting cannot work there: turn it off and say so. */
    for (unsigned o = 0; o < vi && cnt_mode; o++) {
        if (cv[o].init && pthread_equal(cv[o].thread, cv[vi].thread)) {
            fprintf(stderr, "p4pmu: several vCPUs on one TCG thread (-accel tcg,thread=single): "
                            "event counting is off (QEMU 11.1 plugins need multi-threaded TCG "
                            "for per-vCPU counters); MSR/RDPMC access still works\n");
            cnt_mode = 0;
            cnt_instrument = 0;
        }
    }
}

/* threads=2: vCPU vi halted (1) or resumed (0): the sibling's clocks change label
 * (ACTIVE_THREAD), so it folds at its next block entry.  C only (QEMU holds the BQL). */
static void counting_halt_change(unsigned vi, int halted)
{
    if (!cv || vi >= (unsigned)n_vcpus_max) return;
    cv[vi].halted = halted;
    DBG("vCPU %u %s\n", vi, halted ? "idle" : "resumes");
    if (!halted) {
        cv[vi].hlt_valid = 0;
        lp_resync(vi); /* (on this vCPU's thread, before it runs again) */
    }
    if (cnt_threads != 2 || !cnt_instrument) return;
    unsigned sib = vi ^ 1;
    if ((int)sib >= n_vcpus_max || !cv[sib].init || lp_halted(&cv[sib])) return;
    /* only a request: QEMU holds the BQL here, Python must not be called */
    __atomic_store_n(&cv[sib].fold_req, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&sbv(sib)[SB_XPEND], 1, __ATOMIC_SEQ_CST);
}

/* ---------------------------------------------------------------------------------------- */
/* Functions Python calls (declared with ffi.cdef in build.py)                               */
/* ---------------------------------------------------------------------------------------- */

/* At exit: the bookkeeping errors of the run, if any (tests fail on this line). */
static void counting_report(void)
{
    if (!cv) return;
    for (int i = 0; i < n_vcpus_max; i++) {
        const struct cvcpu *c = &cv[i];
        if (!c->init || (!c->bad_folds && !c->silent_bad)) continue;
        fprintf(stderr, "p4pmu: warning: counting bookkeeping errors on vCPU %d: %llu of %llu "
                "batches repaired, %llu silent-outcome underflows (a plugin bug: counts may be "
                "off)\n", i, (unsigned long long)c->bad_folds, (unsigned long long)c->folds,
                (unsigned long long)c->silent_bad);
    }
}

struct p4c_out *p4c_out(unsigned vi)
{
    return &outs[vi];
}

const uint8_t *p4c_kinds(uint32_t *n)
{
    *n = __atomic_load_n(&n_kinds, __ATOMIC_ACQUIRE);
    return &kinds[0][0];
}

int p4c_instrumenting(void)
{
    return cnt_instrument || cnt_start_requested;
}

int p4c_mode(void)
{
    return cnt_mode;
}

void p4c_stats(unsigned vi, uint64_t *out4)
{
    out4[0] = cv[vi].folds;
    out4[1] = cv[vi].deadlines;
    out4[2] = cv[vi].resolutions;
    out4[3] = n_blocks - 1;
}
