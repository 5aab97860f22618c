/* memcomp N: two functions of the same instructions count, N iterations each: mem_bound
 * chases 8 dependent loads per iteration through a 16 MB ring (1 KB stride: every load
 * misses L2), compute_bound runs 8 dependent IMULs per iteration.  A cycles profile splits
 * between them as memory latency and IMUL latency do (docs/timing.md): on silicon about 290
 * clocks per load against 10-14 per IMUL.
 *
 * Freestanding (no libc): every user access is in this file.  The ring is built first
 * (element i holds the address of element i + 1, the last the first).
 */
#include "sys.h"
#include "ring.h"

#define ELEMENTS 16384

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ebp              /* iterations */
        mov     $ELEMENTS, %edx
        BUILD_RING(memcomp_buf)
        test    %ebp, %ebp
        jz      2f
        mov     %ebp, %ecx
        call    mem_bound
        mov     $3, %eax
        mov     %ebp, %ecx
        call    compute_bound
2:      EXIT0
        .size   _start, . - _start

/* ecx iterations (ecx > 0) of 8 dependent loads from P */
        .p2align 6
        .globl  mem_bound
        .type   mem_bound, @function
mem_bound:
1:      CHASE8
        sub     $1, %ecx
        jnz     1b
        ret
        .size   mem_bound, . - mem_bound

/* ecx iterations (ecx > 0) of 8 dependent multiplications of eax */
        .p2align 6
        .globl  compute_bound
        .type   compute_bound, @function
compute_bound:
1:      imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        imul    %eax, %eax
        sub     $1, %ecx
        jnz     1b
        ret
        .size   compute_bound, . - compute_bound

        .bss
        .p2align 12
memcomp_buf:
        .skip   ELEMENTS * STRIDE

        .section .note.GNU-stack, "", @progbits
