/* The measured loops of the events guests: hand-written, so the instruction stream is known
 * exactly.  Every loop is `ureg loop_NAME(ureg n)` (n >= 1 iterations; 32-bit cdecl or SysV
 * x86-64), timer-free, with no memory access outside loop_data, hot_buf, pages_buf and
 * thrash_buf (and smc's store into its own code).  The same source builds both
 * guests; the bodies use 32-bit registers, so the instruction sequence is the same in both
 * (only the encodings and the prologues differ).
 *
 * Labels `loopname_lN` mark instructions the Python side (tests/guests/loops.py) needs to
 * find: the body start (`_body`), branches, the end of the body (`_end`).  loops.py reads the
 * instructions between them from the ELF with objdump and replays the control flow, so the
 * expectations are computed from the bytes that really ran.  Keep the two in step.
 */
	.section .text.loops, "ax"
#ifdef __x86_64__
	.code64
#define PROLOGUE \
	pushq %rbx; pushq %rbp; pushq %r12; pushq %r13; pushq %r14; pushq %r15; \
	movl %edi, %ecx
#define EPILOGUE \
	popq %r15; popq %r14; popq %r13; popq %r12; popq %rbp; popq %rbx
#define RDX %rdx
#define RSI %rsi
#define RBX %rbx
#define RDI_IDX %rdi
#else
	.code32
#define PROLOGUE \
	pushl %ebx; pushl %ebp; pushl %esi; pushl %edi; \
	movl 20(%esp), %ecx
#define EPILOGUE \
	popl %edi; popl %esi; popl %ebp; popl %ebx
#define RDX %edx
#define RSI %esi
#define RBX %ebx
#define RDI_IDX %edi
#endif

#define LOOP(name) \
	.globl loop_##name; .type loop_##name, @function; .balign 64; loop_##name:

/* ---- nop4: 4 instructions per iteration, one conditional back-edge --------------------- */
LOOP(nop4)
	PROLOGUE
	.globl nop4_body
nop4_body:
	nop
	nop
	decl %ecx
	.globl nop4_br
nop4_br:
	jnz nop4_body
	.globl nop4_end
nop4_end:
	EPILOGUE
	xorl %eax, %eax
	ret

/* ---- alu: 8 integer instructions per iteration ----------------------------------------- */
LOOP(alu)
	PROLOGUE
	xorl %eax, %eax
	xorl %edx, %edx
	.globl alu_body
alu_body:
	addl $3, %eax
	xorl %edx, %eax
	movl %eax, %edx
	shll $1, %edx
	subl %edx, %eax
	leal 1(%eax), %eax
	decl %ecx
	.globl alu_br
alu_br:
	jnz alu_body
	.globl alu_end
alu_end:
	EPILOGUE
	ret

/* ---- alt: a branch that alternates taken / not taken -----------------------------------
 * First a priming phase of 4 iterations in which the same JZ is always taken (mask 0), so
 * the predictor entries of alt_jz and alt_br reach a state that does not depend on what ran
 * before (docs/guest-events.md I5: 2-bit counters); then n iterations with mask 1:
 * ecx odd: test, jz (not taken), add, dec, jnz; ecx even: test, jz (taken), dec, jnz. */
LOOP(alt)
	PROLOGUE
	xorl %eax, %eax
	movl %ecx, %edi
	movl $4, %ecx
	xorl %ebp, %ebp
	.globl alt_body
alt_body:
	testl %ebp, %ecx
	.globl alt_jz
alt_jz:
	jz alt_skip
	addl $1, %eax
	.globl alt_skip
alt_skip:
	decl %ecx
	.globl alt_br
alt_br:
	jnz alt_body
	.globl alt_end
alt_end:
	testl %ebp, %ebp
	jnz alt_done
	movl $1, %ebp
	movl %edi, %ecx
	jmp alt_body
alt_done:
	EPILOGUE
	ret

/* ---- pat3: a branch taken on every third iteration (ecx % 3 == 0) ----------------------- */
LOOP(pat3)
	PROLOGUE
	xorl %eax, %eax
	movl $3, %ebx
	.globl pat3_body
pat3_body:
	decl %ebx
	.globl pat3_jnz1
