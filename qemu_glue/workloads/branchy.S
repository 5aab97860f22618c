/* branchy N: a loop whose second branch follows a fixed pattern, for the branch predictor
 * and the branch events (N a multiple of 4, N >= 4).
 *
 * Freestanding (no libc).  Per iteration, with the loop index i = N, N-1, ..., 1:
 *
 *     JE  1f     taken when i & 3 == 3 (skipping one INC), else not taken: for N a multiple
 *                of 4 the pattern is not taken, taken, not taken, not taken, ...
 *     JNZ loop   the loop branch: taken N-1 times, then not taken
 *
 * so a run retires 7*N - N/4 non-bogus instructions in the loop and 2*N conditional branches
 * (PARSE_ARG1 and EXIT0 of sys.h add a constant).  What the predictor makes of the pattern
 * (docs/guest-events.md I5) is for the tests to replay: steadily the JE is predicted not
 * taken, so 3 of 4 are predicted not taken and 1 of 4 is a mispredicted taken branch; the
 * JNZ is predicted taken except for the final not-taken one.  The loop is branchy_loop ..
 * branchy_loop_end (global symbols for the tests).  Linked at its own address
 * (workloads.py) so that no other program shares its predictor entries.
 */
#include "sys.h"

        .text
        .globl  _start
        .type   _start, @function
_start:
        PARSE_ARG1
        mov     %eax, %ecx
        test    %ecx, %ecx
        jz      .Ldone
        .p2align 6
        .globl  branchy_loop, branchy_loop_end
branchy_loop:
        mov     %ecx, %eax
        and     $3, %eax
        cmp     $3, %eax
        je      1f
        inc     %edx
1:      dec     %ecx
        jnz     branchy_loop
branchy_loop_end:
.Ldone:
        EXIT0
        .size   _start, . - _start

        .section .note.GNU-stack, "", @progbits
