/* count N: a loop with an exactly known number of user instructions and branches.
 *
 * Freestanding (no libc): every user instruction the program retires is in this file.
 * With N >= 1 given in decimal with D digits, a run retires
 *
 *     instructions        14 + 8*D + 4*N
 *     branches             3 +   D +   N    (conditional ones: the digit loop's JMP is a
 *                                            direct unconditional jump, which Linux's
 *                                            `branches` event does not count)
 *
 * on amd64 and i386 alike.  The counts under each label below are the instructions retired
 * there.  The loop body is four instructions and one conditional branch (taken N-1 times,
 * then not taken: its one misprediction per run adds the model's wrong-path instructions to
 * Linux's `instructions`, which counts bogus ones too -- a constant per run).
 *
 * The loop is count_loop .. count_loop_end (global symbols for the tests).  Linked at its own
 * address (workloads.py) so that no other program in the guest has
 * branches at the same linear addresses (the modelled predictor is indexed by them).
 */
#include "sys.h"

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1                      /* 8 + 8*D (4 + 8*D + 4) */
        mov     %eax, %ecx              /* 3 */
        test    %ecx, %ecx
        jz      .Ldone
        .p2align 6
        .globl  count_loop, count_loop_end
count_loop:                             /* 4 per iteration */
        add     %ecx, %edx
        xor     $0x5a, %edx
        dec     %ecx
        jnz     count_loop
count_loop_end:
.Ldone:
        EXIT0                           /* 3 */
        .size   _start, . - _start

        .section .note.GNU-stack, "", @progbits
