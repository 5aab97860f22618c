/* 32-bit protected-mode entry and low-level runtime of the p4pmu test guests.
 *
 * Multiboot v1 ELF (QEMU -kernel).  rt_init_cpu() (rt.c) installs our GDT (flat ring-0/ring-3
 * segments, a ring-0 code segment with base CS_BASE, a TSS) and the IDT whose vectors 0-31
 * go to isr_common -> isr_dispatch() and whose vector 0x80 (DPL 3) is rt_int80, the way back
 * to ring-0 C code after a probe or a ring-3 call.
 */
#include "layout.h"
#include "regs.h"

#define MB_MAGIC 0x1BADB002
#define MB_FLAGS 0x00000003 /* page-align modules, memory information */

	.section .multiboot, "a"
	.balign 4
	.long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)

	.section .bss
	.balign 16
stack_bottom:	.skip 32768
	.globl stack_top
stack_top:
	.skip 8192
	.globl intr_stack_top
intr_stack_top:
	.skip 8192
	.globl user_stack_top
user_stack_top:
mb_magic:	.skip 4
mb_info:	.skip 4
user_fn:	.skip 4
user_arg:	.skip 4

	.section .text
	.code32
	.globl _start
_start:
	cli
	cld
	movl $stack_top, %esp
	movl %eax, mb_magic
	movl %ebx, mb_info
	call rt_init_cpu
	pushl mb_info
	pushl mb_magic
	call guest_main
	pushl $0
	call rt_exit
1:	hlt
	jmp 1b

/* ---- exceptions ---------------------------------------------------------------------- */
.macro ISR n, haserr
isr\n:
	.if \haserr == 0
	pushl $0
	.endif
	pushl $\n
	jmp isr_common
.endm

ISR 0,0;  ISR 1,0;  ISR 2,0;  ISR 3,0;  ISR 4,0;  ISR 5,0;  ISR 6,0;  ISR 7,0
ISR 8,1;  ISR 9,0;  ISR 10,1; ISR 11,1; ISR 12,1; ISR 13,1; ISR 14,1; ISR 15,0
ISR 16,0; ISR 17,1; ISR 18,0; ISR 19,0; ISR 20,0; ISR 21,1; ISR 22,0; ISR 23,0
ISR 24,0; ISR 25,0; ISR 26,0; ISR 27,0; ISR 28,0; ISR 29,1; ISR 30,1; ISR 31,0

	.globl isr_common
isr_common:
	pushal
	cld
	pushl %esp
	call isr_dispatch
	addl $4, %esp
	popal
	addl $8, %esp
	iretl

	.section .rodata
	.balign 4
	.globl isr_table
isr_table:
	.irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
	.long isr\n
	.endr

	.section .text
/* Back to the ring-0 C code that called probe_enter / rt_call_user: the int 0x80 gate (from
 * ring 3; its frame on the TSS stack is dropped) or a jump from probe_after in ring 0.  EAX is
 * kept (rt_call_user's result). */
	.globl rt_int80
rt_int80:
	movl rt_kernel_sp, %esp
	movw $SEL_KDATA, %cx
	movw %cx, %ds
	movw %cx, %es
	movw %cx, %fs
	movw %cx, %gs
	cld
	popl %edi
	popl %esi
	popl %ebx
	popl %ebp
	ret

/* ---- probes --------------------------------------------------------------------------- */
/* void probe_enter(int mode): load every register from probe_in and jump (far) to
 * probe_farptr; ring 3 goes through an iret first.  Ends in probe_after. */
	.globl probe_enter
probe_enter:
	pushl %ebp
	pushl %ebx
	pushl %esi
	pushl %edi
	movl %esp, rt_kernel_sp
	movl 20(%esp), %eax
	cmpl $MODE_RING3, %eax
	je 1f
	pushl probe_in + R_FLAGS
	popfl
	movl probe_in + R_AX, %eax
	movl probe_in + R_CX, %ecx
	movl probe_in + R_DX, %edx
	movl probe_in + R_BX, %ebx
	movl probe_in + R_BP, %ebp
	movl probe_in + R_SI, %esi
	movl probe_in + R_DI, %edi
	ljmp *probe_farptr
1:
	movw $SEL_UDATA, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %fs
	movw %ax, %gs
	pushl $SEL_UDATA
	pushl $user_stack_top
	pushl probe_in + R_FLAGS
	pushl $SEL_UCODE
	pushl $probe_user_entry
	iretl
probe_user_entry:			/* CPL 3 */
	movl probe_in + R_AX, %eax
	movl probe_in + R_CX, %ecx
	movl probe_in + R_DX, %edx
	movl probe_in + R_BX, %ebx
	movl probe_in + R_BP, %ebp
	movl probe_in + R_SI, %esi
	movl probe_in + R_DI, %edi
	ljmp *probe_farptr

/* Every stub ends here (and a fault inside a stub resumes here, in the same segment):
 * record EFLAGS and the registers, then go back to C. */
	.globl probe_after
probe_after:
	pushfl
	popl probe_out + R_FLAGS
	movl %eax, probe_out + R_AX
	movl %ecx, probe_out + R_CX
	movl %edx, probe_out + R_DX
	movl %ebx, probe_out + R_BX
	movl %esp, probe_out + R_SP
	movl %ebp, probe_out + R_BP
	movl %esi, probe_out + R_SI
	movl %edi, probe_out + R_DI
	/* back to C: in ring 0 by a jump (nothing written below the stack pointer, which the
	 * guest checks), from ring 3 through the int 0x80 gate (on the TSS stack) */
	movl %cs, %eax
	testl $3, %eax
	jnz 1f
	ljmp $SEL_KCODE, $rt_int80
1:	int $0x80

/* ureg rt_call_user(ureg (*fn)(ureg), ureg arg): fn(arg) at CPL 3 */
	.globl rt_call_user
rt_call_user:
	pushl %ebp
	pushl %ebx
	pushl %esi
	pushl %edi
	movl %esp, rt_kernel_sp
	movl 20(%esp), %eax
	movl %eax, user_fn
	movl 24(%esp), %eax
	movl %eax, user_arg
	movw $SEL_UDATA, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %fs
	movw %ax, %gs
	pushl $SEL_UDATA
	pushl $user_stack_top
	pushl rt_user_flags
	pushl $SEL_UCODE
	pushl $user_call_tramp
	iretl
user_call_tramp:			/* CPL 3 */
	pushl user_arg
	call *user_fn
	int $0x80

	.section .note.GNU-stack, "", @progbits
