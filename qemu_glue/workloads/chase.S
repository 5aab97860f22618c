/* chase KB N: a dependent-load chase, N iterations of 8 loads, over a ring of KB kilobytes
 * (at most 32768) with one element every 1024 bytes: the load-to-use latency of the level
 * that holds the ring (docs/timing.md; published figures in docs/silicon-sources.md).
 *
 * Freestanding (no libc): every user access is in this file.  The ring is built in address
 * order (element i holds the address of element i + 1, the last the first), then chased:
 * each load's address is the previous load's result.  With a 1 KB stride a ring of 4 KB stays
 * in L1, one of 128 KB (32 pages: within the DTLB) misses L1 and hits L2, one of 16384 KB
 * misses L2 (and the DTLB once every 4 loads) on every CPU model.  Cycles per load =
 * (cycles of N2 iterations - cycles of N1) / (8 (N2 - N1)).
 *
 * The chase loop is chase_loop .. chase_loop_end (global symbols for the tests).
 */
#include "sys.h"
#include "ring.h"

#define MAX_KB 32768

#ifdef __x86_64__
#define ARGV(i) mov (8 + 8 * (i))(%rsp), %rsi
#else
#define ARGV(i) mov (4 + 4 * (i))(%esp), %esi
#endif

        .text
        .globl  _start
        .type   _start, @function
_start:
        ARGV(1)
        call    parse_dec
        mov     %eax, %ebx              /* KB */
        cmp     $MAX_KB, %ebx
        jbe     1f
        mov     $MAX_KB, %ebx
1:      ARGV(2)
        call    parse_dec
        mov     %eax, %ecx              /* iterations */
        mov     %ebx, %edx              /* the ring: KB elements */
        BUILD_RING(chase_buf)
        test    %ecx, %ecx
        jz      .Ldone
        .p2align 6
        .globl  chase_loop, chase_loop_end
chase_loop:
        CHASE8
        sub     $1, %ecx                /* (DEC is 2 uops on NetBurst: SUB keeps the loop's
                                         * own uops in the last load's clock) */
        jnz     chase_loop
chase_loop_end:
.Ldone:
        EXIT0
        .size   _start, . - _start

/* parse_dec: %eax = the decimal value of the string at P (0 if P is null) */
        .type   parse_dec, @function
parse_dec:
        xor     %eax, %eax
        test    P, P
        jz      2f
1:      movzbl  (P), %edx
        sub     $'0', %edx
        cmp     $9, %edx
        ja      2f
        imul    $10, %eax, %eax
        add     %edx, %eax
        inc     P
        jmp     1b
2:      ret
        .size   parse_dec, . - parse_dec

        .bss
        .p2align 12
        .globl  chase_buf
chase_buf:
        .skip   MAX_KB * STRIDE
        .size   chase_buf, MAX_KB * STRIDE

        .section .note.GNU-stack, "", @progbits
