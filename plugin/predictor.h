/*
 * predictor.h: what predictor.c offers to the other units. predictor.c: the branch
 * predictor of clockmodel.Predictor in C: predictor entries per vCPU, the conditional-entry
 * tables, return stack and indirect-branch targets (docs/guest-events.md I5).
 */
#ifndef P4PMU_PREDICTOR_H
#define P4PMU_PREDICTOR_H

#include "counting_types.h"
#include "state.h"

/* Conditional entries (clockmodel.Predictor.cond, docs/guest-events.md I5), as tables over
 * e = 0 (invalid) or counter + 1: the next entry after an outcome, and whether the entry
 * predicts taken (invalid: the static prediction, backward taken).  Together with what the
 * resolution path reads besides, in two cache lines (cond_tab). */
struct cond_table_set {
    /* k identical outcomes `taken` from entry x, for k = 0, 1, 2, >= 3 (three saturate the
     * counter from any state; later ones are predicted and change nothing): the entry after
     * (bits 0-2), the mispredictions among them (3-4), whether the last one was predicted
     * (5).  [taken][back][x][min(k, 3)], filled at set-up by cond_step itself. */
    uint8_t replay[2][2][5][4];
    uint8_t next[2][5];    /* [taken][e] */
    uint8_t pt[2][5];      /* [back][e]: predicts taken */
    uint8_t mmax[2][2][5]; /* the most mispredictions a run of identical outcomes
                                 * `taken` can still have from x: [taken][back][x] */
    uint8_t pen;           /* p4.kinds->n_penalty */
    uint8_t trace;         /* p4.run->branch_trace != NULL */
    /* the usual explicit outcome in one look-up: min(k, 3) silent outcomes of the owner
     * then one outcome `taken`, from entry x: the entry after (bits 0-2), the silent
     * mispredictions (3-4), the last one predicted (5), the penalties to reserve for the
     * owner's next silent outcomes (6-7), the entry saturated in the silent direction (8).
     * [silent][back][x][min(k, 3)][taken] */
    uint16_t fast[2][2][5][4][2];
} __attribute__((aligned(64)));


/* A vCPU's predictor (clockmodel.Predictor): address -> entry (index + 1 into the arena,
 * stable addresses: chunks of PCHUNK); entry value 0 = invalid, else state + 1 (conditional:
 * the 2-bit counter; indirect: the target); conditional entries: per group (resolve.c) */
struct predictor_vcpu {
    struct u64_map btb;
    uint64_t *pchunk[4096];
    uint32_t pn;
    uint64_t rsb[P4P_RSB_DEPTH]; /* the return stack */
    int rsb_n;
};

uint64_t *u64_map_get(struct u64_map *m, uint64_t k, int create);
uint64_t *pred_entry(struct predictor_vcpu *p, uint32_t idx1);
uint32_t pred_entry_of(struct predictor_vcpu *p, struct u64_map *m, uint64_t key);
struct cond_table_set *cond_tables_new(void);
void pred_call(struct predictor_vcpu *p, uint64_t ret);
int pred_ret(struct predictor_vcpu *p, uint64_t target);
int pred_ind_e(uint64_t *e, uint64_t target);
int pred_ind(struct predictor_vcpu *p, uint64_t addr, uint64_t target);

/* one outcome: returns 1 if it was predicted */
static inline int cond_step(uint64_t *e, int back, int taken)
{
    unsigned x = (unsigned)*e; /* always < 5: only these tables write entries */
    int pred = p4.cond_tab->pt[back][x] == taken;
    *e = p4.cond_tab->next[taken][x];
    return pred;
}

#endif