pat3_jnz1:
	jnz pat3_skip
	movl $3, %ebx
	.globl pat3_skip
pat3_skip:
	decl %ecx
	.globl pat3_br
pat3_br:
	jnz pat3_body
	.globl pat3_end
pat3_end:
	EPILOGUE
	ret

/* ---- phases: a branch whose direction changes in runs of 1, 2 and 3 ---------------------
 * phases_jz is taken during a phase 0 and not taken during a phase 1; the phases alternate
 * with lengths 4 (the first: it leaves phases_jz and phases_jnz in a state that does not
 * depend on what ran before), then 3, 2, 1, 3, 2, 1, ... iterations, so both directions
 * come in runs of every length from 1 to 3 (a run of 3 saturates a 2-bit counter): the
 * predictor entry keeps leaving and reaching saturation in either direction.  phases_jnz
 * (the phase goes on) and phases_jnz2 (length counter) are further forward branches with
 * mixed outcomes. */
LOOP(phases)
	PROLOGUE
	xorl %eax, %eax
	movl $4, %ebx
	movl $3, %esi
	xorl %ebp, %ebp
	.globl phases_body
phases_body:
	testl %ebp, %ebp
	.globl phases_jz
phases_jz:
	jz phases_skip
	addl $1, %eax
	.globl phases_skip
phases_skip:
	decl %ebx
	.globl phases_jnz
phases_jnz:
	jnz phases_next
	xorl $1, %ebp
	movl %esi, %ebx
	decl %esi
	.globl phases_jnz2
phases_jnz2:
	jnz phases_next
	movl $3, %esi
	.globl phases_next
phases_next:
	decl %ecx
	.globl phases_br
phases_br:
	jnz phases_body
	.globl phases_end
phases_end:
	EPILOGUE
	ret

/* ---- members: two blocks that end in the same branch -------------------------------------
 * members_sel is taken three times, then not (period 4): three iterations run the block at
 * members_b, the fourth the block from members_a (its fall-through); both blocks end at
 * members_jnz, which is taken twice, then not taken (period 3): one predictor entry, two
 * blocks, mixed outcomes, in varying order. */
LOOP(members)
	PROLOGUE
	xorl %eax, %eax
	movl $3, %ebx
	movl $4, %edx
	.globl members_body
members_body:
	decl %edx
	.globl members_sel
members_sel:
	jnz members_b
	.globl members_a
members_a:
	movl $4, %edx
	addl $1, %eax
	.globl members_b
members_b:
	decl %ebx
	.globl members_jnz
members_jnz:
	jnz members_c
	movl $3, %ebx
	.globl members_c
members_c:
	decl %ecx
	.globl members_br
members_br:
	jnz members_body
	.globl members_end
members_end:
	EPILOGUE
	ret

/* ---- callret: a direct CALL and its RET per iteration ----------------------------------- */
LOOP(callret)
	PROLOGUE
	.globl callret_body
callret_body:
	call callret_fn
	decl %ecx
	.globl callret_br
callret_br:
	jnz callret_body
	.globl callret_end
callret_end:
	EPILOGUE
	ret
	.globl callret_fn
callret_fn:
	ret

/* ---- indirect: an indirect JMP and an indirect CALL (+ RET) per iteration --------------- */
LOOP(indirect)
	PROLOGUE
	movl $indirect_tgt, %edx
	movl $indirect_fn, %esi
	.globl indirect_body
indirect_body:
	jmp *RDX
	.globl indirect_tgt
indirect_tgt:
	call *RSI
	decl %ecx
	.globl indirect_br
indirect_br:
	jnz indirect_body
	.globl indirect_end
indirect_end:
	EPILOGUE
	ret
	.globl indirect_fn
indirect_fn:
	ret

/* ---- swing: branches the predictor gets wrong every iteration: an indirect JMP whose target
 * alternates (the BTB predicts the last one), and a chain of 24 CALLs, deeper than the
 * 16-entry return stack buffer, whose 8 outermost RETs find it empty --------------------- */
LOOP(swing)
	PROLOGUE
	movl $swing_a, %edx
	movl $swing_b, %esi
	.globl swing_body
swing_body:
	xchg RDX, RSI
	jmp *RDX
	.globl swing_a
swing_a:
	jmp swing_call
	.globl swing_b
