/*
 * p4pmu: the types, sizes and small inline helpers of event counting from guest activity
 * (docs/guest-events.md): the scoreboard layout, instructions and blocks as the clock model
 * sees them, predictor entry groups, the per-vCPU counting state (struct vcpu_counting), the
 * exact-deadline and outcome-free-level state types.
 *
 * Threading: every per-vCPU structure is touched only by its own vCPU thread (callbacks run
 * there), except the XPEND scoreboard word (atomic requests from the sibling vCPU) and
 * read-only looks at another vCPU's halted/CPL flags.  Global tables (kinds, blocks) are
 * appended under a mutex at translation time and read lock-free afterwards (an entry is
 * published before its id is).
 */
#ifndef P4PMU_COUNTING_TYPES_H
#define P4PMU_COUNTING_TYPES_H

#include <stdint.h>
#include <pthread.h>

#include "bridge_types.h"
#include "p4_tables.h"

#define MAX_BLOCKS (1u << 20)
#define MAX_KINDS (1u << 16)
#define NEXT (2u * MAX_KINDS) /* ext kind = kind * 2 + os */
#define SB_HDR 8u

/* Scoreboard words per vCPU (docs/guest-events.md calls the first ones W, CUR, W2, XPEND, X):
 * SB_DEADLINE_CLOCKS, W: clocks counted towards the next deadline (fires at SB_FIRES_AT);
 * SB_CURRENT_BLOCK: the block running or run last; SB_EXACT_EVENTS, W2: the exact deadline
 * of one watched counter, in its events ("Exact deadlines" below); SB_SIBLING_REQUEST:
 * threads=2 requests from the sibling; SB_SILENT_NEXT, X: the address the last block's
 * "silent" outcome continues at (resolve.c, "Silent branch outcomes"). */
enum {
    SB_DEADLINE_CLOCKS = 0,
    SB_CURRENT_BLOCK = 1,
    SB_EXACT_EVENTS = 2,
    SB_SIBLING_REQUEST = 3,
    SB_SILENT_NEXT = 4
};

/* per-block execution counters at SB_HDR + id; the "banked" executions of silent-capable
 * conditional blocks at SB_BANK0 + gate index (see "Silent branch outcomes") */
#define MAX_GATES (1u << 18)
#define SB_BANK0 (SB_HDR + MAX_BLOCKS)
#define SB_WORDS (SB_BANK0 + MAX_GATES)

/* X values that are no block's address (not canonical): the last block's outcome has been
 * accounted (X_ACCOUNTED), or it must be resolved at the next block entry whatever that is
 * (X_RESOLVE_AT_ENTRY: calls, returns, indirect branches, REP, far transfers) */
#define X_ACCOUNTED 0x8000000000000001ull
#define X_RESOLVE_AT_ENTRY 0x8000000000000002ull
#define MAX_GROUPS MAX_BLOCKS
#define GCHUNK 4096u
#define GMAX 32 /* silent-capable blocks per conditional predictor entry */
#define SB_FIRES_AT (1ull << 62)
#define SB_FORCE_FIRE (1ull << 62)
#define MAX_DIRTY (1u << 16)
#define END_REP 8 /* block end kind: REP string instruction (not a BRK_* value) */

/* per-instruction information kept for schedules of partial blocks */
#define CI_ALIGN 1
#define CI_REP 2
#define CI_HLT 4

struct insn_info {
    uint64_t addr;
    uint64_t target;
    uint16_t uops;         /* REP: the base uops (insn_classes.Insn.rep_uops) */
    uint16_t rep_iter10;   /* REP: uops per iteration, in tenths */
    uint16_t stall;        /* empty clocks before it (timing.insn_timing) */
    uint16_t rlat;         /* result latency in clocks (< 2: no constraint) */
    uint64_t rmask, wmask; /* tracked registers read / written (timing.reg_mask) */
    uint8_t len, loads, stores, br, flags;
    uint8_t addr_size; /* REP: 2, 4 or 8 bytes of RCX */
    uint8_t dup;       /* instr_retired counts it once more (insn_classes.OVERCOUNTED) */
    uint8_t fp[FPI_N];
    /* an SSE instruction with floating-point inputs (fp_assist.c): its p4_sse_inputs row + 1
     * (0: none), the XMM registers it reads them from (-1: none), whether it reads one from
     * memory */
    uint8_t sse_in;
    int8_t sse_reg[2];
    uint8_t sse_mem;
    uint8_t x87_mem;   /* an x87 instruction whose single or double memory input takes #D */
    uint8_t x87_store; /* an x87 store of ST(0) as a single or double (an output assist) */
};

