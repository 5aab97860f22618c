/* Assembly part of the events-guest runtime (evrt.c): interrupt stubs for vectors
 * 40h-4Fh (into rt's isr_common -> isr_dispatch -> rt_vector_handlers) and, in the 32-bit
 * guest, the real-mode trampoline that brings the second logical processor up (SIPI vector
 * 08h: copied to 8000h by ap_start) and its 32-bit entry. */
#include "layout.h"

	.section .text
#ifdef __x86_64__
	.code64
.macro XISR n
xisr\n:
	pushq $0
	pushq $\n
	jmp isr_common
.endm
#define PTR .quad
#else
	.code32
.macro XISR n
xisr\n:
	pushl $0
	pushl $\n
	jmp isr_common
.endm
#define PTR .long
#endif

	.irp n, 0x40,0x41,0x42,0x43,0x44,0x45,0x46,0x47,0x48,0x49,0x4a,0x4b,0x4c,0x4d,0x4e,0x4f
	XISR \n
	.endr

	.section .rodata
	.balign 8
	.globl ext_isr_table
ext_isr_table:
	.irp n, 0x40,0x41,0x42,0x43,0x44,0x45,0x46,0x47,0x48,0x49,0x4a,0x4b,0x4c,0x4d,0x4e,0x4f
	PTR xisr\n
	.endr

#ifndef __x86_64__
#define AP_BASE 0x8000
#define T(x) ((x) - ap_tramp_start + AP_BASE)
	.section .text
	.code16
	.globl ap_tramp_start, ap_tramp_end
ap_tramp_start:
	cli
	cld
	xorw %ax, %ax
	movw %ax, %ds
	lgdtl T(ap_tramp_gdtr)
	movl %cr0, %eax
	orl $1, %eax
	movl %eax, %cr0
	ljmpl $0x08, $ap_entry32
	.balign 8
ap_tramp_gdt:
	.quad 0
	.quad 0x00CF9A000000FFFF	/* 08h: flat 32-bit code */
	.quad 0x00CF92000000FFFF	/* 10h: flat data */
ap_tramp_gdtr:
	.word 23
	.long T(ap_tramp_gdt)
ap_tramp_end:

	.code32
ap_entry32:
	movw $0x10, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	lgdt ap_gdtr			/* the BSP's GDT and IDT (evrt.c, ap_start) */
	lidt ap_idtr
	ljmp $SEL_KCODE, $1f
1:	movw $SEL_KDATA, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw %ax, %fs
	movw %ax, %gs
	movl $ap_stack_top, %esp
	call ap_main
2:	cli
	hlt
	jmp 2b

	.section .bss
	.balign 16
	.skip 16384
ap_stack_top:
	.skip 8192
	.globl ap_intr_stack_top
ap_intr_stack_top:
#endif


/* ---- measured calls ------------------------------------------------------------------------
 * ureg meas_r0(loop_fn fn, ureg n) / meas_r3(fn, n): 18 WRMSRs from meas_on[] (enable the
 * counters), fn(n) at CPL 0 (r0) or through rt_call_user at CPL 3 (r3), 18 WRMSRs from
 * meas_off[].  Straight-line code: between the enabling and the disabling WRMSRs the only
 * branches are the call into the loop, the loop's own and its return (and the ring
 * transitions of r3), so nothing outside the loop depends on predictor history (evrt.h). */
	.section .text
#ifdef __x86_64__
.macro WRTAB tab
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
	movl \tab + \i * 12(%rip), %ecx
	movl \tab + \i * 12 + 4(%rip), %eax
	movl \tab + \i * 12 + 8(%rip), %edx
	wrmsr
	.endr
.endm
	.globl meas_r0, meas_r3
meas_r0:
	pushq %rbx
	pushq %rbp
	pushq %r12
	movq %rdi, %r12			/* fn */
	movq %rsi, %rbx			/* n */
	WRTAB meas_on
	movq %rbx, %rdi
	call *%r12
	WRTAB meas_off
	popq %r12
	popq %rbp
	popq %rbx
	ret
meas_r3:
	pushq %rbx
	pushq %rbp
	pushq %r12
	movq %rdi, %r12
	movq %rsi, %rbx
	WRTAB meas_on
	movq %r12, %rdi
	movq %rbx, %rsi
	call rt_call_user
	WRTAB meas_off
	popq %r12
	popq %rbp
	popq %rbx
	ret
#else
.macro WRTAB tab
	.irp i, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
	movl \tab + \i * 12, %ecx
	movl \tab + \i * 12 + 4, %eax
	movl \tab + \i * 12 + 8, %edx
	wrmsr
	.endr
.endm
	.globl meas_r0, meas_r3
meas_r0:
	pushl %ebx
	pushl %esi
	movl 12(%esp), %esi		/* fn */
	movl 16(%esp), %ebx		/* n */
	WRTAB meas_on
	pushl %ebx
	call *%esi
	addl $4, %esp
	WRTAB meas_off
	popl %esi
	popl %ebx
	ret
meas_r3:
	pushl %ebx
	pushl %esi
	movl 12(%esp), %esi
	movl 16(%esp), %ebx
	WRTAB meas_on
	pushl %ebx
	pushl %esi
	call rt_call_user
	addl $8, %esp
	WRTAB meas_off
	popl %esi
	popl %ebx
	ret
#endif

	.section .note.GNU-stack, "", @progbits