swing_b:
	nop
	.globl swing_call
swing_call:
	movl $24, %edi
	call swing_fn
	decl %ecx
	.globl swing_br
swing_br:
	jnz swing_body
	.globl swing_end
swing_end:
	EPILOGUE
	xorl %eax, %eax
	ret
	.globl swing_fn
swing_fn:
	decl %edi
	jz swing_ret
	call swing_fn
	.globl swing_ret
swing_ret:
	ret

/* ---- ucode: microcoded instructions (more than 4 uops: delivered by the microcode ROM):
 * ENTER (with LEAVE, which is not, to balance the stack) and CMPXCHG8B on loop_data.  (Not
 * POPF: QEMU ends its translated block after it, and the loops keep one block per
 * iteration.) ------------------------------------------------------------------------------ */
LOOP(ucode)
	PROLOGUE
	movl $loop_data, %esi
	.globl ucode_body
ucode_body:
	enter $0, $0
	leave
	cmpxchg8b (RSI)
	decl %ecx
	.globl ucode_br
ucode_br:
	jnz ucode_body
	.globl ucode_end
ucode_end:
	EPILOGUE
	xorl %eax, %eax
	ret

/* ---- repmov: a REP MOVSB of 16 bytes within loop_data per iteration (microcoded; its
 * iterations are counted at run time) ------------------------------------------------------ */
LOOP(repmov)
	PROLOGUE
	cld
	movl %ecx, %ebx
	.globl repmov_body
repmov_body:
	movl $loop_data, %esi
	movl $loop_data + 128, %edi
	movl $16, %ecx
	rep movsb
	decl %ebx
	.globl repmov_br
repmov_br:
	jnz repmov_body
	.globl repmov_end
repmov_end:
	EPILOGUE
	xorl %eax, %eax
	ret

/* ---- x87: arithmetic, register moves, a load and a store per iteration ----------------- */
LOOP(x87)
	PROLOGUE
	movl $loop_data, %ebx
	fninit
	fld1
	fld1
	.globl x87_body
x87_body:
	fadd %st(1), %st(0)
	fmul %st(1), %st(0)
	fxch %st(1)
	fldl (RBX)
	fstpl 8(RBX)
	fsub %st(1), %st(0)
	decl %ecx
	.globl x87_br
x87_br:
	jnz x87_body
	.globl x87_end
x87_end:
	fstp %st(0)
	fstp %st(0)
	EPILOGUE
	ret

/* ---- sse: packed/scalar single/double arithmetic, a move, a load and a store ----------- */
LOOP(sse)
	PROLOGUE
	movl $loop_data, %ebx
	xorps %xmm0, %xmm0
	xorps %xmm1, %xmm1
	.globl sse_body
sse_body:
	addps %xmm1, %xmm0
	addpd %xmm1, %xmm2
	addss %xmm1, %xmm3
	addsd %xmm1, %xmm4
	mulps %xmm1, %xmm5
	movaps %xmm0, %xmm6
	movss (RBX), %xmm7
	movsd %xmm4, 16(RBX)
	decl %ecx
	.globl sse_br
sse_br:
	jnz sse_body
	.globl sse_end
sse_end:
	EPILOGUE
	ret

/* ---- mmx: 64-bit MMX and 128-bit integer SIMD, moves, a load and a store --------------- */
LOOP(mmx)
	PROLOGUE
	movl $loop_data, %ebx
	pxor %mm0, %mm0
	pxor %mm1, %mm1
	.globl mmx_body
mmx_body:
	paddd %mm1, %mm0
	psubw %mm1, %mm2
	paddd %xmm1, %xmm0
	pand %xmm1, %xmm2
	movq %mm0, %mm3
	movq (RBX), %mm4
	movdqa %xmm0, 32(RBX)
	decl %ecx
	.globl mmx_br
mmx_br:
	jnz mmx_body
	.globl mmx_end
mmx_end:
	emms
	EPILOGUE
	ret