/* cb_xcheck's one-entry cache, per block (as a successor) and vCPU: the silent-capable
 * block it resolved last and what resolving it again needs, so that the usual explicit
 * outcome (the same branch going the same non-silent way again) reads no block structure */
struct xcache {
    uint32_t prev;           /* 0: empty */
    uint8_t t, back, pad[2]; /* the silent direction, the branch goes backward */
    uint64_t btarget, bnext;
    struct block_outcomes *r;
    struct group_state *g;
};

/* A REP string instruction in flight on one vCPU (resolve.c).  QEMU runs one iteration per
 * execution of the REP's block under icount and up to 65,536 without it; known_rcx
 * carries the RCX that resolved the last execution into the next one of the same
 * instruction (nothing runs between the two), so cb_rep reads no register then; carry10
 * the iterations' uop tenths between executions; the memo keeps the last resolved
 * outcome's clock kind (no memory fields). */
struct rep_state {
    uint64_t rcx;        /* RCX before the current execution */
    uint64_t known_addr; /* the REP whose next execution starts with RCX = known_rcx (0: none) */
    uint64_t known_rcx;
    uint64_t carry10;         /* tenths of a uop of the iterations so far not yet counted */
    const struct blk *memo_b; /* the block, iterations, uops and end of the memoised kind */
    uint64_t memo_iters, memo_uops;
    uint32_t memo_fk;
    uint8_t memo_done;
};

struct blk {
    /* first cache line: what cb_xcheck reads of this block (its user data) */
    uint64_t vaddr;
    uint8_t os, end, back, silent_t;
    /* silent branch outcomes (conditional ends): the gate/bank index + 1 (0: not
     * silent-capable); back: the branch goes backward (static prediction); silent_t: the
     * group's silent direction */
    uint32_t gate;
    struct xcache xc0;  /* vCPU 0 */
    struct xcache *xcv; /* vCPUs 1.. (allocated when first needed) */
    /* what an explicit resolution of this block's own outcome reads */
    uint64_t btarget, bnext;    /* the last instruction's branch target and next address */
    struct block_outcomes *res; /* per vCPU: outcomes since the last fold, predictor slot */
    uint32_t var[4];            /* dynamic final clock: [taken*2 + mispredicted] */
    uint32_t gid;               /* the predictor entry's group */
    /* the rest */
    uint32_t n;
    uint8_t mode;
    uint8_t lite_cond; /* translated at the outcome-free level, ends in a conditional
                                 * branch: accounted as a static end (not taken, predicted) */
    uint8_t gen;       /* silent-capable: its group's direction changes (flips) when
                                 * it joined; another value now: a stale block (directions.c) */
    uint8_t pad;
    struct insn_info *ins;
    /* full static portion [0, n) incl. bubble, excluding the final clock of a dynamic end */
    uint32_t nk, np;
    uint32_t *hk, *hc;        /* histogram: kind ids, counts */
    uint32_t *pa, *pb, *pc;   /* internal adjacent pairs */
    uint32_t first_k, last_k; /* bubble kind; last static clock kind */
    uint32_t nclocks;         /* static clocks (W increment) */
    uint32_t maxclk;          /* most clocks one execution can add (maxclk()) */
    uint32_t final_k;         /* the final clock before the outcome (dynamic ends) */
    uint32_t clocks_add;      /* W increment per execution (static clocks + final clock) */
    uint32_t exact_add;       /* W2 increment per execution: the most events of the exact-
                                 * deadline counter one execution can add without a
                                 * misprediction's penalty (added when the outcome is known) */
    uint32_t exact_max;       /* W2 margin of the check at entry: exact_add and this block's
                                 * own possible penalty (0: no W2 operations) */
    uint64_t xval;            /* SB_SILENT_NEXT stored at entry: where the silent outcome goes */
    /* the memory side (memory.c): the full static portion's kinds in order (seq[0] the
     * bubble, nclocks of them) and per instruction the index in seq of the clock it
     * retires in, or ICLK_FINAL for the dynamic final clock (REP: its clocks); mem_final:
     * an instruction of the final clock accesses memory (at the memory level such a block
     * is not silent-capable: every outcome is resolved, and its final clock's memory
     * outcomes with it) */
    uint32_t *seq;
    uint16_t *iclk;
    uint8_t mem_final, fetch_final;
    uint64_t br_hw; /* silent-capable: the guest-physical address of its branch
                                 * instruction (NO_HW: unknown), where directions.c rewrites a
                                 * byte to have the block translated again */
};

#define NO_HW UINT64_MAX

#define ICLK_FINAL 0xFFFFu

/* per block and vCPU: resolved outcomes of the current batch (expanded at the fold) and the
 * block's branch's predictor entry (index + 1 into the vCPU's entry arena, 0 = not looked up);
 * conditional ends: `acc` = executions of the current batch whose outcome is accounted
 * (resolved, replayed as silent, or cut), minus an execution carried over pending */
