/* ring.h: the dependent-load ring of the latency workloads (chase.S, memcomp.S).
 *
 *   BUILD_RING(buf)  %edx elements (at least 1) at buf, buf + STRIDE, ...: each holds the
 *                    address of the next, the last the first's; P = buf at the end (uses Q)
 *   CHASE8           8 dependent loads: P = (P), eight times
 */
#ifndef P4PMU_WORKLOAD_RING_H
#define P4PMU_WORKLOAD_RING_H

#define STRIDE 1024

#ifdef __x86_64__
#define P       %rsi
#define Q       %rdi
#else
#define P       %esi
#define Q       %edi
#endif

#define BUILD_RING(buf)                 \
        mov     $buf, P;                \
        dec     %edx;                   \
        jz      96f;                    \
95:     lea     STRIDE(P), Q;           \
        mov     Q, (P);                 \
        mov     Q, P;                   \
        dec     %edx;                   \
        jnz     95b;                    \
96:     mov     $buf, Q;                \
        mov     Q, (P);                 \
        mov     $buf, P

#define CHASE8                          \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P;                 \
        mov     (P), P

#endif