/* ---- overcount: the instructions NetBurst's instr_retired counts twice (FLDCW, FLDENV,
 * FRSTOR, EMMS, MASKMOVQ, SFENCE, MFENCE, CVTPD2PI and CVTTPD2PI from memory), and the
 * register form of CVTTPD2PI, which it counts once.  The x87 images FLDENV and FRSTOR load
 * are saved before the loop (an empty stack); MASKMOVQ's mask is 0 (no byte stored).  No
 * access crosses a cache line: the FNSAVE image starts 6 bytes into a line, so that its
 * fourth 10-byte register starts the next line (the memory events stay 0). ------------- */
LOOP(overcount)
	PROLOGUE
	movl $loop_data, %ebx
	movl $loop_data + 256, %edi
	fninit
	fnstcw (RBX)
	fnstenv 32(RBX)
	fnsave 70(RBX)
	pxor %mm0, %mm0
	pxor %mm1, %mm1
	xorps %xmm0, %xmm0
	movaps %xmm0, 192(RBX)
	.globl overcount_body
overcount_body:
	fldcw (RBX)
	fldenv 32(RBX)
	frstor 70(RBX)
	maskmovq %mm1, %mm0
	emms
	sfence
	mfence
	cvtpd2pi 192(RBX), %mm2
	cvttpd2pi 192(RBX), %mm3
	cvttpd2pi %xmm0, %mm3
	decl %ecx
	.globl overcount_br
overcount_br:
	jnz overcount_body
	.globl overcount_end
overcount_end:
	emms
	EPILOGUE
	ret

/* ---- mem: loads and stores ------------------------------------------------------------- */
LOOP(mem)
	PROLOGUE
	movl $loop_data, %ebx
	xorl %eax, %eax
	.globl mem_body
mem_body:
	movl (RBX), %eax
	addl %eax, 4(RBX)
	movl %ecx, 8(RBX)
	incl 12(RBX)
	decl %ecx
	.globl mem_br
mem_br:
	jnz mem_body
	.globl mem_end
mem_end:
	EPILOGUE
	ret

/* ---- bench: the benchmark's CPU-bound mix (ALU, memory, a data-dependent branch, one
 * scalar SSE add) -- 17 instructions per iteration, 18 when the INC runs (about half) */
LOOP(bench)
	PROLOGUE
	movl $loop_data, %ebx
	movl $0x12345678, %eax
	xorl %edx, %edx
	xorl %esi, %esi
	xorps %xmm0, %xmm0
	xorps %xmm1, %xmm1
	.globl bench_body
bench_body:
	movl %eax, %edi
	shll $13, %edi
	xorl %edi, %eax
	movl %eax, %edi
	shrl $17, %edi
	xorl %edi, %eax
	addl %eax, %edx
	movl %eax, %edi
	andl $0x3c, %edi
	addl %edx, 64(RBX, RDI_IDX)
	testl $0x100, %eax
	jz 1f
	incl %esi
1:	movl 64(RBX, RDI_IDX), %edi
	addl %edi, %esi
	addss %xmm1, %xmm0
	decl %ecx
	.globl bench_br
bench_br:
	jnz bench_body
	.globl bench_end
bench_end:
	movl %esi, %eax
	EPILOGUE
	ret

/* ---- selfnmi / selfnmi_ram: the bench loop with one 32-bit store every 571 iterations
 * (about 10,000 instructions).  selfnmi stores NMI | self to the local APIC's ICR, so plain
 * QEMU delivers an NMI (the benchmark's floor for an interrupt at the (d) rate: QEMU's own
 * NMI delivery, the handler and IRET); selfnmi_ram stores the same value to loop_data, so
 * the two differ only in where that one store goes. */
#define SELFNMI_PERIOD 571
#define SELFNMI_ICR 0x40400 /* ICR low: delivery mode NMI (100b << 8), shorthand self */
#define SELFNMI_LOOP(name, dest) \
LOOP(name) \
	PROLOGUE; \
	movl $loop_data, %ebx; \
	movl $0x12345678, %eax; \
	xorl %edx, %edx; \
	xorl %esi, %esi; \
	movl $SELFNMI_PERIOD, %ebp; \
	xorps %xmm0, %xmm0; \
	xorps %xmm1, %xmm1; \
name##_body: \
	movl %eax, %edi; \
	shll $13, %edi; \
	xorl %edi, %eax; \
	movl %eax, %edi; \
	shrl $17, %edi; \
	xorl %edi, %eax; \
	addl %eax, %edx; \
	movl %eax, %edi; \
	andl $0x3c, %edi; \
	addl %edx, 64(RBX, RDI_IDX); \
	testl $0x100, %eax; \
	jz 1f; \
	incl %esi; \
