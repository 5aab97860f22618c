/* 64-bit (long mode) entry and low-level runtime of the p4pmu test guests.
 *
 * QEMU's multiboot loader refuses ELF64 files, so this guest is a flat binary whose multiboot
 * header uses the "a.out kludge" (flag 16: load/entry addresses in the header).  The 32-bit
 * entry checks CPUID for long mode (prints NOLONGMODE and exits with status 5 without it),
 * identity-maps the first 1 GiB with 2 MiB pages (user-accessible, for ring 3) and 3-4 GiB
 * (local APIC, uncached, ring 0 only), enables
 * PAE + EFER.LME + paging and jumps to 64-bit code.  rt_init_cpu() (rt.c) then installs the
 * full GDT (with a 64-bit TSS) and the IDT.
 */
#include "layout.h"
#include "regs.h"

#define MB_MAGIC 0x1BADB002
#define MB_FLAGS 0x00010003 /* page-align modules, memory information, address fields */

	.section .multiboot, "a"
	.balign 4
mb_header:
	.long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)
	.long mb_header		/* header_addr */
	.long __load_start	/* load_addr */
	.long __load_end	/* load_end_addr */
	.long __bss_end		/* bss_end_addr */
	.long _start		/* entry_addr */

	.section .bss
	.balign 4096
pml4:	.skip 4096
pdpt:	.skip 4096
pd:	.skip 4096
pd_hi:	.skip 4096	/* 3-4 GiB: the local APIC (FEE00000h), uncached */
	.balign 16
	.skip 32768
	.globl stack_top
stack_top:
	.skip 8192
	.globl intr_stack_top
intr_stack_top:
	.skip 8192
	.globl user_stack_top
user_stack_top:
mb_magic:	.skip 8
mb_info:	.skip 8
user_fn:	.skip 8
user_arg:	.skip 8

	.section .rodata
	.balign 16
boot_gdt:
	.quad 0
	.quad 0x00AF9A000000FFFF	/* 0x08: 64-bit code */
	.quad 0x00CF92000000FFFF	/* 0x10: data */
boot_gdt_end:
boot_gdtr:
	.word boot_gdt_end - boot_gdt - 1
	.long boot_gdt
nolm_msg:
	.ascii "NOLONGMODE: CPUID.80000001h:EDX.LM = 0\n\0"

	.section .text
	.code32
	.globl _start
_start:
	cli
	cld
	movl $stack_top, %esp
	movl %eax, mb_magic
	movl %ebx, mb_info
	/* long mode available? */
	movl $0x80000000, %eax
	cpuid
	cmpl $0x80000001, %eax
	jb no_long_mode
	movl $0x80000001, %eax
	cpuid
	btl $29, %edx
	jnc no_long_mode
	/* identity map 0-1 GiB: PML4[0] -> PDPT, PDPT[0] -> PD, PD[i] = i * 2 MiB */
	movl $pdpt + 0x7, pml4		/* present, writable, user */
	movl $pd + 0x7, pdpt
	xorl %ecx, %ecx
1:	movl %ecx, %eax
	shll $21, %eax
	orl $0x87, %eax			/* present, writable, user, 2 MiB page */
	movl %eax, pd(,%ecx,8)
	incl %ecx
	cmpl $512, %ecx
	jb 1b
	/* PDPT[1] -> PD as well: 1-2 GiB is an alias of 0-1 GiB (the same physical pages at a
	 * second virtual address, as a shared library mapped elsewhere: loop flag `a`) */
	movl $pd + 0x7, pdpt + 8
	/* PDPT[3] -> pd_hi: identity map 3-4 GiB (local APIC) with 2 MiB pages, PCD|PWT */
	movl $pd_hi + 0x3, pdpt + 24	/* present, writable */
	xorl %ecx, %ecx
1:	movl %ecx, %eax
	shll $21, %eax
	addl $0xC0000000, %eax
	orl $0x9B, %eax			/* present, writable, PWT, PCD, 2 MiB page */
	movl %eax, pd_hi(,%ecx,8)
	incl %ecx
	cmpl $512, %ecx
	jb 1b
	movl %cr4, %eax
	orl $(1 << 5), %eax		/* PAE */
	movl %eax, %cr4
	movl $pml4, %eax
	movl %eax, %cr3
	movl $0xC0000080, %ecx		/* EFER */
	rdmsr
	orl $(1 << 8), %eax		/* LME */
	wrmsr
	lgdt boot_gdtr
	movl %cr0, %eax
	orl $0x80000001, %eax		/* PG, PE */
	movl %eax, %cr0
	ljmp $0x08, $long_entry

no_long_mode:
	movl $nolm_msg, %esi
2:	movb (%esi), %al
	testb %al, %al
	jz 3f
	movw $0x3F8, %dx
	outb %al, %dx
	incl %esi
	jmp 2b
3:	movl $2, %eax
	outl %eax, $0xF4
4:	hlt
	jmp 4b

	.code64
long_entry:
	movl $SEL_KDATA, %eax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	movw %ax, %fs
	movw %ax, %gs
	movq $stack_top, %rsp
	call rt_init_cpu
	movl mb_magic(%rip), %edi
	movl mb_info(%rip), %esi
	call guest_main
	xorl %edi, %edi
	call rt_exit
5:	hlt
	jmp 5b

