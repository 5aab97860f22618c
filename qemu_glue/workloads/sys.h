/* sys.h: what the bundled workloads need from the kernel, on amd64 and i386.
 *
 * The workloads are freestanding static executables (no libc, no dynamic loader): the first
 * user instruction after exec is _start and the last one is the exit system call, so every
 * user instruction they retire is written in their .S file.
 *
 *   PARSE_ARG1  %eax = the first argument's decimal value (0 without one); retires
 *               4 instructions (one conditional branch), then per digit 8 (one conditional
 *               branch, one direct JMP), then 4 (one conditional branch) at the first
 *               character that is not a digit
 *   EXIT0       exit(0): 3 instructions (the last is the system call)
 */
#ifndef P4PMU_WORKLOAD_SYS_H
#define P4PMU_WORKLOAD_SYS_H

#ifdef __x86_64__
/* at _start: (%rsp) = argc, 8(%rsp) = argv[0], 16(%rsp) = argv[1] (0 if absent) */
#define ARG1_TO_SI      mov 16(%rsp), %rsi
#define SI              %rsi
#define EXIT0           mov $60, %eax; xor %edi, %edi; syscall
#else
/* at _start: (%esp) = argc, 4(%esp) = argv[0], 8(%esp) = argv[1] (0 if absent) */
#define ARG1_TO_SI      mov 8(%esp), %esi
#define SI              %esi
#define EXIT0           mov $1, %eax; xor %ebx, %ebx; int $0x80
#endif

#define PARSE_ARG1                      \
        ARG1_TO_SI;                     \
        xor     %eax, %eax;             \
        test    SI, SI;                 \
        jz      98f;                    \
97:     movzbl  (SI), %edx;             \
        sub     $'0', %edx;             \
        cmp     $9, %edx;               \
        ja      98f;                    \
        imul    $10, %eax, %eax;        \
        add     %edx, %eax;             \
        inc     SI;                     \
        jmp     97b;                    \
98:

#endif