1:	movl 64(RBX, RDI_IDX), %edi; \
	addl %edi, %esi; \
	addss %xmm1, %xmm0; \
	decl %ebp; \
	jnz 2f; \
	movl $SELFNMI_PERIOD, %ebp; \
	movl $dest, %edi; \
	movl $SELFNMI_ICR, (RDI_IDX); \
2:	decl %ecx; \
	jnz name##_body; \
	movl %esi, %eax; \
	EPILOGUE; \
	ret

SELFNMI_LOOP(selfnmi, 0xFEE00300)
SELFNMI_LOOP(selfnmi_ram, loop_data + 128)

/* ---- rdpmc: two served RDPMCs per iteration (CPL 0 only: CR4.PCE is clear) --------------
 * The first starts a block (the loop branch goes there): the bridge skips it with set_pc;
 * the second is inside its block: the bridge's #UD round trip, whose exception and its
 * delivery must leave that block's execution complete.  Both retire (I3: PMU instructions). */
LOOP(rdpmc)
	PROLOGUE
	movl %ecx, %esi
	movl $12, %ecx
	.globl rdpmc_body
rdpmc_body:
	rdpmc
	nop
	rdpmc
	decl %esi
	.globl rdpmc_br
rdpmc_br:
	jnz rdpmc_body
	.globl rdpmc_end
rdpmc_end:
	EPILOGUE
	ret

/* ---- rdmsr / wrmsr / rdmsr_other: one MSR access per iteration (MSR microbenchmark) ---- */
LOOP(rdmsr)
	PROLOGUE
	movl %ecx, %esi
	movl $0x300, %ecx
	.globl rdmsr_body
rdmsr_body:
	rdmsr
	decl %esi
	jnz rdmsr_body
	EPILOGUE
	ret

LOOP(wrmsr)
	PROLOGUE
	movl %ecx, %esi
	movl $0x300, %ecx
	xorl %eax, %eax
	xorl %edx, %edx
	.globl wrmsr_body
wrmsr_body:
	wrmsr
	decl %esi
	jnz wrmsr_body
	EPILOGUE
	ret

/* RDMSR of an MSR the PMU does not own (IA32_SYSENTER_CS, 174h): the plugin's C check only */
LOOP(rdmsr_other)
	PROLOGUE
	movl %ecx, %esi
	movl $0x174, %ecx
	.globl rdmsr_other_body
rdmsr_other_body:
	rdmsr
	decl %esi
	jnz rdmsr_other_body
	EPILOGUE
	ret

/* ---- split: loads and stores that cross a 64-byte line (memory_complete, load_port_replay,
 * store_port_replay, replay tagging's split metrics; docs/memory-model.md): a split load and
 * a split store, then a split load in the next clock (adjacent clocks with splits: their
 * pair matters to EDGE), a nop clock, then a split load in the clock before the branch's and
 * one in the branch's clock (the pair across the dynamic end) ------------------------------ */
LOOP(split)
	PROLOGUE
	movl $loop_data, %ebx
	.globl split_body
split_body:				/* (the first split load) */
	movl 62(RBX), %eax
	.globl split_st1
split_st1:
	movl %eax, 126(RBX)
	.globl split_ld3
split_ld3:
	movl 125(RBX), %edx
	nop
	nop
	.globl split_ld4
split_ld4:
	movl 253(RBX), %edx
	nop
	decl %ecx
	.globl split_ld2
split_ld2:
	movl 190(RBX), %esi
	.globl split_br
split_br:
	jnz split_body
	.globl split_end
split_end:
	EPILOGUE
	ret

	.balign 4096	/* the memory pattern loops: a page of their own (no loop crosses a page) */

/* ---- hotbuf: a 2 KB buffer (32 lines, one page) re-read every iteration, one load per
 * line: after the first pass it is in the L1 data cache and the DTLB, so an iteration has no
 * miss and no walk (docs/memory-model.md) ----------------------------------------------- */
LOOP(hotbuf)
	PROLOGUE
	movl $hot_buf, %ebx
	.globl hotbuf_body