struct block_outcomes {
    uint64_t n[4];
    int64_t acc;
    struct group_state *g; /* this vCPU's state of the block's group (looked up once) */
    uint32_t pidx;
    uint32_t pad;
} __attribute__((aligned(64)));

/* A conditional predictor entry (address, or address mod cond_entries) and the blocks that
 * end in a branch using it ("members", the silent-capable ones), global; per vCPU its state
 * (struct group_state).  silent_t: the direction whose outcomes run without a callback. */
struct pred_group {
    uint64_t key;
    uint8_t silent_t;
    uint8_t flips; /* direction changes while the guest ran (directions.c) */
    uint8_t stale; /* a block that joined before a change ran after it: the group may
                      * not open until the next flush (directions.c) */
    volatile uint32_t nmem;
    uint32_t mem[GMAX];
};

/* per vCPU and group: the predictor entry (0 invalid, else the 2-bit counter + 1), whether
 * the group is open (entry saturated in the silent direction: every member runs silently),
 * else the owner (the one member that may run silently), and the reserved penalty clocks
 * (the silent mispredictions the owner may still have, in W) */
struct group_state {
    uint64_t e;
    uint32_t owner;
    uint8_t open, resv, oback; /* oback: the owner's branch goes backward */
    uint8_t ot;                /* the owner's silent direction (the group's, unless the owner
                                * was translated before the group's last change) */
    uint64_t dir[2];           /* outcomes not taken / taken since the directions were last
                                * chosen (directions.c) */
};

struct pair_hash {
    uint64_t *key;
    int64_t *val;
    uint32_t cap, n;
    uint32_t *used;
};

/* The memory side (memory.c, docs/memory-model.md).  One correction ("fix") of a block
 * execution: static clock j changed from kind `old` to `nw` (both without the CPL bit); what
 * was done with its left neighbour (MX_L_PAIR: the pair with kind lk; MX_L_FIRST: the batch's
 * first clock was patched) and its right one (MX_R_PAIR: the pair with rk; MX_R_LAST: the
 * execution's end; MX_R_JUNCTION: the final clock's pair, made at the resolution). */
enum { MX_L_NONE, MX_L_PAIR, MX_L_FIRST };
enum { MX_R_NONE, MX_R_PAIR, MX_R_LAST, MX_R_JUNCTION };
#define MX_MAX 1024
struct mem_fix {
    uint16_t j;
    uint8_t left, right;
    uint32_t old, nw, lk, rk;
};

/* the corrections of the block execution under way (b, identified by its execution count
 * `stamp` in the batch numbered `folds`), and the memory fields its dynamic final clock
 * gets at the resolution */
struct mem_exec {
    uint32_t b;
    uint64_t stamp, folds;
    unsigned n;
    struct mem_fix fix[MX_MAX];
    uint32_t last_now; /* the last static clock's kind now (0: unchanged; else kind + 1) */
    int has_fin;
    uint8_t fin[KF_N];
    int resolved; /* its end was resolved: nothing of it is left to fix, but a fold
                            * of that one execution still lists its fixed clocks (mx_listed) */
    int built;    /* its fetch missed the trace cache: every clock was fixed at its entry */
    int active;   /* it has stall clocks with a bus read active: they, not the bubble, are the
                   * left neighbour of its clock 1 (memory.c add_stall) */
    /* per static clock j < idx_cap: the index in fix[] of its latest fix, valid while
     * idx_gen[j] == gen (a new record, or one whose fixes were folded, takes a new gen) */
    uint32_t gen, idx_cap;
    uint32_t *idx_gen;
    uint16_t *idx_fix;
};

struct mm_state;

/* a growable map uint64 -> uint64 (predictor entries; key stored + 1) */
struct u64_map {
    uint64_t *key, *val;
    uint32_t cap, n;
};

/* the per-vCPU counting state, composed of the units' parts (counting.h) */
struct vcpu_counting;

#define RES_LAZY (-2)

struct clock_fields {
    uint8_t f[KF_N];
};

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
static inline unsigned pos_insn(unsigned p)
{
    return p ? p - 1 : 0;
}

static inline uint32_t ext(uint32_t k, int os)
{
    return k * 2 + (os ? 1 : 0);
}