/* ---- exceptions ---------------------------------------------------------------------- */
.macro ISR n, haserr
isr\n:
	.if \haserr == 0
	pushq $0
	.endif
	pushq $\n
	jmp isr_common
.endm

ISR 0,0;  ISR 1,0;  ISR 2,0;  ISR 3,0;  ISR 4,0;  ISR 5,0;  ISR 6,0;  ISR 7,0
ISR 8,1;  ISR 9,0;  ISR 10,1; ISR 11,1; ISR 12,1; ISR 13,1; ISR 14,1; ISR 15,0
ISR 16,0; ISR 17,1; ISR 18,0; ISR 19,0; ISR 20,0; ISR 21,1; ISR 22,0; ISR 23,0
ISR 24,0; ISR 25,0; ISR 26,0; ISR 27,0; ISR 28,0; ISR 29,1; ISR 30,1; ISR 31,0

	.globl isr_common
isr_common:				/* struct frame (rt.h), lowest address first */
	pushq %rax
	pushq %rcx
	pushq %rdx
	pushq %rbx
	pushq %rbp
	pushq %rsi
	pushq %rdi
	pushq %r8
	pushq %r9
	pushq %r10
	pushq %r11
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	cld
	movq %rsp, %rdi
	call isr_dispatch
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %r11
	popq %r10
	popq %r9
	popq %r8
	popq %rdi
	popq %rsi
	popq %rbp
	popq %rbx
	popq %rdx
	popq %rcx
	popq %rax
	addq $16, %rsp
	iretq

	.section .rodata
	.balign 8
	.globl isr_table
isr_table:
	.irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
	.quad isr\n
	.endr

	.section .text
/* Back to the ring-0 C code that called probe_enter / rt_call_user: the int 0x80 gate (from
 * ring 3; its frame on the TSS stack is dropped) or a jump from probe_after in ring 0 (RAX kept). */
	.globl rt_int80
rt_int80:
	movq rt_kernel_sp(%rip), %rsp
	cld
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret

/* ---- probes --------------------------------------------------------------------------- */
.macro LOAD_PROBE_REGS
	movq probe_in + R_AX(%rip), %rax
	movq probe_in + R_CX(%rip), %rcx
	movq probe_in + R_DX(%rip), %rdx
	movq probe_in + R_BX(%rip), %rbx
	movq probe_in + R_BP(%rip), %rbp
	movq probe_in + R_SI(%rip), %rsi
	movq probe_in + R_DI(%rip), %rdi
	movq probe_in + R_R8(%rip), %r8
	movq probe_in + R_R9(%rip), %r9
	movq probe_in + R_R10(%rip), %r10
	movq probe_in + R_R11(%rip), %r11
	movq probe_in + R_R12(%rip), %r12
	movq probe_in + R_R13(%rip), %r13
	movq probe_in + R_R14(%rip), %r14
	movq probe_in + R_R15(%rip), %r15
.endm

/* void probe_enter(int mode) */
	.globl probe_enter
probe_enter:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, rt_kernel_sp(%rip)
	cmpl $MODE_RING3, %edi
	je 1f
	pushq probe_in + R_FLAGS(%rip)
	popfq
	LOAD_PROBE_REGS
	jmp *probe_target(%rip)
1:
	pushq $SEL_UDATA
	pushq $user_stack_top
	pushq probe_in + R_FLAGS(%rip)
	pushq $SEL_UCODE
	pushq $probe_user_entry
	iretq
probe_user_entry:			/* CPL 3 */
	LOAD_PROBE_REGS
	jmp *probe_target(%rip)

	.globl probe_after
probe_after:
	pushfq
	popq probe_out + R_FLAGS(%rip)
	movq %rax, probe_out + R_AX(%rip)
	movq %rcx, probe_out + R_CX(%rip)
	movq %rdx, probe_out + R_DX(%rip)
	movq %rbx, probe_out + R_BX(%rip)
	movq %rsp, probe_out + R_SP(%rip)
	movq %rbp, probe_out + R_BP(%rip)
	movq %rsi, probe_out + R_SI(%rip)
	movq %rdi, probe_out + R_DI(%rip)
	movq %r8, probe_out + R_R8(%rip)
	movq %r9, probe_out + R_R9(%rip)
	movq %r10, probe_out + R_R10(%rip)
	movq %r11, probe_out + R_R11(%rip)
	movq %r12, probe_out + R_R12(%rip)
	movq %r13, probe_out + R_R13(%rip)
	movq %r14, probe_out + R_R14(%rip)
	movq %r15, probe_out + R_R15(%rip)
	/* back to C: in ring 0 by a jump (nothing written below the stack pointer, which the
	 * guest checks), from ring 3 through the int 0x80 gate (on the TSS stack) */
	movl %cs, %eax
	testl $3, %eax
	jnz 1f
	jmp rt_int80
1:	int $0x80

/* ureg rt_call_user(ureg (*fn)(ureg), ureg arg) */
	.globl rt_call_user
rt_call_user:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, rt_kernel_sp(%rip)
	movq %rdi, user_fn(%rip)
	movq %rsi, user_arg(%rip)
	pushq $SEL_UDATA
	pushq $user_stack_top
	pushq rt_user_flags(%rip)
	pushq $SEL_UCODE
	pushq $user_call_tramp
	iretq
user_call_tramp:			/* CPL 3 */
	movq user_arg(%rip), %rdi
	call *user_fn(%rip)
	int $0x80

	.section .note.GNU-stack, "", @progbits