hotbuf_body:
	.set off, 0
	.rept 32
	movl off(RBX), %eax
	.set off, off + 64
	.endr
	decl %ecx
	jnz hotbuf_body
	EPILOGUE
	ret

/* ---- pages: one load in each of 72 pages per iteration, more pages than the DTLB's 64
 * entries: with LRU every load finds its page evicted, a page walk each; the loads' lines
 * (page k, line k mod 64) fit in every part's L1, so nothing else misses ----------------- */
LOOP(pages)
	PROLOGUE
	movl $pages_buf, %ebx
	.globl pages_body
pages_body:
	.set off, 0
	.rept 72
	movl off(RBX), %eax
	.set off, off + 4096 + 64
	.endr
	decl %ecx
	jnz pages_body
	EPILOGUE
	ret

/* ---- smc: self-modifying code (machine_clear SMCLEAR): each iteration stores a new
 * immediate into smc_target's first instruction, in another 64-byte line, then calls it; the
 * store finds that line fetched by the previous iteration's call: one clear per iteration.
 * (QEMU translates smc_target again after every store.) -------------------------------- */
LOOP(smc)
	PROLOGUE
	movl $smc_target, %ebx
	.globl smc_body
smc_body:
	.globl smc_st
smc_st:
	movl %ecx, 1(RBX)
	call smc_target
	decl %ecx
	jnz smc_body
	EPILOGUE
	ret
	.balign 64
	.globl smc_target
smc_target:
	movl $0, %eax
	ret

/* ---- sbuf: loads against the store buffers (MOB_load_replay, memory_cancel): a 2-byte load
 * inside a 4-byte store from another start (UNALGN_ADDR), a 4-byte load over a 2-byte store
 * (PARTIAL_DATA), a load 64 KB away from a store (64K_CONF), a load of what a store of the
 * same size at the same address wrote (forwarded: nothing) ---------------------------- */
LOOP(sbuf)
	PROLOGUE
	movl $pages_buf, %ebx
	xorl %eax, %eax
	.globl sbuf_body
sbuf_body:
	movl %eax, 16(RBX)
	movw 18(RBX), %dx
	movw %ax, 64(RBX)
	movl 64(RBX), %edx
	movl %eax, 128(RBX)
	movl 0x10080(RBX), %edx
	movl %eax, 192(RBX)
	movl 192(RBX), %edx
	decl %ecx
	jnz sbuf_body
	EPILOGUE
	ret

/* ---- thrash: stores to 9 lines 256 KB apart, one set of L2 (and of L1) on every part, more
 * lines than its 8 ways: with LRU every store misses L2 (a read for ownership: a bus line
 * read) and replaces the modified sector 8 stores old (a write-back); then loads from 9 lines
 * of the next set (the next 128-byte sector), likewise: every load misses L2 (a line read)
 * and replaces a clean sector (no write-back) ----------------------------------------- */
LOOP(thrash)
	PROLOGUE
	movl $thrash_buf, %ebx
	xorl %eax, %eax
	.globl thrash_body
thrash_body:
	.set off, 0
	.rept 9
	movl %eax, off(RBX)
	.set off, off + 0x40000
	.endr
	.set off, 0x80
	.rept 9
	movl off(RBX), %edx
	.set off, off + 0x40000
	.endr
	decl %ecx
	jnz thrash_body
	EPILOGUE
	ret

/* ---- denorm: SSE instructions with floating-point inputs (SSE_input_assist), each reading
 * registers freshly loaded from denorm_data or denorm_data itself: some inputs denormal, some
 * normal; two with MXCSR.DAZ set (denormals read as zeros: no assist); and x87 loads of a
 * denormal single and double and a normal one (x87_assist PREA), stores of the denormal
 * single as a single and a double (POAU: the single only), and a double extended load and
 * store (none).  The Python side
 * (tests/test_events_memory.py) reads the inputs from the ELF and asks emulator/fp_assist.py
 * which executions request an assist. */
LOOP(denorm)
	PROLOGUE
	movl $denorm_data, %ebx
	movl $loop_data, %esi
	.globl denorm_body