/* Exact deadlines (docs/guest-events.md "Exact deadlines").  W counts clocks, and a deadline
 * in clocks must assume the most events per clock (3 instructions, say): a counter armed to
 * interrupt after 10,000 instructions of a loop that retires 0.75 per clock was checked about
 * 23 times per interrupt, each check closing a quarter of the distance.  W2 counts the events
 * of one watched counter instead: each block adds the most events of that counter one of its
 * executions can add (exact_add, from Python's per-kind increment table), and its conditional
 * callback fires at the entry of the first block that may take the counter to its limit,
 * where fast_check decides exactly, as it does for W.  The weights are fixed when a block is
 * translated, so the signature (the counter and its increments per kind) is fixed for the
 * translation cache: it is chosen after the same counter has driven the deadline at
 * W2_STREAK steps in a row, and installed by a flush (qemu_plugin_reset); it is replaced when
 * another counter caused at least 2/3 of the last W2_WINDOW deadline checks (a sampling
 * counter after a counting run; deadline.c exact_vote).  A vCPU whose programming does not
 * match the signature keeps W2 idle (0) and its deadlines in clocks. */
#define W2_STREAK 4       /* steps in a row with the same candidate before the first flush */
#define W2_WINDOW 512     /* deadline checks over which a replacement needs 2/3 of them */
#define W2_MAX_FLUSHES 16 /* signatures installed per run at most */

/* The outcome-free level (docs/guest-events.md "The outcome-free level").  When no enabled
 * counter reads anything that depends on a branch's outcome or on the clocks a misprediction
 * adds (Python decides, from clockmodel.OUTCOME_FEATURES: p4c_out.lite), blocks are translated
 * without outcome callbacks: a conditional end is a static end (the final clock not taken,
 * predicted), every block with a static end stores X_OUTCOME_FREE in SB_SILENT_NEXT and every
 * block checks SB_SILENT_NEXT != X_OUTCOME_FREE, so the check fires only after calls, returns,
 * indirect jumps, REP and far transfers.  The predictor is not trained by conditional branches
 * at that level. An execution QEMU abandons at an MMIO access (no X check sees it there) is
 * found by a memory callback of the one-instruction CF_MEMI_ONLY block that re-executes the
 * access (cb_memi).  Installed and removed by a flush; removal at once (a programming that needs
 * outcomes is written by a WRMSR, which ends its block: no conditional end runs at the lite
 * level after it), installation after LITE_STREAK steps in a row that want it, at most
 * LITE_MAX_INSTALLS times per run.  One vCPU, threads=1 only. */
#define X_OUTCOME_FREE 0x8000000000000003ull
#define LITE_STREAK 4
#define LITE_MAX_INSTALLS 16
/* the memory level (memory.c): removed after MEM_STREAK steps in a row that do not want it,
 * at most MEM_MAX_REMOVALS times per run (a profiler that schedules a cache event in and out
 * at every context switch would otherwise flush each time) */
#define MEM_STREAK 64
#define MEM_MAX_REMOVALS 8

/* the exact-deadline signature: a counter and its increments per ext kind */
struct exact_signature {
    int ctr;            /* counter 0-17 */
    uint32_t nk;        /* increments known for ext kinds < nk */
    const int32_t *col; /* [ext] increment per clock of that kind (malloc'ed, kept) */
    int64_t rate;       /* the most per clock (ext kinds >= nk) */
    int64_t pen[2];     /* the penalty clocks after a misprediction, summed, per CPL */
};

/* the exact deadlines of the run (flush.c) */
struct exact_deadline_state {
    volatile int active; /* blocks translated now carry W2 operations for the signature */
    volatile int req;    /* the pending flush (flush_pending) installs `next` */
    unsigned flushes;
    struct exact_signature sig, next;
};

/* the changes of silent direction of the run (directions.c), for P4PMU_DEBUG */
struct direction_state {
    uint64_t looks;          /* windows looked at */
    uint64_t groups_flipped; /* direction changes */
    uint64_t rewrites;       /* branch bytes rewritten (blocks dropped) */
    uint64_t unflippable;    /* changes not made: a member's physical address unknown or
                               * read-only (firmware) */
    uint64_t stale_runs;     /* blocks that ran with a previous direction (each: a flush) */
};

/* the outcome-free level of the run (flush.c) */
struct lite_level_state {
    volatile int active; /* blocks translated now are at the outcome-free level */
    unsigned installs, removals, streak;
};

static inline int64_t exact_increment(const struct exact_signature *g, uint32_t e, int64_t clocks)
{
    return e < g->nk ? (int64_t)g->col[e] * clocks : g->rate * clocks;
}

#define REPLAY_ENTRY(r) ((r)&7u)
#define REPLAY_MISPREDICTED(r) (((r) >> 3) & 3u)
#define REPLAY_LAST_PREDICTED(r) (((r) >> 5) & 1u)

static inline uint64_t maxclk(const struct blk *b)
{
    return b->maxclk;
}

#define PMI_RECHECK 64 /* clocks between looks at the LVT while a request is asserted */

#endif