denorm_body:
	movaps (RBX), %xmm0		/* singles: 1.0, a denormal, 2.0, 3.0 */
	movaps 16(RBX), %xmm1		/* singles: all normal */
	addps %xmm1, %xmm0		/* its destination holds a denormal */
	movaps 16(RBX), %xmm2
	mulps 16(RBX), %xmm2		/* normal inputs only */
	movsd 32(RBX), %xmm3		/* a normal double */
	addsd 40(RBX), %xmm3		/* a denormal double from memory */
	movss 16(RBX), %xmm4
	sqrtss 4(RBX), %xmm4		/* the denormal single from memory */
	cvtss2sd (RBX), %xmm5		/* 1.0 */
	ucomiss 16(RBX), %xmm1		/* normal, normal */
	movaps 48(RBX), %xmm6		/* doubles: 4.0, a denormal */
	maxpd %xmm6, %xmm6		/* two denormal inputs: one assist */
	ldmxcsr 64(RBX)			/* DAZ set */
	movaps (RBX), %xmm7
	addps %xmm7, %xmm7		/* denormal inputs read as zeros */
	movsd 32(RBX), %xmm3
	minsd 40(RBX), %xmm3		/* a denormal double from memory, read as 0 */
	ldmxcsr 68(RBX)			/* MXCSR's reset value */
	flds 4(RBX)			/* a denormal single */
	fsts (RSI)			/* stored again: a denormal single */
	fstl 8(RSI)			/* stored as a double: a normal one */
	fadds 16(RBX)			/* 1.0 */
	faddl 40(RBX)			/* a denormal double */
	fstp %st(0)
	fldt 72(RBX)			/* double extended 1 + 2^-63: no assist (its low 8 */
	fstpt 16(RSI)			/* bytes, read as a double, would be a denormal) */
	decl %ecx
	jnz denorm_body
	EPILOGUE
	ret

/* ---- tcsweep: the trace cache (BPU_fetch_request TCMISS): each iteration runs 9 blocks of
 * code 4 KB apart, so their lines are 64 lines apart: one set of the code-line record that
 * stands for the trace cache (512 lines, 8-way), more lines than its ways.  With LRU each
 * block's line was replaced since the previous iteration: 9 misses per iteration, on every
 * part (docs/memory-model.md).  Each block is in a page of its own (one ITLB look-up). */
	.balign 4096
LOOP(tcsweep)
	PROLOGUE
	.globl tcsweep_body
tcsweep_body:
	jmp tcsweep_1
	.irp k, 1, 2, 3, 4, 5, 6, 7
	.balign 4096
tcsweep_\k:
	nop
	jmp tcsweep_\k + 4096
	.endr
	.balign 4096
tcsweep_8:
	decl %ecx
	jnz tcsweep_body
	EPILOGUE
	ret

/* ---- empty: nothing (the benchmark's start-up-only run) -------------------------------- */
LOOP(empty)
	xorl %eax, %eax
	ret

	.section .rodata
	.balign 64
	.globl denorm_data
denorm_data:				/* denorm's inputs */
	.long 0x3f800000, 0x00000001, 0x40000000, 0x40400000	/* 1.0, 2^-149, 2.0, 3.0 */
	.long 0x3f800000, 0x3f800000, 0x3fc00000, 0x40800000	/* 1.0, 1.0, 1.5, 4.0 */
	.quad 0x3ff0000000000000, 0x000fffffffffffff		/* 1.0, the largest double denormal */
	.quad 0x4010000000000000, 0x0000000000000002		/* 4.0, 2^-1073 */
	.long 0x00001fc0, 0x00001f80				/* MXCSR: DAZ and the masks; reset */
	.quad 0x8000000000000001				/* 1 + 2^-63, double extended */
	.short 0x3fff

	.section .bss
	.balign 64
	.globl loop_data
loop_data:
	.skip 320
	.balign 64
	.globl hot_buf
hot_buf:				/* hotbuf */
	.skip 2048
	.balign 4096
	.globl pages_buf
pages_buf:				/* pages: 73 pages; sbuf */
	.skip 73 * 4096
	.balign 4096
	.globl thrash_buf
thrash_buf:				/* thrash: 9 + 9 lines 256 KB apart */
	.skip 8 * 0x40000 + 0x80 + 64

	.section .note.GNU-stack, "", @progbits
