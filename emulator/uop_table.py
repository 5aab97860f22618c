"""Pentium 4 uop counts per instruction, from Agner Fog's instruction tables.

Source
------
Agner Fog, "4. Instruction tables: Lists of instruction latencies, throughputs and
micro-operation breakdowns for Intel, AMD, and VIA CPUs", Technical University of Denmark,
last updated 2021-08-17, two sections:

* "Intel Pentium 4", pp. 349 (column explanations) and 350-358 (tables): "This list is
  measured for a Pentium 4, model 2", i.e. Northwood (CPUID family F, model 2).  First value
  of every pair below ("P4").
* "Intel Pentium 4 w. EM64T (Prescott)", pp. 359-369: a Prescott with EM64T (the section
  does not name the CPUID model).  Second value of every pair ("P4E").

Agner's columns used: "uops" (uops issued from the decoder and stored in the trace cache)
and "Microcode" (additional uops from the microcode ROM).  Every number here is the total of
one execution: uops + microcode.  Latency and throughput columns are not used.

How it was derived
------------------
From a coordinate-based extraction of the two sections (one JSON row per printed table row,
with the printed cells verbatim); rows that are visibly printed in the wrong column were read
with the corrected values (Prescott RDPMC, p. 363: its row is shifted one column left;
the conversion rows on pp. 357 / 368 whose note letter "a" is printed under "Instruction
set").  Each row was expanded by hand into the Capstone names it covers ("ADDPS/D ADDSS/D"
-> addps addpd addss addsd; Jcc, CMOVcc, SETcc, FCMOVcc -> every condition, including
Capstone's alias name fcmovnp (= fcmovnu, not produced by its decoder); "FADD(P)"
-> fadd (Capstone also names FADDP "fadd"), "FSUB(R)(P)" -> fsub fsubr fsubp fsubrp, ...).
CHOICES lists every judgement call; SIZE_VARIANTS every row that is not the value of its
key and whose count differs from it.

Conventions
-----------
* Key: (Capstone 5 instruction name, form), the name as ``insn_name()`` returns it
  (CS_MODE_64 or CS_MODE_32: pushfd, iretd, pushal in 32-bit code; pushfq, iretq, movabs
  in 64-bit code).  The form follows the instruction's explicit memory operand and its
  architectural direction, not Capstone's access flags (wrong for some instructions: fstp
  m64, fisttp, fnstcw, stmxcsr are marked read, frstor written, cmpxchg and lea read):
    "r"    no memory operand, or only an address (LEA, the long NOP 0F 1F);
    "ld"   a memory operand that is only read (ADD r,m; CMP m,r; PUSH m; FLD m; JMP m);
    "st"   a memory operand that is only written (MOV m,r; POP m; SETcc m; FSTP m);
    "rmw"  a memory operand read and written (ADD m,r; INC m; XCHG r,m; shifts of m).
  String instructions have two memory operands in Capstone: LODS, SCAS, CMPS are "ld",
  STOS is "st", MOVS (reads [rsi], writes [rdi]) is "rmw".  Implicit memory accesses
  (stack of PUSH/POP/CALL/RET/ENTER/LEAVE, XLATB, MASKMOVQ/MASKMOVDQU) do not make a form.
* Agner's "r,r/m" rows give both "r" and "ld"; "ld" adds 1 where the row carries note a
  ("Add 1 uop if source is a memory operand"), including conversion rows printed with
  register operands only (CVTSI2SS xmm,r32 with note a -> cvtsi2ss xmm,m32).
* Register-size and memory-size rows: the value is the 32-bit register / m32-m64 row
  (the default operand size in both 32- and 64-bit mode); r8, r16, r64, m16, m80 rows are
  in SIZE_VARIANTS.  FBLD/FBSTP have their own names.
* Several rows on one key (MOV r,r and MOV r,i; JMP near and JMP r; BT r,i and BT r,r; the
  MMX and XMM rows of PACK*/PUNPCK*/PADDQ/PEXTRW/PINSRW): the first row Agner prints is the
  value, except IMUL, whose "r"/"ld" values are the two-operand IMUL r32,r / r32,m32 rows
  (the one-operand MUL, IMUL rows are in SIZE_VARIANTS).  The others are listed in
  SIZE_VARIANTS when their count differs.
* None: Agner prints no value for that core: 64-bit-only names (movsxd, cdqe, cqo, movabs,
  jrcxz, iretq, pushfq, popfq, retfq, the ...q string names) and SSE3 (addsubps, haddps,
  lddqu, movddup, movshdup, fisttp, ...) and RDPMC on Northwood; ENTER on Prescott.
* Ranges use the midpoint of the total, rounded half up (CPUID on both cores; MUL m8/32
  and shifts of m on P4); "≈" values (FSIN, FCOS, FSINCOS, FPTAN) are used as printed.
  Both are listed in CHOICES.
* Not expressible per key (see Agner's notes): +1 uop for a SIB byte on memory operands of
  MOV m,r (note b); +1 when exactly one operand is AH/BH/CH/DH (note c); MOVSX to a
  register smaller than the mode's largest (note o, P4E); LEA with a 64-bit absolute operand
  (note p, P4E).
* Capstone 5 returns a wrong ``insn_name()`` for CMPccPS/PD/SS/SD with a predicate of 0-7
  (e.g. cmpeqps -> "cmppd", cmpless -> "cmpsb", cmpordsd -> "cmpxchg16b"); the keys
  here use cmpps/cmppd/cmpss/cmpsd, so the caller must map such instructions by opcode.
  ("cmpsd", "ld") is the SSE2 compare; the string CMPSD equals ("cmpsb", "ld").
* REP-prefixed string instructions are in REP_UOPS, not UOPS (uops = base + per_iteration
  x count).  PAGES gives Agner's page of every UOPS value.
"""
from __future__ import annotations

FORMS = ("r", "ld", "st", "rmw")

# (Capstone 5 name, form) -> (Northwood total uops, Prescott total uops)
UOPS: dict[tuple[str, str], tuple[int | None, int | None]] = {
    # ==========================================================================================
    # Integer instructions
    # ==========================================================================================
    # ---- Move (P4 p.350, P4E pp.359-361) ----
    # MOV r,r; r32,m; m,r  | P4E: MOV r,r; MOV r32/64,m; MOV m,r
    ("mov", "r"): (1, 1), ("mov", "ld"): (1, 1), ("mov", "st"): (1, 1),
    # MOVNTI m,r32
    ("movnti", "st"): (2, 2),
    # MOVZX r,r; r,m
    ("movzx", "r"): (1, 1), ("movzx", "ld"): (1, 1),
    # MOVSX r,r; r,m  | P4E: MOVSX r32/64,r8/16; MOVSX r,m
    ("movsx", "r"): (1, 1), ("movsx", "ld"): (2, 2),
    # CMOVcc r,r/m
    ("cmovo", "r"): (3, 3), ("cmovo", "ld"): (4, 4),
    ("cmovno", "r"): (3, 3), ("cmovno", "ld"): (4, 4),
    ("cmovb", "r"): (3, 3), ("cmovb", "ld"): (4, 4),
    ("cmovae", "r"): (3, 3), ("cmovae", "ld"): (4, 4),
    ("cmove", "r"): (3, 3), ("cmove", "ld"): (4, 4),
    ("cmovne", "r"): (3, 3), ("cmovne", "ld"): (4, 4),
    ("cmovbe", "r"): (3, 3), ("cmovbe", "ld"): (4, 4),
    ("cmova", "r"): (3, 3), ("cmova", "ld"): (4, 4),
    ("cmovs", "r"): (3, 3), ("cmovs", "ld"): (4, 4),
    ("cmovns", "r"): (3, 3), ("cmovns", "ld"): (4, 4),
    ("cmovp", "r"): (3, 3), ("cmovp", "ld"): (4, 4),
    ("cmovnp", "r"): (3, 3), ("cmovnp", "ld"): (4, 4),
    ("cmovl", "r"): (3, 3), ("cmovl", "ld"): (4, 4),
    ("cmovge", "r"): (3, 3), ("cmovge", "ld"): (4, 4),
    ("cmovle", "r"): (3, 3), ("cmovle", "ld"): (4, 4),
    ("cmovg", "r"): (3, 3), ("cmovg", "ld"): (4, 4),
    # XCHG r,r; r,m
    ("xchg", "r"): (3, 3), ("xchg", "rmw"): (12, 8),
    # XLAT
    ("xlatb", "r"): (4, 4),
    # PUSH r; m
    ("push", "r"): (2, 2), ("push", "ld"): (3, 3),
    # PUSHF(D)  | P4E: PUSHF(D/Q)
    ("pushf", "r"): (8, 4), ("pushfd", "r"): (8, 4), ("pushfq", "r"): (None, 4),
    # PUSHA(D)
    ("pushal", "r"): (14, 10), ("pushaw", "r"): (14, 10),
    # POP r; m
    ("pop", "r"): (2, 2), ("pop", "st"): (12, 8),
    # POPF(D)  | P4E: POPF(D/Q)
    ("popf", "r"): (12, 9), ("popfd", "r"): (12, 9), ("popfq", "r"): (None, 9),
    # POPA(D)
    ("popal", "r"): (20, 18), ("popaw", "r"): (20, 18),
    # LEA r,[r+r/i]
    ("lea", "r"): (1, 1),
    # LAHF
    ("lahf", "r"): (1, 1),
    # SAHF
    ("sahf", "r"): (1, 1),
    # SALC
    ("salc", "r"): (3, 2),
    # LDS, LES, ... r,m
    ("lds", "ld"): (11, 12), ("les", "ld"): (11, 12), ("lfs", "ld"): (11, 12),
    ("lgs", "ld"): (11, 12), ("lss", "ld"): (11, 12),
    # BSWAP r
    ("bswap", "r"): (3, 1),
    # IN, OUT r,r/i
    ("in", "r"): (72, 53), ("out", "r"): (72, 53),
    # PREFETCHNTA m
    ("prefetchnta", "ld"): (6, 1),
    # PREFETCHT0/1/2 m
    ("prefetcht0", "ld"): (6, 1), ("prefetcht1", "ld"): (6, 1), ("prefetcht2", "ld"): (6, 1),
    # SFENCE
    ("sfence", "r"): (6, 3),
    # LFENCE
    ("lfence", "r"): (6, 3),
    # MFENCE
    ("mfence", "r"): (6, 5),
    # MOV r64,i64; r,mabs; mabs,r  (P4E only)
    ("movabs", "r"): (None, 2), ("movabs", "ld"): (None, 3), ("movabs", "st"): (None, 3),
    # MOVSXD r64,r32  (P4E only)
    ("movsxd", "r"): (None, 1), ("movsxd", "ld"): (None, 2),
    # ---- Arithmetic (P4 p.351, P4E pp.361-362) ----
    # ADD, SUB r,r; r,m; m,r
    ("add", "r"): (1, 1), ("add", "ld"): (2, 2), ("add", "rmw"): (3, 3),
    ("sub", "r"): (1, 1), ("sub", "ld"): (2, 2), ("sub", "rmw"): (3, 3),
    # ADC, SBB r,r; r,m; m,r  | P4E: ADC, SBB r,r/i; ADC, SBB r,m; ADC, SBB m,r
    ("adc", "r"): (8, 3), ("adc", "ld"): (10, 7), ("adc", "rmw"): (11, 8),
    ("sbb", "r"): (8, 3), ("sbb", "ld"): (10, 7), ("sbb", "rmw"): (11, 8),
    # CMP r,r; r,m
    ("cmp", "r"): (1, 1), ("cmp", "ld"): (2, 2),
    # INC, DEC r; m
    ("inc", "r"): (2, 2), ("inc", "rmw"): (4, 4), ("dec", "r"): (2, 2), ("dec", "rmw"): (4, 4),
    # NEG r; m
    ("neg", "r"): (1, 1), ("neg", "rmw"): (3, 3),
    # AAA, AAS
    ("aaa", "r"): (31, 11), ("aas", "r"): (31, 11),
    # DAA, DAS
    ("daa", "r"): (61, 17), ("das", "r"): (61, 17),
    # AAD
    ("aad", "r"): (14, 7),
    # AAM
    ("aam", "r"): (26, 19),
    # MUL, IMUL r8/32; m8/32  | P4E: MUL, IMUL r32; MUL, IMUL m32  [range or ≈: see CHOICES]
    ("mul", "r"): (10, 3), ("mul", "ld"): (12, 3),
    # IMUL r32,r; r32,m32  | P4E: IMUL r32,r32; IMUL r32,m32
    ("imul", "r"): (4, 1), ("imul", "ld"): (4, 2),
    # DIV r32/m32
    ("div", "r"): (25, 22), ("div", "ld"): (25, 23),
    # IDIV r32/m32
    ("idiv", "r"): (24, 20), ("idiv", "ld"): (25, 21),
    # CBW
    ("cbw", "r"): (2, 2),
    # CWD, CDQ  | P4E: CWD; CDQ
    ("cwd", "r"): (2, 2), ("cdq", "r"): (2, 1),
    # CWDE
    ("cwde", "r"): (1, 2),
    # CQO  (P4E only)
    ("cqo", "r"): (None, 1),
    # CDQE  (P4E only)
    ("cdqe", "r"): (None, 1),
    # ---- Logic (P4 pp.351-352, P4E pp.362-363) ----
    # AND, OR, XOR r,r; r,m; m,r
    ("and", "r"): (1, 1), ("and", "ld"): (2, 2), ("and", "rmw"): (3, 3),
    ("or", "r"): (1, 1), ("or", "ld"): (2, 2), ("or", "rmw"): (3, 3),
    ("xor", "r"): (1, 1), ("xor", "ld"): (2, 2), ("xor", "rmw"): (3, 3),
    # TEST r,r; r,m
    ("test", "r"): (1, 1), ("test", "ld"): (2, 2),
    # NOT r; m
    ("not", "r"): (1, 1), ("not", "rmw"): (4, 3),
    # SHL, SHR, SAR r,i  | P4E: SHL r,i; SHR, SAR r8/16/32,i
    ("shl", "r"): (1, 1), ("sal", "r"): (1, 1), ("shr", "r"): (1, 1), ("sar", "r"): (1, 1),
    # ROL, ROR r,i  | P4E: ROL, ROR r8/16/32,i
    ("rol", "r"): (1, 1), ("ror", "r"): (1, 1),
    # RCL, RCR r,1; m,1  | P4E: RCL, RCR r,1; RCL, RCR m8/16/32,1
    ("rcl", "r"): (1, 1), ("rcl", "rmw"): (11, 7), ("rcr", "r"): (1, 1), ("rcr", "rmw"): (11, 7),
    # SHL,SHR,SAR,ROL, ROR m,i/CL  | P4E: SHL, SHR, SAR m8/16/32,i; ROL. ROR m8/16/32,i  [range or
    # ≈: see CHOICES]
    ("shl", "rmw"): (12, 9), ("sal", "rmw"): (12, 9), ("shr", "rmw"): (12, 9),
    ("sar", "rmw"): (12, 9), ("rol", "rmw"): (12, 9), ("ror", "rmw"): (12, 9),
    # SHLD, SHRD r,r,i/CL; m,r,i/CL  | P4E: SHLD, SHRD r8/16/32,r,i; SHLD, SHRD m,r,i
    ("shld", "r"): (18, 3), ("shld", "rmw"): (22, 11),
    ("shrd", "r"): (18, 3), ("shrd", "rmw"): (22, 11),
    # BT r,i; m,i
    ("bt", "r"): (3, 1), ("bt", "ld"): (4, 3),
    # BTR, BTS, BTC r,i; m,i
    ("btr", "r"): (3, 1), ("btr", "rmw"): (11, 9), ("bts", "r"): (3, 1), ("bts", "rmw"): (11, 9),
    ("btc", "r"): (3, 1), ("btc", "rmw"): (11, 9),
    # BSF, BSR r,r; r,m  | P4E: BSF, BSR r,r/m
    ("bsf", "r"): (2, 2), ("bsf", "ld"): (3, 2), ("bsr", "r"): (2, 2), ("bsr", "ld"): (3, 2),
    # SETcc r; m
    ("seto", "r"): (3, 2), ("seto", "st"): (4, 3), ("setno", "r"): (3, 2), ("setno", "st"): (4, 3),
    ("setb", "r"): (3, 2), ("setb", "st"): (4, 3), ("setae", "r"): (3, 2), ("setae", "st"): (4, 3),
    ("sete", "r"): (3, 2), ("sete", "st"): (4, 3), ("setne", "r"): (3, 2), ("setne", "st"): (4, 3),
    ("setbe", "r"): (3, 2), ("setbe", "st"): (4, 3), ("seta", "r"): (3, 2), ("seta", "st"): (4, 3),
    ("sets", "r"): (3, 2), ("sets", "st"): (4, 3), ("setns", "r"): (3, 2), ("setns", "st"): (4, 3),
    ("setp", "r"): (3, 2), ("setp", "st"): (4, 3), ("setnp", "r"): (3, 2), ("setnp", "st"): (4, 3),
    ("setl", "r"): (3, 2), ("setl", "st"): (4, 3), ("setge", "r"): (3, 2), ("setge", "st"): (4, 3),
    ("setle", "r"): (3, 2), ("setle", "st"): (4, 3), ("setg", "r"): (3, 2), ("setg", "st"): (4, 3),
    # CLC, STC
    ("clc", "r"): (3, 2), ("stc", "r"): (3, 2),
    # CMC
    ("cmc", "r"): (3, 3),
    # CLD  | P4E: CLD, STD
    ("cld", "r"): (11, 9),
    # STD  | P4E: CLD, STD
    ("std", "r"): (9, 9),
    # CLI
    ("cli", "r"): (9, 6),
    # STI
    ("sti", "r"): (16, 12),
    # ---- Control transfer (P4 p.352, P4E p.363) ----
    # JMP short/near; far; m(near)
    ("jmp", "r"): (1, 1), ("jmp", "ld"): (3, 3), ("ljmp", "r"): (32, 27),
    # Jcc short/near
    ("jo", "r"): (1, 1), ("jno", "r"): (1, 1), ("jb", "r"): (1, 1), ("jae", "r"): (1, 1),
    ("je", "r"): (1, 1), ("jne", "r"): (1, 1), ("jbe", "r"): (1, 1), ("ja", "r"): (1, 1),
    ("js", "r"): (1, 1), ("jns", "r"): (1, 1), ("jp", "r"): (1, 1), ("jnp", "r"): (1, 1),
    ("jl", "r"): (1, 1), ("jge", "r"): (1, 1), ("jle", "r"): (1, 1), ("jg", "r"): (1, 1),
    # J(E)CXZ short
    ("jcxz", "r"): (8, 4), ("jecxz", "r"): (8, 4), ("jrcxz", "r"): (None, 4),
    # LOOP short
    ("loop", "r"): (8, 4),
    # CALL near; far; m(near)
    ("call", "r"): (3, 3), ("call", "ld"): (8, 4), ("lcall", "r"): (38, 32),
    # RETN
    ("ret", "r"): (4, 4),
    # RETF
    ("retf", "r"): (37, 31), ("retfq", "r"): (None, 31),
    # IRET
    ("iret", "r"): (52, 50), ("iretd", "r"): (52, 50), ("iretq", "r"): (None, 50),
    # ENTER i,0  | P4E: no row
    ("enter", "r"): (16, None),
    # LEAVE
    ("leave", "r"): (4, 4),
    # BOUND m
    ("bound", "ld"): (18, 13),
    # INTO
    ("into", "r"): (9, 5),
    # INT i
    ("int", "r"): (88, 69),
    # ---- String (P4 p.353, P4E pp.360-362) ----
    # LODS
    ("lodsb", "ld"): (7, 4), ("lodsw", "ld"): (7, 4), ("lodsd", "ld"): (7, 4),
    ("lodsq", "ld"): (None, 4),
    # STOS
    ("stosb", "st"): (6, 3), ("stosw", "st"): (6, 3), ("stosd", "st"): (6, 3),
    ("stosq", "st"): (None, 3),
    # MOVS
    ("movsb", "rmw"): (8, 5), ("movsw", "rmw"): (8, 5), ("movsd", "rmw"): (8, 5),
    ("movsq", "rmw"): (None, 5),
    # SCAS
    ("scasb", "ld"): (7, 4), ("scasw", "ld"): (7, 4), ("scasd", "ld"): (7, 4),
    ("scasq", "ld"): (None, 4),
    # CMPS
    ("cmpsb", "ld"): (9, 6), ("cmpsw", "ld"): (9, 6), ("cmpsq", "ld"): (None, 6),
    # ---- Other (P4 p.353, P4E p.363) ----
    # NOP (90)
    ("nop", "r"): (1, 1),
    # PAUSE
    ("pause", "r"): (6, 3),
    # CPUID  [range or ≈: see CHOICES]
    ("cpuid", "r"): (64, 71),
    # RDTSC
    ("rdtsc", "r"): (11, 13),
    # RDPMC (bit 31 = 1)  (P4E only)
    ("rdpmc", "r"): (None, 38),
    # ==========================================================================================
    # Floating point x87 instructions
    # ==========================================================================================
    # ---- Move (P4 pp.353-354, P4E p.364) ----
    # FLD r; m32/64
    ("fld", "r"): (1, 1), ("fld", "ld"): (1, 1),
    # FBLD m80
    ("fbld", "ld"): (78, 77),
    # FST(P) r; m32/64
    ("fst", "r"): (1, 1), ("fst", "st"): (2, 2), ("fstp", "r"): (1, 1), ("fstp", "st"): (2, 2),
    # FBSTP m80
    ("fbstp", "st"): (314, 314),
    # FXCH r
    ("fxch", "r"): (1, 1),
    # FILD m32/64
    ("fild", "ld"): (2, 2),
    # FIST m32/64  | P4E: FIST(P) m
    ("fist", "st"): (2, 3),
    # FISTP m  | P4E: FIST(P) m
    ("fistp", "st"): (3, 3),
    # FLDZ
    ("fldz", "r"): (1, 1),
    # FLD1
    ("fld1", "r"): (2, 2),
    # FCMOVcc st0,r
    ("fcmovb", "r"): (4, 4), ("fcmove", "r"): (4, 4), ("fcmovbe", "r"): (4, 4),
    ("fcmovu", "r"): (4, 4), ("fcmovnb", "r"): (4, 4), ("fcmovne", "r"): (4, 4),
    ("fcmovnbe", "r"): (4, 4), ("fcmovnu", "r"): (4, 4), ("fcmovnp", "r"): (4, 4),
    # FFREE r
    ("ffree", "r"): (3, 3),
    # FINCSTP, FDECSTP
    ("fincstp", "r"): (1, 1), ("fdecstp", "r"): (1, 1),
    # FNSTSW AX; m16
    ("fnstsw", "r"): (4, 4), ("fnstsw", "st"): (8, 5),
    # FNSTCW m16
    ("fnstcw", "st"): (8, 4),
    # FLDCW m16
    ("fldcw", "ld"): (11, 9),
    # FISTTP m  (P4E only)
    ("fisttp", "st"): (None, 3),
    # ---- Arithmetic (P4 p.354, P4E pp.364-365) ----
    # FADD(P),FSUB(R)(P) r
    ("fadd", "r"): (1, 1), ("fsub", "r"): (1, 1), ("fsubr", "r"): (1, 1), ("fsubp", "r"): (1, 1),
    ("fsubrp", "r"): (1, 1),
    # FADD,FSUB(R) m
    ("fadd", "ld"): (2, 2), ("fsub", "ld"): (2, 2), ("fsubr", "ld"): (2, 2),
    # FIADD,FISUB(R) m32
    ("fiadd", "ld"): (3, 3), ("fisub", "ld"): (3, 3), ("fisubr", "ld"): (3, 3),
    # FMUL(P) r
    ("fmul", "r"): (1, 1), ("fmulp", "r"): (1, 1),
    # FMUL m
    ("fmul", "ld"): (2, 2),
    # FIMUL m32
    ("fimul", "ld"): (3, 3),
    # FDIV(R)(P) r
    ("fdiv", "r"): (1, 1), ("fdivr", "r"): (1, 1), ("fdivp", "r"): (1, 1), ("fdivrp", "r"): (1, 1),
    # FDIV(R) m
    ("fdiv", "ld"): (2, 2), ("fdivr", "ld"): (2, 2),
    # FIDIV(R) m32
    ("fidiv", "ld"): (3, 6), ("fidivr", "ld"): (3, 6),
    # FABS
    ("fabs", "r"): (1, 1),
    # FCHS
    ("fchs", "r"): (1, 1),
    # FCOM(P), FUCOM(P) r
    ("fcom", "r"): (1, 1), ("fcomp", "r"): (1, 1), ("fucom", "r"): (1, 1), ("fucomp", "r"): (1, 1),
    # FCOM(P) m
    ("fcom", "ld"): (2, 2), ("fcomp", "ld"): (2, 2),
    # FCOMPP, FUCOMPP
    ("fcompp", "r"): (2, 2), ("fucompp", "r"): (2, 2),
    # FCOMI(P) r
    ("fcomi", "r"): (3, 3), ("fcompi", "r"): (3, 3),
    # FICOM(P) m32
    ("ficom", "ld"): (3, 3), ("ficomp", "ld"): (3, 3),
    # FTST
    ("ftst", "r"): (1, 1),
    # FXAM
    ("fxam", "r"): (1, 1),
    # FRNDINT
    ("frndint", "r"): (18, 17),
    # FPREM
    ("fprem", "r"): (90, 94),
    # FPREM1
    ("fprem1", "r"): (90, 101),
    # ---- Math (P4 p.354, P4E p.365) ----
    # FSQRT
    ("fsqrt", "r"): (1, 1),
    # FLDPI, etc.
    ("fldpi", "r"): (2, 2), ("fldl2e", "r"): (2, 2), ("fldl2t", "r"): (2, 2),
    ("fldlg2", "r"): (2, 2), ("fldln2", "r"): (2, 2),
    # FSIN  | P4E: FSIN, FCOS  [range or ≈: see CHOICES]
    ("fsin", "r"): (156, 103),
    # FCOS  | P4E: FSIN, FCOS  [range or ≈: see CHOICES]
    ("fcos", "r"): (181, 103),
    # FSINCOS  [range or ≈: see CHOICES]
    ("fsincos", "r"): (185, 155),
    # FPTAN  [range or ≈: see CHOICES]
    ("fptan", "r"): (166, 178),
    # FPATAN
    ("fpatan", "r"): (95, 101),
    # FSCALE
    ("fscale", "r"): (27, 28),
    # FXTRACT
    ("fxtract", "r"): (18, 20),
    # F2XM1
    ("f2xm1", "r"): (48, 193),
    # FYL2X
    ("fyl2x", "r"): (63, 66),
    # FYL2XP1
    ("fyl2xp1", "r"): (145, 61),
    # ---- Other (P4 p.355, P4E p.365) ----
    # FNOP
    ("fnop", "r"): (1, 1),
    # (F)WAIT
    ("wait", "r"): (2, 2),
    # FNCLEX
    ("fnclex", "r"): (8, 5),
    # FNINIT
    ("fninit", "r"): (35, 31),
    # FNSAVE
    ("fnsave", "st"): (178, 183),
    # FRSTOR
    ("frstor", "ld"): (100, 98),
    # FXSAVE
    ("fxsave", "st"): (73, 123),
    # FXRSTOR
    ("fxrstor", "ld"): (98, 120),
    # ==========================================================================================
    # Integer MMX and XMM instructions
    # ==========================================================================================
    # ---- Move (P4 pp.355-356, P4E pp.366-367) ----
    # MOVD r32, mm; mm,m32; m32, r
    ("movd", "r"): (2, 2), ("movd", "ld"): (1, 1), ("movd", "st"): (2, 2),
    # MOVQ mm,mm; r,m64; m64,r
    ("movq", "r"): (1, 1), ("movq", "ld"): (1, 1), ("movq", "st"): (2, 2),
    # MOVDQA xmm,xmm; xmm,m; m,xmm
    ("movdqa", "r"): (1, 1), ("movdqa", "ld"): (1, 1), ("movdqa", "st"): (2, 2),
    # MOVDQU xmm,m; m,xmm
    ("movdqu", "ld"): (4, 4), ("movdqu", "st"): (10, 6),
    # MOVDQ2Q mm,xmm
    ("movdq2q", "r"): (3, 3),
    # MOVQ2DQ xmm,mm
    ("movq2dq", "r"): (2, 2),
    # MOVNTQ m,mm
    ("movntq", "st"): (3, 3),
    # MOVNTDQ m,xmm
    ("movntdq", "st"): (2, 2),
    # PACKSSWB/DW PACKUSWB mm,r/m
    ("packsswb", "r"): (1, 1), ("packsswb", "ld"): (2, 2),
    ("packssdw", "r"): (1, 1), ("packssdw", "ld"): (2, 2),
    ("packuswb", "r"): (1, 1), ("packuswb", "ld"): (2, 2),
    # PUNPCKH/LBW/WD/DQ mm,r/m
    ("punpckhbw", "r"): (1, 1), ("punpckhbw", "ld"): (2, 2),
    ("punpckhwd", "r"): (1, 1), ("punpckhwd", "ld"): (2, 2),
    ("punpckhdq", "r"): (1, 1), ("punpckhdq", "ld"): (2, 2),
    ("punpcklbw", "r"): (1, 1), ("punpcklbw", "ld"): (2, 2),
    ("punpcklwd", "r"): (1, 1), ("punpcklwd", "ld"): (2, 2),
    ("punpckldq", "r"): (1, 1), ("punpckldq", "ld"): (2, 2),
    # PUNPCKHBW/WD/DQ/QDQ xmm,r/m
    ("punpckhqdq", "r"): (1, 1), ("punpckhqdq", "ld"): (2, 2),
    # PUNPCKLBW/WD/DQ/QDQ xmm,r/m
    ("punpcklqdq", "r"): (1, 1), ("punpcklqdq", "ld"): (2, 2),
    # PSHUFD xmm,xmm,i
    ("pshufd", "r"): (1, 1),
    # PSHUFL/HW xmm,xmm,i
    ("pshuflw", "r"): (1, 1), ("pshufhw", "r"): (1, 1),
    # PSHUFW mm,mm,i
    ("pshufw", "r"): (1, 1),
    # MASKMOVQ mm,mm
    ("maskmovq", "r"): (8, 5),
    # MASKMOVDQU xmm,xmm
    ("maskmovdqu", "r"): (10, 7),
    # PMOVMSKB r32,r
    ("pmovmskb", "r"): (2, 2),
    # PEXTRW r32,mm,i
    ("pextrw", "r"): (3, 2),
    # PINSRW mm,r32,i  | P4E: PINSRW r,r32,i
    ("pinsrw", "r"): (2, 2),
    # LDDQU xmm,m  (P4E only)
    ("lddqu", "ld"): (None, 4),
    # MOVDDUP xmm,xmm  (P4E only)
    ("movddup", "r"): (None, 1),
    # MOVSHDUP MOVSLDUP xmm,xmm  (P4E only)
    ("movshdup", "r"): (None, 1), ("movsldup", "r"): (None, 1),
    # ---- Arithmetic (P4 p.356, P4E p.367) ----
    # PADDB/W/D PADD(U)SB/W r,r/m
    ("paddb", "r"): (1, 1), ("paddb", "ld"): (2, 2),
    ("paddw", "r"): (1, 1), ("paddw", "ld"): (2, 2),
    ("paddd", "r"): (1, 1), ("paddd", "ld"): (2, 2),
    ("paddsb", "r"): (1, 1), ("paddsb", "ld"): (2, 2),
    ("paddsw", "r"): (1, 1), ("paddsw", "ld"): (2, 2),
    ("paddusb", "r"): (1, 1), ("paddusb", "ld"): (2, 2),
    ("paddusw", "r"): (1, 1), ("paddusw", "ld"): (2, 2),
    # PSUBB/W/D PSUB(U)SB/W r,r/m
    ("psubb", "r"): (1, 1), ("psubb", "ld"): (2, 2),
    ("psubw", "r"): (1, 1), ("psubw", "ld"): (2, 2),
    ("psubd", "r"): (1, 1), ("psubd", "ld"): (2, 2),
    ("psubsb", "r"): (1, 1), ("psubsb", "ld"): (2, 2),
    ("psubsw", "r"): (1, 1), ("psubsw", "ld"): (2, 2),
    ("psubusb", "r"): (1, 1), ("psubusb", "ld"): (2, 2),
    ("psubusw", "r"): (1, 1), ("psubusw", "ld"): (2, 2),
    # PADDQ, PSUBQ mm,r/m
    ("paddq", "r"): (1, 1), ("paddq", "ld"): (2, 2),
    ("psubq", "r"): (1, 1), ("psubq", "ld"): (2, 2),
    # PCMPEQB/W/D PCMPGTB/W/D r,r/m
    ("pcmpeqb", "r"): (1, 1), ("pcmpeqb", "ld"): (2, 2),
    ("pcmpeqw", "r"): (1, 1), ("pcmpeqw", "ld"): (2, 2),
    ("pcmpeqd", "r"): (1, 1), ("pcmpeqd", "ld"): (2, 2),
    ("pcmpgtb", "r"): (1, 1), ("pcmpgtb", "ld"): (2, 2),
    ("pcmpgtw", "r"): (1, 1), ("pcmpgtw", "ld"): (2, 2),
    ("pcmpgtd", "r"): (1, 1), ("pcmpgtd", "ld"): (2, 2),
    # PMULLW PMULHW r,r/m
    ("pmullw", "r"): (1, 1), ("pmullw", "ld"): (2, 2),
    ("pmulhw", "r"): (1, 1), ("pmulhw", "ld"): (2, 2),
    # PMULHUW r,r/m
    ("pmulhuw", "r"): (1, 1), ("pmulhuw", "ld"): (2, 2),
    # PMADDWD r,r/m
    ("pmaddwd", "r"): (1, 1), ("pmaddwd", "ld"): (2, 2),
    # PMULUDQ r,r/m
    ("pmuludq", "r"): (1, 1), ("pmuludq", "ld"): (2, 2),
    # PAVGB/W r,r/m
    ("pavgb", "r"): (1, 1), ("pavgb", "ld"): (2, 2),
    ("pavgw", "r"): (1, 1), ("pavgw", "ld"): (2, 2),
    # PMIN/MAXUB r,r/m
    ("pminub", "r"): (1, 1), ("pminub", "ld"): (2, 2),
    ("pmaxub", "r"): (1, 1), ("pmaxub", "ld"): (2, 2),
    # PMIN/MAXSW r,r/m
    ("pminsw", "r"): (1, 1), ("pminsw", "ld"): (2, 2),
    ("pmaxsw", "r"): (1, 1), ("pmaxsw", "ld"): (2, 2),
    # PSADBW r,r/m
    ("psadbw", "r"): (1, 1), ("psadbw", "ld"): (2, 2),
    # ---- Logic (P4 p.356, P4E p.367) ----
    # PAND, PANDN r,r/m
    ("pand", "r"): (1, 1), ("pand", "ld"): (2, 2), ("pandn", "r"): (1, 1), ("pandn", "ld"): (2, 2),
    # POR, PXOR r,r/m
    ("por", "r"): (1, 1), ("por", "ld"): (2, 2), ("pxor", "r"): (1, 1), ("pxor", "ld"): (2, 2),
    # PSLL/RLW/D/Q, PSRAW/D r,i/r/m
    ("psllw", "r"): (1, 1), ("psllw", "ld"): (2, 2),
    ("pslld", "r"): (1, 1), ("pslld", "ld"): (2, 2),
    ("psllq", "r"): (1, 1), ("psllq", "ld"): (2, 2),
    ("psrlw", "r"): (1, 1), ("psrlw", "ld"): (2, 2),
    ("psrld", "r"): (1, 1), ("psrld", "ld"): (2, 2),
    ("psrlq", "r"): (1, 1), ("psrlq", "ld"): (2, 2),
    ("psraw", "r"): (1, 1), ("psraw", "ld"): (2, 2),
    ("psrad", "r"): (1, 1), ("psrad", "ld"): (2, 2),
    # PSLLDQ, PSRLDQ xmm,i
    ("pslldq", "r"): (1, 1), ("psrldq", "r"): (1, 1),
    # ---- Other (P4 p.356, P4E p.367) ----
    # EMMS
    ("emms", "r"): (15, 20),
    # ==========================================================================================
    # Floating point XMM instructions
    # ==========================================================================================
    # ---- Move (P4 p.357, P4E pp.367-368) ----
    # MOVAPS/D r,r; r,m; m,r
    ("movaps", "r"): (1, 1), ("movaps", "ld"): (1, 1), ("movaps", "st"): (2, 2),
    ("movapd", "r"): (1, 1), ("movapd", "ld"): (1, 1), ("movapd", "st"): (2, 2),
    # MOVUPS/D r,r; r,m; m,r
    ("movups", "r"): (1, 1), ("movups", "ld"): (4, 4), ("movups", "st"): (10, 6),
    ("movupd", "r"): (1, 1), ("movupd", "ld"): (4, 4), ("movupd", "st"): (10, 6),
    # MOVSS r,r
    ("movss", "r"): (1, 1),
    # MOVSD r,r
    ("movsd", "r"): (1, 1),
    # MOVSS, MOVSD r,m; m,r
    ("movss", "ld"): (1, 1), ("movss", "st"): (2, 2),
    ("movsd", "ld"): (1, 1), ("movsd", "st"): (2, 2),
    # MOVHLPS r,r
    ("movhlps", "r"): (1, 1),
    # MOVLHPS r,r
    ("movlhps", "r"): (1, 1),
    # MOVHPS/D, MOVLPS/D r,m; m,r
    ("movhps", "ld"): (3, 2), ("movhps", "st"): (2, 2),
    ("movhpd", "ld"): (3, 2), ("movhpd", "st"): (2, 2),
    ("movlps", "ld"): (3, 2), ("movlps", "st"): (2, 2),
    ("movlpd", "ld"): (3, 2), ("movlpd", "st"): (2, 2),
    # MOVNTPS/D m,r
    ("movntps", "st"): (2, 2), ("movntpd", "st"): (2, 2),
    # MOVMSKPS/D r32,r
    ("movmskps", "r"): (2, 2), ("movmskpd", "r"): (2, 2),
    # SHUFPS/D r,r/m,i
    ("shufps", "r"): (1, 1), ("shufps", "ld"): (1, 1),
    ("shufpd", "r"): (1, 1), ("shufpd", "ld"): (1, 1),
    # UNPCKHPS/D r,r/m
    ("unpckhps", "r"): (1, 2), ("unpckhps", "ld"): (1, 2),
    ("unpckhpd", "r"): (1, 2), ("unpckhpd", "ld"): (1, 2),
    # UNPCKLPS/D r,r/m
    ("unpcklps", "r"): (1, 1), ("unpcklps", "ld"): (1, 1),
    ("unpcklpd", "r"): (1, 1), ("unpcklpd", "ld"): (1, 1),
    # ---- Conversion (P4 p.357, P4E p.368) ----
    # CVTPS2PD r,r/m
    ("cvtps2pd", "r"): (4, 1), ("cvtps2pd", "ld"): (5, 2),
    # CVTPD2PS r,r/m
    ("cvtpd2ps", "r"): (2, 2), ("cvtpd2ps", "ld"): (3, 3),
    # CVTSD2SS r,r/m
    ("cvtsd2ss", "r"): (4, 3), ("cvtsd2ss", "ld"): (5, 4),
    # CVTSS2SD r,r/m
    ("cvtss2sd", "r"): (4, 2), ("cvtss2sd", "ld"): (5, 3),
    # CVTDQ2PS r,r/m
    ("cvtdq2ps", "r"): (1, 1), ("cvtdq2ps", "ld"): (2, 2),
    # CVTDQ2PD r,r/m
    ("cvtdq2pd", "r"): (3, 3), ("cvtdq2pd", "ld"): (4, 4),
    # CVT(T)PS2DQ r,r/m
    ("cvtps2dq", "r"): (1, 1), ("cvtps2dq", "ld"): (2, 2),
    ("cvttps2dq", "r"): (1, 1), ("cvttps2dq", "ld"): (2, 2),
    # CVT(T)PD2DQ r,r/m
    ("cvtpd2dq", "r"): (2, 2), ("cvtpd2dq", "ld"): (3, 3),
    ("cvttpd2dq", "r"): (2, 2), ("cvttpd2dq", "ld"): (3, 3),
    # CVTPI2PS xmm,mm
    ("cvtpi2ps", "r"): (4, 4), ("cvtpi2ps", "ld"): (5, 5),
    # CVTPI2PD xmm,mm
    ("cvtpi2pd", "r"): (4, 4), ("cvtpi2pd", "ld"): (5, 5),
    # CVT(T)PS2PI mm,xmm
    ("cvtps2pi", "r"): (3, 3), ("cvtps2pi", "ld"): (4, 4),
    ("cvttps2pi", "r"): (3, 3), ("cvttps2pi", "ld"): (4, 4),
    # CVT(T)PD2PI mm,xmm
    ("cvtpd2pi", "r"): (3, 4), ("cvtpd2pi", "ld"): (4, 5),
    ("cvttpd2pi", "r"): (3, 4), ("cvttpd2pi", "ld"): (4, 5),
    # CVTSI2SS xmm,r32
    ("cvtsi2ss", "r"): (3, 3), ("cvtsi2ss", "ld"): (4, 4),
    # CVTSI2SD xmm,r32
    ("cvtsi2sd", "r"): (4, 4), ("cvtsi2sd", "ld"): (5, 5),
    # CVT(T)SD2SI r32,xmm
    ("cvtsd2si", "r"): (2, 2), ("cvtsd2si", "ld"): (3, 3),
    ("cvttsd2si", "r"): (2, 2), ("cvttsd2si", "ld"): (3, 3),
    # CVT(T)SS2SI r32,xmm
    ("cvtss2si", "r"): (2, 2), ("cvtss2si", "ld"): (3, 3),
    ("cvttss2si", "r"): (2, 2), ("cvttss2si", "ld"): (3, 3),
    # ---- Arithmetic (P4 pp.357-358, P4E p.368) ----
    # ADDPS/D ADDSS/D r,r/m
    ("addps", "r"): (1, 1), ("addps", "ld"): (2, 2),
    ("addpd", "r"): (1, 1), ("addpd", "ld"): (2, 2),
    ("addss", "r"): (1, 1), ("addss", "ld"): (2, 2),
    ("addsd", "r"): (1, 1), ("addsd", "ld"): (2, 2),
    # SUBPS/D SUBSS/D r,r/m
    ("subps", "r"): (1, 1), ("subps", "ld"): (2, 2),
    ("subpd", "r"): (1, 1), ("subpd", "ld"): (2, 2),
    ("subss", "r"): (1, 1), ("subss", "ld"): (2, 2),
    ("subsd", "r"): (1, 1), ("subsd", "ld"): (2, 2),
    # MULPS/D MULSS/D r,r/m
    ("mulps", "r"): (1, 1), ("mulps", "ld"): (2, 2),
    ("mulpd", "r"): (1, 1), ("mulpd", "ld"): (2, 2),
    ("mulss", "r"): (1, 1), ("mulss", "ld"): (2, 2),
    ("mulsd", "r"): (1, 1), ("mulsd", "ld"): (2, 2),
    # DIVSS r,r/m
    ("divss", "r"): (1, 1), ("divss", "ld"): (2, 2),
    # DIVPS r,r/m
    ("divps", "r"): (1, 1), ("divps", "ld"): (2, 2),
    # DIVSD r,r/m
    ("divsd", "r"): (1, 1), ("divsd", "ld"): (2, 2),
    # DIVPD r,r/m
    ("divpd", "r"): (1, 1), ("divpd", "ld"): (2, 2),
    # RCPPS RCPSS r,r/m
    ("rcpps", "r"): (2, 2), ("rcpps", "ld"): (3, 3),
    ("rcpss", "r"): (2, 2), ("rcpss", "ld"): (3, 3),
    # MAXPS/D MAXSS/D MINPS/D MINSS/D r,r/m
    ("maxps", "r"): (1, 1), ("maxps", "ld"): (2, 2),
    ("maxpd", "r"): (1, 1), ("maxpd", "ld"): (2, 2),
    ("maxss", "r"): (1, 1), ("maxss", "ld"): (2, 2),
    ("maxsd", "r"): (1, 1), ("maxsd", "ld"): (2, 2),
    ("minps", "r"): (1, 1), ("minps", "ld"): (2, 2),
    ("minpd", "r"): (1, 1), ("minpd", "ld"): (2, 2),
    ("minss", "r"): (1, 1), ("minss", "ld"): (2, 2),
    ("minsd", "r"): (1, 1), ("minsd", "ld"): (2, 2),
    # CMPccPS/D CMPccSS/D r,r/m
    ("cmpps", "r"): (1, 1), ("cmpps", "ld"): (2, 2),
    ("cmppd", "r"): (1, 1), ("cmppd", "ld"): (2, 2),
    ("cmpss", "r"): (1, 1), ("cmpss", "ld"): (2, 2),
    ("cmpsd", "r"): (1, 1), ("cmpsd", "ld"): (2, 2),
    # COMISS/D UCOMISS/D r,r/m
    ("comiss", "r"): (2, 2), ("comiss", "ld"): (3, 3),
    ("comisd", "r"): (2, 2), ("comisd", "ld"): (3, 3),
    ("ucomiss", "r"): (2, 2), ("ucomiss", "ld"): (3, 3),
    ("ucomisd", "r"): (2, 2), ("ucomisd", "ld"): (3, 3),
    # ADDSUBPS/D r,r/m  (P4E only)
    ("addsubps", "r"): (None, 1), ("addsubps", "ld"): (None, 2),
    ("addsubpd", "r"): (None, 1), ("addsubpd", "ld"): (None, 2),
    # HADDPS/D HSUBPS/D r,r/m  (P4E only)
    ("haddps", "r"): (None, 3), ("haddps", "ld"): (None, 4),
    ("haddpd", "r"): (None, 3), ("haddpd", "ld"): (None, 4),
    ("hsubps", "r"): (None, 3), ("hsubps", "ld"): (None, 4),
    ("hsubpd", "r"): (None, 3), ("hsubpd", "ld"): (None, 4),
    # ---- Logic (P4 p.358, P4E p.369) ----
    # ANDPS/D ANDNPS/D ORPS/D XORPS/D r,r/m
    ("andps", "r"): (1, 1), ("andps", "ld"): (2, 2),
    ("andpd", "r"): (1, 1), ("andpd", "ld"): (2, 2),
    ("andnps", "r"): (1, 1), ("andnps", "ld"): (2, 2),
    ("andnpd", "r"): (1, 1), ("andnpd", "ld"): (2, 2),
    ("orps", "r"): (1, 1), ("orps", "ld"): (2, 2), ("orpd", "r"): (1, 1), ("orpd", "ld"): (2, 2),
    ("xorps", "r"): (1, 1), ("xorps", "ld"): (2, 2),
    ("xorpd", "r"): (1, 1), ("xorpd", "ld"): (2, 2),
    # ---- Math (P4 p.358, P4E p.369) ----
    # SQRTSS r,r/m
    ("sqrtss", "r"): (1, 1), ("sqrtss", "ld"): (2, 2),
    # SQRTPS r,r/m
    ("sqrtps", "r"): (1, 1), ("sqrtps", "ld"): (2, 2),
    # SQRTSD r,r/m
    ("sqrtsd", "r"): (1, 1), ("sqrtsd", "ld"): (2, 2),
    # SQRTPD r,r/m
    ("sqrtpd", "r"): (1, 1), ("sqrtpd", "ld"): (2, 2),
    # RSQRTSS r,r/m
    ("rsqrtss", "r"): (2, 2), ("rsqrtss", "ld"): (3, 3),
    # RSQRTPS r,r/m
    ("rsqrtps", "r"): (2, 2), ("rsqrtps", "ld"): (3, 3),
    # ---- Other (P4 p.358, P4E p.369) ----
    # LDMXCSR m
    ("ldmxcsr", "ld"): (12, 13),
    # STMXCSR m
    ("stmxcsr", "st"): (8, 3),
}

# REP-prefixed string instructions: key -> (P4 (base, per_iteration), P4E (base, ...)), uops
# of one execution = base + per_iteration * count.  base = Agner's "uops" + the constant
# part of "Microcode"; per_iteration = the factor of n in "Microcode".  The REP rows do not
# say REP or REPE/REPNE: the same values apply to both prefixes on SCAS/CMPS.
REP_UOPS: dict[str, tuple[tuple[float, float] | None, tuple[float, float] | None]] = {
    # P4 p.353 "REP LODS": uops 4, microcode "5n"
    # P4E p.360 "REP LODS": uops 1, microcode "5n"
    "lods": ((4, 5), (1, 5)),
    # P4 p.353 "REP STOS": uops 4, microcode "2n+3"
    # P4E p.360 "REP STOS": uops 1, microcode "2.5n"
    "stos": ((7, 2), (1, 2.5)),
    # P4 p.353 "REP SCAS": uops 4, microcode "≈ 40+6n" (approximate)
    # P4E p.362 "REP SCAS": uops 1, microcode "≈ 54+6n" (approximate)
    "scas": ((44, 6), (55, 6)),
    # P4 p.353 "REP CMPS": uops 4, microcode "≈ 50+8n" (approximate)
    # P4E p.362 "REP CMPS": uops 1, microcode "≈ 81+8n" (approximate)
    "cmps": ((54, 8), (82, 8)),
    # P4 p.353 "REP MOVS": uops 4, microcode "≈163+1.1n". Approximate and ambiguous: the text
    # "≈163+1.1n" is wider than its cell and starts in the Microcode column (read as microcode here;
    # it may be a clock count).  P4 has one row for every size: "movs" and movsb/movsw/movsd carry
    # it.
    "movs": ((167, 1.1), None),
    # P4E p.360 "REP MOVSB": uops 9, microcode "≈.3n". Approximate (≈).
    "movsb": ((167, 1.1), (9, 0.3)),
    # P4E p.360 "REP MOVSW": uops 1, microcode "≈.5-1.1n". Approximate (≈). Per-iteration range
    # .5-1.1 -> midpoint 0.8.
    "movsw": ((167, 1.1), (1, 0.8)),
    # P4E p.360 "REP MOVSD": uops 1, microcode "≈1.1n". Approximate (≈).
    "movsd": ((167, 1.1), (1, 1.1)),
    # P4E p.360 "REP MOVSQ": uops 1, microcode "≈1.1n". Approximate (≈).
    "movsq": (None, (1, 1.1)),
}

# Rows that are not the value of their UOPS key and whose count differs from it (rows equal
# to the key's value are left out): (names, form, Agner operands / condition, P4 total,
# P4E total, (P4 page, P4E page)); None = no such row for that core; "49+24n" = a count
# that depends on an operand.
SIZE_VARIANTS: list[tuple[tuple[str, ...], str, str, int | str | None, int | str | None,
                         tuple[int | None, int | None]]] = [
    (("mov",), "r", "r,sr", 6, 3, (350, 360)),
    (("mov",), "r", "sr,r/m (r)", 8, 9, (350, 360)),
    (("mov",), "ld", "r8/16,m", 2, 2, (350, 360)),
    (("mov",), "ld", "sr,r/m (m)", 9, 10, (350, 360)),
    (("mov",), "st", "m,i", 3, 2, (350, 360)),
    (("mov",), "st", "m64,i32", None, 2, (None, 360)),
    (("movzx",), "r", "r16,r8", None, 2, (None, 360)),
    (("movsx",), "r", "r16,r8 (r)", None, 2, (None, 360)),
    (("movsx",), "ld", "r16,r8 (m)", None, 3, (None, 360)),
    (("push",), "r", "sr", 8, 4, (350, 360)),
    (("pop",), "r", "sr", 9, 9, (350, 360)),
    (("lea",), "r", "r,[r+r+i]", 2, 2, (350, 360)),
    (("lea",), "r", "r,[r*i]", 3, 3, (350, 360)),
    (("lea",), "r", "r,[r+r*i]", 2, 2, (350, 360)),
    (("lea",), "r", "r,[r+r*i+i]", 3, 3, (350, 360)),
    (("adc", "sbb"), "r", "r,i", 3, None, (351, None)),
    (("mul",), "r", "r8", 10, 1, (351, 361)),
    (("mul",), "r", "r16", 11, 4, (351, 361)),
    (("mul",), "r", "r64", None, 6, (None, 361)),
    (("mul",), "ld", "m8", 12, 2, (351, 361)),
    (("mul",), "ld", "m16", 14, 7, (351, 361)),
    (("mul",), "ld", "m64", None, 8, (None, 361)),
    (("imul",), "r", "one-operand r8", 10, 1, (351, 361)),
    (("imul",), "r", "one-operand r32", 10, 3, (351, 361)),
    (("imul",), "r", "one-operand r16", 11, 4, (351, 361)),
    (("imul",), "r", "r16,r16", 9, 1, (351, 361)),
    (("imul",), "r", "r16,r16,i", 9, 2, (351, 361)),
    (("imul",), "r", "one-operand r64", None, 6, (None, 361)),
    (("imul",), "ld", "one-operand m8", 12, 2, (351, 361)),
    (("imul",), "ld", "one-operand m32", 12, 3, (351, 361)),
    (("imul",), "ld", "one-operand m16", 14, 7, (351, 361)),
    (("imul",), "ld", "r16,m16", 11, 2, (351, 361)),
    (("imul",), "ld", "r,m,i", 11, 3, (351, 361)),
    (("imul",), "ld", "one-operand m64", None, 8, (None, 361)),
    (("div",), "r", "r8/m8 (r)", 24, 21, (351, 361)),
    (("div",), "r", "r16/m16 (r)", 22, 20, (351, 361)),
    (("div",), "r", "r64/m64 (r)", None, 32, (None, 361)),
    (("div",), "ld", "r8/m8 (m)", 25, 22, (351, 361)),
    (("div",), "ld", "r16/m16 (m)", 23, 21, (351, 361)),
    (("div",), "ld", "r64/m64 (m)", None, 33, (None, 361)),
    (("idiv",), "r", "r8/m8 (r)", 28, 22, (351, 361)),
    (("idiv",), "r", "r16/m16 (r)", 26, 20, (351, 361)),
    (("idiv",), "r", "r64/m64 (r)", None, 59, (None, 361)),
    (("idiv",), "ld", "r8/m8 (m)", 29, 23, (351, 361)),
    (("idiv",), "ld", "r16/m16 (m)", 27, 21, (351, 361)),
    (("idiv",), "ld", "r64/m64 (m)", None, 60, (None, 361)),
    (("shl", "sal", "shr", "sar", "rol", "ror"), "r", "r,CL", 2, 2, (351, 362)),
    (("shr", "sar", "rol", "ror"), "r", "r64,CL", None, 2, (None, 362)),
    (("rcl", "rcr"), "r", "r,i", 19, 13, (352, 362)),
    (("rcl", "rcr"), "r", "r,CL", 19, 12, (352, 362)),
    (("rcl", "rcr"), "rmw", "m,CL", 22, 15, (352, 362)),
    (("rcl", "rcr"), "rmw", "m,i", 22, 16, (352, 362)),
    (("shl", "sal", "shr", "sar", "rol", "ror"), "rmw", "m,CL", 12, 8, (352, 362)),
    (("shld", "shrd"), "r", "r,r,CL", 18, 4, (352, 362)),
    (("shld",), "r", "r64,r64,i", None, 9, (None, 362)),
    (("shld",), "r", "r64,r64,CL", None, 9, (None, 362)),
    (("shld", "shrd"), "rmw", "m,r,CL", 22, 10, (352, 362)),
    (("shrd",), "r", "r64,r64,i", None, 10, (None, 362)),
    (("shrd",), "r", "r64,r64,CL", None, 11, (None, 362)),
    (("bt", "btr", "bts", "btc"), "r", "r,r", 2, 2, (352, 362)),
    (("bt",), "ld", "m,r", 16, 9, (352, 362)),
    (("btr", "bts", "btc"), "rmw", "m,r", 19, 12, (352, 363)),
    (("jmp",), "r", "r (indirect)", 3, 3, (352, 363)),
    (("jmp",), "ld", "m(far) (FF /5)", 35, 30, (352, 363)),
    (("call",), "r", "r (indirect)", 8, 4, (352, 363)),
    (("call",), "ld", "m(far) (FF /3)", 42, 34, (352, 363)),
    (("retf",), "r", "i", 37, 32, (352, 363)),
    (("retfq",), "r", "i", None, 32, (None, 363)),
    (("enter",), "r", "i,n (nesting level n > 0)", "49+24n", None, (352, None)),
    (("rdpmc",), "r", "ECX bit 31 = 0 (full-width read)", None, 158, (None, 363)),
    (("fld",), "ld", "m80", 7, 6, (353, 364)),
    (("fstp",), "st", "m80", 11, 9, (353, 364)),
    (("fild",), "ld", "m16", 6, 5, (353, 364)),
    (("fist",), "st", "m16", 3, None, (353, None)),
    (("fnstsw",), "r", "FSTSW AX = 9B DF E0 (Capstone: wait + fnstsw)", 6, 6, (354, 364)),
    (("fiadd", "fisub", "fisubr"), "ld", "m16", 7, 6, (354, 364)),
    (("fimul", "fidiv", "fidivr"), "ld", "m16", 7, 6, (354, 365)),
    (("ficom", "ficomp"), "ld", "m16", 8, 6, (354, 365)),
    (("movd",), "r", "mm,r32", 2, 1, (355, 366)),
    (("movd",), "r", "r32,xmm", 2, 1, (355, 366)),
    (("cmpsd",), "ld", "string CMPSD (A7)", 9, 6, (353, 362)),
]

# Judgement calls: (UOPS key(s) or topic, Agner page(s), what was done).
CHOICES: list[tuple[str, str, str]] = [
    ("mul ld", "P4 p.351",
     "MUL, IMUL m8/32: uops 4 + microcode \"7-8\" (midpoint) = 11.5 -> 12 (rounded half up); "
     "the same total is in this row's SIZE_VARIANTS entries"),
    ("shl/sal/shr/sar/rol/ror rmw", "P4 p.352",
     "SHL,SHR,SAR,ROL, ROR m,i/CL: uops 4 + microcode \"7-8\" (midpoint) = 11.5 -> 12 (rounded "
     "half up)"),
    ("cpuid r", "P4 p.353",
     "CPUID: uops 4 + microcode \"39-81\" (midpoint) = 64"),
    ("fsin r", "P4 p.354",
     "FSIN: uops 6 + microcode \"≈150\" used as 156 (approximate)"),
    ("fcos r", "P4 p.354",
     "FCOS: uops 6 + microcode \"≈175\" used as 181 (approximate)"),
    ("fsincos r", "P4 p.354",
     "FSINCOS: uops 7 + microcode \"≈178\" used as 185 (approximate)"),
    ("fptan r", "P4 p.354",
     "FPTAN: uops 6 + microcode \"≈160\" used as 166 (approximate)"),
    ("cpuid r", "P4E p.363",
     "CPUID: uops 1 + microcode \"49-90\" (midpoint) = 70.5 -> 71 (rounded half up)"),
    ("fsin/fcos r", "P4E p.365",
     "FSIN, FCOS: uops 3 + microcode \"≈100\" used as 103 (approximate)"),
    ("fsincos r", "P4E p.365",
     "FSINCOS: uops 5 + microcode \"≈150\" used as 155 (approximate)"),
    ("fptan r", "P4E p.365",
     "FPTAN: uops 8 + microcode \"≈170\" used as 178 (approximate)"),
    ("div ld", "P4 p.351",
     "DIV r32/m32 printed without note a: \"ld\" = \"r\" as printed (DIV r8/m8, r16/m16 and IDIV "
     "r32/m32 carry note a; P4E DIV r32/m32 too)"),
    ("shufps/shufpd ld", "P4 p.357",
     "SHUFPS/D r,r/m,i printed without note a: \"ld\" = \"r\" as printed"),
    ("unpckhps/unpckhpd ld", "P4 p.357",
     "UNPCKHPS/D r,r/m printed without note a: \"ld\" = \"r\" as printed"),
    ("unpcklps/unpcklpd ld", "P4 p.357",
     "UNPCKLPS/D r,r/m printed without note a: \"ld\" = \"r\" as printed"),
    ("bsf/bsr ld", "P4E p.363",
     "BSF, BSR r,r/m printed without note a: \"ld\" = \"r\" as printed"),
    ("shufps/shufpd ld", "P4E p.368",
     "SHUFPS/D r,r/m,i printed without note a: \"ld\" = \"r\" as printed"),
    ("unpckhps/unpckhpd ld", "P4E p.368",
     "UNPCKHPS/D r,r/m printed without note a: \"ld\" = \"r\" as printed"),
    ("unpcklps/unpcklpd ld", "P4E p.368",
     "UNPCKLPS/D r,r/m printed without note a: \"ld\" = \"r\" as printed"),
    ("rdpmc r", "P4E p.363",
     "RDPMC rows printed one column left: read as likely intended, uops 1 + microcode 37 = "
     "38 (ECX bit 31 = 1, listed first, the value) and 4 + 154 = 158 (bit 31 = 0, "
     "SIZE_VARIANTS)"),
    ("conversions r/ld", "P4 p.357, P4E p.368",
     "CVTPD2PS, CVTDQ2PD, CVT(T)PD2DQ, CVTPI2PD, CVT(T)PS2PI, CVT(T)PD2PI, CVTSI2SS, "
     "CVTSI2SD: note a printed under Instruction set (one column left); used, so \"ld\" = \"r\" "
     "+ 1"),
    ("conversions ld", "P4 p.357, P4E p.368",
     "CVTPI2PS xmm,mm, CVT(T)PS2PI mm,xmm, CVT(T)PD2PI, CVTSI2SS/SD xmm,r32, CVT(T)SD2SI and "
     "CVT(T)SS2SI r32,xmm: printed with register operands but note a; read as r,r/m"),
    ("imul r/ld", "P4 p.351, P4E p.361",
     "Capstone names the one-operand and the two/three-operand IMUL alike; the value is the "
     "two-operand IMUL r32,r / r32,m32 row, one-operand rows are in SIZE_VARIANTS"),
    ("operand size", "P4E pp.360-362",
     "Where Prescott has separate r32 and r64 rows (MUL, IMUL, DIV, IDIV, SHR/SAR, ROL/ROR, "
     "SHLD/SHRD), the value is the 32-bit row; r64 rows are in SIZE_VARIANTS"),
    ("first row wins", "P4 pp.350-356, P4E pp.359-367",
     "Several rows on one key: the first printed is the value (MOV r,r over r,i/r,sr; PUSH r "
     "over i/sr; JMP/CALL near over r; BT/BTx r,i over r,r and m,i over m,r; RCL/RCR r,1 "
     "over r,i/r,CL; SHL r,i over r,CL; MOVD r32,mm over mm,r32/r32,xmm/xmm,r32; mm over xmm "
     "rows)"),
    ("lea r", "P4 p.350, P4E p.360",
     "LEA r,[r+r/i] (1 uop) is the value; P4E's LEA r,[m] (first printed, also 1) and the "
     "scaled/three-part forms (2-3 uops) are in SIZE_VARIANTS"),
    ("cmpsd ld", "P4 pp.353/358, P4E pp.362/368",
     "(\"cmpsd\", \"ld\") is both the string CMPSD and SSE2 CMPSD xmm,m64: the SSE2 compare is "
     "the value; the string CMPSD (= cmpsb/cmpsw) is in SIZE_VARIANTS"),
    ("movs* rmw", "P4 p.353, P4E p.360",
     "MOVS reads [rsi] and writes [rdi]: form \"rmw\"; keeps it apart from SSE2 movsd r/ld/st"),
    ("64-bit names", "P4E pp.359-363",
     "jrcxz from J(E)CXZ (same opcode E3), iretq from IRET, retfq from RETF, pushfq/popfq "
     "from PUSHF(D/Q)/POPF(D/Q), lodsq/stosq/movsq/scasq/cmpsq from LODS...CMPS, movabs from "
     "MOV r64,i64 / r,mabs / mabs,r; all None on P4 (Northwood has no 64-bit mode)"),
    ("fnstsw r", "P4 p.354, P4E p.364",
     "FSTSW AX (9B DF E0) is decoded by Capstone as wait + fnstsw ax; (F)WAIT 2 + FNSTSW AX "
     "4 = Agner's FSTSW AX 6 on both cores, so no separate key"),
    ("fist/fistp st", "P4 pp.353-354",
     "P4 FIST m32/64 (2) is fist's value (FIST m16 = 3 in SIZE_VARIANTS); FISTP m (3, all "
     "sizes) is fistp's; P4E FIST(P) m (3) is both"),
    ("x87 m80", "P4 p.353, P4E p.364",
     "FLD m80 and FSTP m80 share the names fld/fstp: in SIZE_VARIANTS; fbld/fbstp own keys"),
    ("fldpi r", "P4 p.354, P4E p.365",
     "\"FLDPI, etc.\" -> fldpi fldl2e fldl2t fldlg2 fldln2 (FLDZ and FLD1 have own rows)"),
    ("movddup/movshdup r", "P4E pp.366/368",
     "Prescott prints MOVDDUP and MOVSHDUP/MOVSLDUP twice (integer and FP tables, both 1): "
     "the first is the page cited"),
    ("pinsrw r", "P4E p.367",
     "PINSRW r,r32,i covers the mm and the xmm form"),
    ("ret/retf r", "P4 p.352, P4E p.363",
     "RETN i and RETF i (same form \"r\" as without i) are in SIZE_VARIANTS where they differ"),
    ("enter r", "P4 p.352",
     "ENTER i,0 (16) is the value; ENTER i,n = 4 + 45+24n in SIZE_VARIANTS; no Prescott row"),
    ("not mapped", "P4 pp.350-355, P4E pp.359-365",
     "No Agner row, so no key (not guessed): loope/loopne, int3, int1, fucomi/fucompi, "
     "ffreep, cmpxchg, cmpxchg8b, xadd, ins/outs, sysenter/syscall, rdmsr/wrmsr, hlt, "
     "fldenv, fnstenv, fxsave64/fxrstor64, memory forms of "
     "pshufd/pshufw/pinsrw/pextrw/movddup"),
    ("monitor/mwait", "P4E p.363",
     "MONITOR and MWAIT rows carry no counts: no keys"),
]

# Agner page of each UOPS value: (P4 page, P4E page); None where the value is None.
PAGES: dict[tuple[str, str], tuple[int | None, int | None]] = {
    ("mov", "r"): (350, 359), ("mov", "ld"): (350, 360), ("mov", "st"): (350, 360),
    ("movnti", "st"): (350, 360), ("movzx", "r"): (350, 360), ("movzx", "ld"): (350, 360),
    ("movsx", "r"): (350, 360), ("movsx", "ld"): (350, 360), ("cmovo", "r"): (350, 360),
    ("cmovo", "ld"): (350, 360), ("cmovno", "r"): (350, 360), ("cmovno", "ld"): (350, 360),
    ("cmovb", "r"): (350, 360), ("cmovb", "ld"): (350, 360), ("cmovae", "r"): (350, 360),
    ("cmovae", "ld"): (350, 360), ("cmove", "r"): (350, 360), ("cmove", "ld"): (350, 360),
    ("cmovne", "r"): (350, 360), ("cmovne", "ld"): (350, 360), ("cmovbe", "r"): (350, 360),
    ("cmovbe", "ld"): (350, 360), ("cmova", "r"): (350, 360), ("cmova", "ld"): (350, 360),
    ("cmovs", "r"): (350, 360), ("cmovs", "ld"): (350, 360), ("cmovns", "r"): (350, 360),
    ("cmovns", "ld"): (350, 360), ("cmovp", "r"): (350, 360), ("cmovp", "ld"): (350, 360),
    ("cmovnp", "r"): (350, 360), ("cmovnp", "ld"): (350, 360), ("cmovl", "r"): (350, 360),
    ("cmovl", "ld"): (350, 360), ("cmovge", "r"): (350, 360), ("cmovge", "ld"): (350, 360),
    ("cmovle", "r"): (350, 360), ("cmovle", "ld"): (350, 360), ("cmovg", "r"): (350, 360),
    ("cmovg", "ld"): (350, 360), ("xchg", "r"): (350, 360), ("xchg", "rmw"): (350, 360),
    ("xlatb", "r"): (350, 360), ("push", "r"): (350, 360), ("push", "ld"): (350, 360),
    ("pushf", "r"): (350, 360), ("pushfd", "r"): (350, 360), ("pushfq", "r"): (None, 360),
    ("pushal", "r"): (350, 360), ("pushaw", "r"): (350, 360), ("pop", "r"): (350, 360),
    ("pop", "st"): (350, 360), ("popf", "r"): (350, 360), ("popfd", "r"): (350, 360),
    ("popfq", "r"): (None, 360), ("popal", "r"): (350, 360), ("popaw", "r"): (350, 360),
    ("lea", "r"): (350, 360), ("lahf", "r"): (350, 360), ("sahf", "r"): (350, 360),
    ("salc", "r"): (350, 360), ("lds", "ld"): (350, 360), ("les", "ld"): (350, 360),
    ("lfs", "ld"): (350, 360), ("lgs", "ld"): (350, 360), ("lss", "ld"): (350, 360),
    ("bswap", "r"): (350, 360), ("in", "r"): (350, 360), ("out", "r"): (350, 360),
    ("prefetchnta", "ld"): (350, 361), ("prefetcht0", "ld"): (350, 361),
    ("prefetcht1", "ld"): (350, 361), ("prefetcht2", "ld"): (350, 361), ("sfence", "r"): (350, 361),
    ("lfence", "r"): (350, 361), ("mfence", "r"): (350, 361), ("movabs", "r"): (None, 359),
    ("movabs", "ld"): (None, 360), ("movabs", "st"): (None, 360), ("movsxd", "r"): (None, 360),
    ("movsxd", "ld"): (None, 360), ("add", "r"): (351, 361), ("add", "ld"): (351, 361),
    ("add", "rmw"): (351, 361), ("sub", "r"): (351, 361), ("sub", "ld"): (351, 361),
    ("sub", "rmw"): (351, 361), ("adc", "r"): (351, 361), ("adc", "ld"): (351, 361),
    ("adc", "rmw"): (351, 361), ("sbb", "r"): (351, 361), ("sbb", "ld"): (351, 361),
    ("sbb", "rmw"): (351, 361), ("cmp", "r"): (351, 361), ("cmp", "ld"): (351, 361),
    ("inc", "r"): (351, 361), ("inc", "rmw"): (351, 361), ("dec", "r"): (351, 361),
    ("dec", "rmw"): (351, 361), ("neg", "r"): (351, 361), ("neg", "rmw"): (351, 361),
    ("aaa", "r"): (351, 361), ("aas", "r"): (351, 361), ("daa", "r"): (351, 361),
    ("das", "r"): (351, 361), ("aad", "r"): (351, 361), ("aam", "r"): (351, 361),
    ("mul", "r"): (351, 361), ("mul", "ld"): (351, 361), ("imul", "r"): (351, 361),
    ("imul", "ld"): (351, 361), ("div", "r"): (351, 361), ("div", "ld"): (351, 361),
    ("idiv", "r"): (351, 361), ("idiv", "ld"): (351, 361), ("cbw", "r"): (351, 361),
    ("cwd", "r"): (351, 361), ("cdq", "r"): (351, 361), ("cwde", "r"): (351, 362),
    ("cqo", "r"): (None, 362), ("cdqe", "r"): (None, 362), ("and", "r"): (351, 362),
    ("and", "ld"): (351, 362), ("and", "rmw"): (351, 362), ("or", "r"): (351, 362),
    ("or", "ld"): (351, 362), ("or", "rmw"): (351, 362), ("xor", "r"): (351, 362),
    ("xor", "ld"): (351, 362), ("xor", "rmw"): (351, 362), ("test", "r"): (351, 362),
    ("test", "ld"): (351, 362), ("not", "r"): (351, 362), ("not", "rmw"): (351, 362),
    ("shl", "r"): (351, 362), ("sal", "r"): (351, 362), ("shr", "r"): (351, 362),
    ("sar", "r"): (351, 362), ("rol", "r"): (351, 362), ("ror", "r"): (351, 362),
    ("rcl", "r"): (351, 362), ("rcl", "rmw"): (352, 362), ("rcr", "r"): (351, 362),
    ("rcr", "rmw"): (352, 362), ("shl", "rmw"): (352, 362), ("sal", "rmw"): (352, 362),
    ("shr", "rmw"): (352, 362), ("sar", "rmw"): (352, 362), ("rol", "rmw"): (352, 362),
    ("ror", "rmw"): (352, 362), ("shld", "r"): (352, 362), ("shld", "rmw"): (352, 362),
    ("shrd", "r"): (352, 362), ("shrd", "rmw"): (352, 362), ("bt", "r"): (352, 362),
    ("bt", "ld"): (352, 362), ("btr", "r"): (352, 362), ("btr", "rmw"): (352, 362),
    ("bts", "r"): (352, 362), ("bts", "rmw"): (352, 362), ("btc", "r"): (352, 362),
    ("btc", "rmw"): (352, 362), ("bsf", "r"): (352, 363), ("bsf", "ld"): (352, 363),
    ("bsr", "r"): (352, 363), ("bsr", "ld"): (352, 363), ("seto", "r"): (352, 363),
    ("seto", "st"): (352, 363), ("setno", "r"): (352, 363), ("setno", "st"): (352, 363),
    ("setb", "r"): (352, 363), ("setb", "st"): (352, 363), ("setae", "r"): (352, 363),
    ("setae", "st"): (352, 363), ("sete", "r"): (352, 363), ("sete", "st"): (352, 363),
    ("setne", "r"): (352, 363), ("setne", "st"): (352, 363), ("setbe", "r"): (352, 363),
    ("setbe", "st"): (352, 363), ("seta", "r"): (352, 363), ("seta", "st"): (352, 363),
    ("sets", "r"): (352, 363), ("sets", "st"): (352, 363), ("setns", "r"): (352, 363),
    ("setns", "st"): (352, 363), ("setp", "r"): (352, 363), ("setp", "st"): (352, 363),
    ("setnp", "r"): (352, 363), ("setnp", "st"): (352, 363), ("setl", "r"): (352, 363),
    ("setl", "st"): (352, 363), ("setge", "r"): (352, 363), ("setge", "st"): (352, 363),
    ("setle", "r"): (352, 363), ("setle", "st"): (352, 363), ("setg", "r"): (352, 363),
    ("setg", "st"): (352, 363), ("clc", "r"): (352, 363), ("stc", "r"): (352, 363),
    ("cmc", "r"): (352, 363), ("cld", "r"): (352, 363), ("std", "r"): (352, 363),
    ("cli", "r"): (352, 363), ("sti", "r"): (352, 363), ("jmp", "r"): (352, 363),
    ("jmp", "ld"): (352, 363), ("ljmp", "r"): (352, 363), ("jo", "r"): (352, 363),
    ("jno", "r"): (352, 363), ("jb", "r"): (352, 363), ("jae", "r"): (352, 363),
    ("je", "r"): (352, 363), ("jne", "r"): (352, 363), ("jbe", "r"): (352, 363),
    ("ja", "r"): (352, 363), ("js", "r"): (352, 363), ("jns", "r"): (352, 363),
    ("jp", "r"): (352, 363), ("jnp", "r"): (352, 363), ("jl", "r"): (352, 363),
    ("jge", "r"): (352, 363), ("jle", "r"): (352, 363), ("jg", "r"): (352, 363),
    ("jcxz", "r"): (352, 363), ("jecxz", "r"): (352, 363), ("jrcxz", "r"): (None, 363),
    ("loop", "r"): (352, 363), ("call", "r"): (352, 363), ("call", "ld"): (352, 363),
    ("lcall", "r"): (352, 363), ("ret", "r"): (352, 363), ("retf", "r"): (352, 363),
    ("retfq", "r"): (None, 363), ("iret", "r"): (352, 363), ("iretd", "r"): (352, 363),
    ("iretq", "r"): (None, 363), ("enter", "r"): (352, None), ("leave", "r"): (352, 363),
    ("bound", "ld"): (352, 363), ("into", "r"): (352, 363), ("int", "r"): (352, 363),
    ("lodsb", "ld"): (353, 360), ("lodsw", "ld"): (353, 360), ("lodsd", "ld"): (353, 360),
    ("lodsq", "ld"): (None, 360), ("stosb", "st"): (353, 360), ("stosw", "st"): (353, 360),
    ("stosd", "st"): (353, 360), ("stosq", "st"): (None, 360), ("movsb", "rmw"): (353, 360),
    ("movsw", "rmw"): (353, 360), ("movsd", "rmw"): (353, 360), ("movsq", "rmw"): (None, 360),
    ("scasb", "ld"): (353, 362), ("scasw", "ld"): (353, 362), ("scasd", "ld"): (353, 362),
    ("scasq", "ld"): (None, 362), ("cmpsb", "ld"): (353, 362), ("cmpsw", "ld"): (353, 362),
    ("cmpsq", "ld"): (None, 362), ("nop", "r"): (353, 363), ("pause", "r"): (353, 363),
    ("cpuid", "r"): (353, 363), ("rdtsc", "r"): (353, 363), ("rdpmc", "r"): (None, 363),
    ("fld", "r"): (353, 364), ("fld", "ld"): (353, 364), ("fbld", "ld"): (353, 364),
    ("fst", "r"): (353, 364), ("fst", "st"): (353, 364), ("fstp", "r"): (353, 364),
    ("fstp", "st"): (353, 364), ("fbstp", "st"): (353, 364), ("fxch", "r"): (353, 364),
    ("fild", "ld"): (353, 364), ("fist", "st"): (353, 364), ("fistp", "st"): (354, 364),
    ("fldz", "r"): (354, 364), ("fld1", "r"): (354, 364), ("fcmovb", "r"): (354, 364),
    ("fcmove", "r"): (354, 364), ("fcmovbe", "r"): (354, 364), ("fcmovu", "r"): (354, 364),
    ("fcmovnb", "r"): (354, 364), ("fcmovne", "r"): (354, 364), ("fcmovnbe", "r"): (354, 364),
    ("fcmovnu", "r"): (354, 364), ("fcmovnp", "r"): (354, 364), ("ffree", "r"): (354, 364),
    ("fincstp", "r"): (354, 364), ("fdecstp", "r"): (354, 364), ("fnstsw", "r"): (354, 364),
    ("fnstsw", "st"): (354, 364), ("fnstcw", "st"): (354, 364), ("fldcw", "ld"): (354, 364),
    ("fisttp", "st"): (None, 364), ("fadd", "r"): (354, 364), ("fsub", "r"): (354, 364),
    ("fsubr", "r"): (354, 364), ("fsubp", "r"): (354, 364), ("fsubrp", "r"): (354, 364),
    ("fadd", "ld"): (354, 364), ("fsub", "ld"): (354, 364), ("fsubr", "ld"): (354, 364),
    ("fiadd", "ld"): (354, 364), ("fisub", "ld"): (354, 364), ("fisubr", "ld"): (354, 364),
    ("fmul", "r"): (354, 365), ("fmulp", "r"): (354, 365), ("fmul", "ld"): (354, 365),
    ("fimul", "ld"): (354, 365), ("fdiv", "r"): (354, 365), ("fdivr", "r"): (354, 365),
    ("fdivp", "r"): (354, 365), ("fdivrp", "r"): (354, 365), ("fdiv", "ld"): (354, 365),
    ("fdivr", "ld"): (354, 365), ("fidiv", "ld"): (354, 365), ("fidivr", "ld"): (354, 365),
    ("fabs", "r"): (354, 365), ("fchs", "r"): (354, 365), ("fcom", "r"): (354, 365),
    ("fcomp", "r"): (354, 365), ("fucom", "r"): (354, 365), ("fucomp", "r"): (354, 365),
    ("fcom", "ld"): (354, 365), ("fcomp", "ld"): (354, 365), ("fcompp", "r"): (354, 365),
    ("fucompp", "r"): (354, 365), ("fcomi", "r"): (354, 365), ("fcompi", "r"): (354, 365),
    ("ficom", "ld"): (354, 365), ("ficomp", "ld"): (354, 365), ("ftst", "r"): (354, 365),
    ("fxam", "r"): (354, 365), ("frndint", "r"): (354, 365), ("fprem", "r"): (354, 365),
    ("fprem1", "r"): (354, 365), ("fsqrt", "r"): (354, 365), ("fldpi", "r"): (354, 365),
    ("fldl2e", "r"): (354, 365), ("fldl2t", "r"): (354, 365), ("fldlg2", "r"): (354, 365),
    ("fldln2", "r"): (354, 365), ("fsin", "r"): (354, 365), ("fcos", "r"): (354, 365),
    ("fsincos", "r"): (354, 365), ("fptan", "r"): (354, 365), ("fpatan", "r"): (354, 365),
    ("fscale", "r"): (354, 365), ("fxtract", "r"): (354, 365), ("f2xm1", "r"): (354, 365),
    ("fyl2x", "r"): (354, 365), ("fyl2xp1", "r"): (354, 365), ("fnop", "r"): (355, 365),
    ("wait", "r"): (355, 365), ("fnclex", "r"): (355, 365), ("fninit", "r"): (355, 365),
    ("fnsave", "st"): (355, 365), ("frstor", "ld"): (355, 365), ("fxsave", "st"): (355, 365),
    ("fxrstor", "ld"): (355, 365), ("movd", "r"): (355, 366), ("movd", "ld"): (355, 366),
    ("movd", "st"): (355, 366), ("movq", "r"): (355, 366), ("movq", "ld"): (355, 366),
    ("movq", "st"): (355, 366), ("movdqa", "r"): (355, 366), ("movdqa", "ld"): (355, 366),
    ("movdqa", "st"): (355, 366), ("movdqu", "ld"): (355, 366), ("movdqu", "st"): (355, 366),
    ("movdq2q", "r"): (355, 366), ("movq2dq", "r"): (355, 366), ("movntq", "st"): (355, 366),
    ("movntdq", "st"): (355, 366), ("packsswb", "r"): (356, 366), ("packsswb", "ld"): (356, 366),
    ("packssdw", "r"): (356, 366), ("packssdw", "ld"): (356, 366), ("packuswb", "r"): (356, 366),
    ("packuswb", "ld"): (356, 366), ("punpckhbw", "r"): (356, 366), ("punpckhbw", "ld"): (356, 366),
    ("punpckhwd", "r"): (356, 366), ("punpckhwd", "ld"): (356, 366), ("punpckhdq", "r"): (356, 366),
    ("punpckhdq", "ld"): (356, 366), ("punpcklbw", "r"): (356, 366),
    ("punpcklbw", "ld"): (356, 366), ("punpcklwd", "r"): (356, 366),
    ("punpcklwd", "ld"): (356, 366), ("punpckldq", "r"): (356, 366),
    ("punpckldq", "ld"): (356, 366), ("punpckhqdq", "r"): (356, 366),
    ("punpckhqdq", "ld"): (356, 366), ("punpcklqdq", "r"): (356, 366),
    ("punpcklqdq", "ld"): (356, 366), ("pshufd", "r"): (356, 366), ("pshuflw", "r"): (356, 366),
    ("pshufhw", "r"): (356, 366), ("pshufw", "r"): (356, 366), ("maskmovq", "r"): (356, 366),
    ("maskmovdqu", "r"): (356, 366), ("pmovmskb", "r"): (356, 366), ("pextrw", "r"): (356, 367),
    ("pinsrw", "r"): (356, 367), ("lddqu", "ld"): (None, 366), ("movddup", "r"): (None, 366),
    ("movshdup", "r"): (None, 366), ("movsldup", "r"): (None, 366), ("paddb", "r"): (356, 367),
    ("paddb", "ld"): (356, 367), ("paddw", "r"): (356, 367), ("paddw", "ld"): (356, 367),
    ("paddd", "r"): (356, 367), ("paddd", "ld"): (356, 367), ("paddsb", "r"): (356, 367),
    ("paddsb", "ld"): (356, 367), ("paddsw", "r"): (356, 367), ("paddsw", "ld"): (356, 367),
    ("paddusb", "r"): (356, 367), ("paddusb", "ld"): (356, 367), ("paddusw", "r"): (356, 367),
    ("paddusw", "ld"): (356, 367), ("psubb", "r"): (356, 367), ("psubb", "ld"): (356, 367),
    ("psubw", "r"): (356, 367), ("psubw", "ld"): (356, 367), ("psubd", "r"): (356, 367),
    ("psubd", "ld"): (356, 367), ("psubsb", "r"): (356, 367), ("psubsb", "ld"): (356, 367),
    ("psubsw", "r"): (356, 367), ("psubsw", "ld"): (356, 367), ("psubusb", "r"): (356, 367),
    ("psubusb", "ld"): (356, 367), ("psubusw", "r"): (356, 367), ("psubusw", "ld"): (356, 367),
    ("paddq", "r"): (356, 367), ("paddq", "ld"): (356, 367), ("psubq", "r"): (356, 367),
    ("psubq", "ld"): (356, 367), ("pcmpeqb", "r"): (356, 367), ("pcmpeqb", "ld"): (356, 367),
    ("pcmpeqw", "r"): (356, 367), ("pcmpeqw", "ld"): (356, 367), ("pcmpeqd", "r"): (356, 367),
    ("pcmpeqd", "ld"): (356, 367), ("pcmpgtb", "r"): (356, 367), ("pcmpgtb", "ld"): (356, 367),
    ("pcmpgtw", "r"): (356, 367), ("pcmpgtw", "ld"): (356, 367), ("pcmpgtd", "r"): (356, 367),
    ("pcmpgtd", "ld"): (356, 367), ("pmullw", "r"): (356, 367), ("pmullw", "ld"): (356, 367),
    ("pmulhw", "r"): (356, 367), ("pmulhw", "ld"): (356, 367), ("pmulhuw", "r"): (356, 367),
    ("pmulhuw", "ld"): (356, 367), ("pmaddwd", "r"): (356, 367), ("pmaddwd", "ld"): (356, 367),
    ("pmuludq", "r"): (356, 367), ("pmuludq", "ld"): (356, 367), ("pavgb", "r"): (356, 367),
    ("pavgb", "ld"): (356, 367), ("pavgw", "r"): (356, 367), ("pavgw", "ld"): (356, 367),
    ("pminub", "r"): (356, 367), ("pminub", "ld"): (356, 367), ("pmaxub", "r"): (356, 367),
    ("pmaxub", "ld"): (356, 367), ("pminsw", "r"): (356, 367), ("pminsw", "ld"): (356, 367),
    ("pmaxsw", "r"): (356, 367), ("pmaxsw", "ld"): (356, 367), ("psadbw", "r"): (356, 367),
    ("psadbw", "ld"): (356, 367), ("pand", "r"): (356, 367), ("pand", "ld"): (356, 367),
    ("pandn", "r"): (356, 367), ("pandn", "ld"): (356, 367), ("por", "r"): (356, 367),
    ("por", "ld"): (356, 367), ("pxor", "r"): (356, 367), ("pxor", "ld"): (356, 367),
    ("psllw", "r"): (356, 367), ("psllw", "ld"): (356, 367), ("pslld", "r"): (356, 367),
    ("pslld", "ld"): (356, 367), ("psllq", "r"): (356, 367), ("psllq", "ld"): (356, 367),
    ("psrlw", "r"): (356, 367), ("psrlw", "ld"): (356, 367), ("psrld", "r"): (356, 367),
    ("psrld", "ld"): (356, 367), ("psrlq", "r"): (356, 367), ("psrlq", "ld"): (356, 367),
    ("psraw", "r"): (356, 367), ("psraw", "ld"): (356, 367), ("psrad", "r"): (356, 367),
    ("psrad", "ld"): (356, 367), ("pslldq", "r"): (356, 367), ("psrldq", "r"): (356, 367),
    ("emms", "r"): (356, 367), ("movaps", "r"): (357, 367), ("movaps", "ld"): (357, 367),
    ("movaps", "st"): (357, 367), ("movapd", "r"): (357, 367), ("movapd", "ld"): (357, 367),
    ("movapd", "st"): (357, 367), ("movups", "r"): (357, 367), ("movups", "ld"): (357, 367),
    ("movups", "st"): (357, 367), ("movupd", "r"): (357, 367), ("movupd", "ld"): (357, 367),
    ("movupd", "st"): (357, 367), ("movss", "r"): (357, 368), ("movsd", "r"): (357, 368),
    ("movss", "ld"): (357, 368), ("movss", "st"): (357, 368), ("movsd", "ld"): (357, 368),
    ("movsd", "st"): (357, 368), ("movhlps", "r"): (357, 368), ("movlhps", "r"): (357, 368),
    ("movhps", "ld"): (357, 368), ("movhps", "st"): (357, 368), ("movhpd", "ld"): (357, 368),
    ("movhpd", "st"): (357, 368), ("movlps", "ld"): (357, 368), ("movlps", "st"): (357, 368),
    ("movlpd", "ld"): (357, 368), ("movlpd", "st"): (357, 368), ("movntps", "st"): (357, 368),
    ("movntpd", "st"): (357, 368), ("movmskps", "r"): (357, 368), ("movmskpd", "r"): (357, 368),
    ("shufps", "r"): (357, 368), ("shufps", "ld"): (357, 368), ("shufpd", "r"): (357, 368),
    ("shufpd", "ld"): (357, 368), ("unpckhps", "r"): (357, 368), ("unpckhps", "ld"): (357, 368),
    ("unpckhpd", "r"): (357, 368), ("unpckhpd", "ld"): (357, 368), ("unpcklps", "r"): (357, 368),
    ("unpcklps", "ld"): (357, 368), ("unpcklpd", "r"): (357, 368), ("unpcklpd", "ld"): (357, 368),
    ("cvtps2pd", "r"): (357, 368), ("cvtps2pd", "ld"): (357, 368), ("cvtpd2ps", "r"): (357, 368),
    ("cvtpd2ps", "ld"): (357, 368), ("cvtsd2ss", "r"): (357, 368), ("cvtsd2ss", "ld"): (357, 368),
    ("cvtss2sd", "r"): (357, 368), ("cvtss2sd", "ld"): (357, 368), ("cvtdq2ps", "r"): (357, 368),
    ("cvtdq2ps", "ld"): (357, 368), ("cvtdq2pd", "r"): (357, 368), ("cvtdq2pd", "ld"): (357, 368),
    ("cvtps2dq", "r"): (357, 368), ("cvtps2dq", "ld"): (357, 368), ("cvttps2dq", "r"): (357, 368),
    ("cvttps2dq", "ld"): (357, 368), ("cvtpd2dq", "r"): (357, 368), ("cvtpd2dq", "ld"): (357, 368),
    ("cvttpd2dq", "r"): (357, 368), ("cvttpd2dq", "ld"): (357, 368), ("cvtpi2ps", "r"): (357, 368),
    ("cvtpi2ps", "ld"): (357, 368), ("cvtpi2pd", "r"): (357, 368), ("cvtpi2pd", "ld"): (357, 368),
    ("cvtps2pi", "r"): (357, 368), ("cvtps2pi", "ld"): (357, 368), ("cvttps2pi", "r"): (357, 368),
    ("cvttps2pi", "ld"): (357, 368), ("cvtpd2pi", "r"): (357, 368), ("cvtpd2pi", "ld"): (357, 368),
    ("cvttpd2pi", "r"): (357, 368), ("cvttpd2pi", "ld"): (357, 368), ("cvtsi2ss", "r"): (357, 368),
    ("cvtsi2ss", "ld"): (357, 368), ("cvtsi2sd", "r"): (357, 368), ("cvtsi2sd", "ld"): (357, 368),
    ("cvtsd2si", "r"): (357, 368), ("cvtsd2si", "ld"): (357, 368), ("cvttsd2si", "r"): (357, 368),
    ("cvttsd2si", "ld"): (357, 368), ("cvtss2si", "r"): (357, 368), ("cvtss2si", "ld"): (357, 368),
    ("cvttss2si", "r"): (357, 368), ("cvttss2si", "ld"): (357, 368), ("addps", "r"): (357, 368),
    ("addps", "ld"): (357, 368), ("addpd", "r"): (357, 368), ("addpd", "ld"): (357, 368),
    ("addss", "r"): (357, 368), ("addss", "ld"): (357, 368), ("addsd", "r"): (357, 368),
    ("addsd", "ld"): (357, 368), ("subps", "r"): (357, 368), ("subps", "ld"): (357, 368),
    ("subpd", "r"): (357, 368), ("subpd", "ld"): (357, 368), ("subss", "r"): (357, 368),
    ("subss", "ld"): (357, 368), ("subsd", "r"): (357, 368), ("subsd", "ld"): (357, 368),
    ("mulps", "r"): (358, 368), ("mulps", "ld"): (358, 368), ("mulpd", "r"): (358, 368),
    ("mulpd", "ld"): (358, 368), ("mulss", "r"): (358, 368), ("mulss", "ld"): (358, 368),
    ("mulsd", "r"): (358, 368), ("mulsd", "ld"): (358, 368), ("divss", "r"): (358, 368),
    ("divss", "ld"): (358, 368), ("divps", "r"): (358, 368), ("divps", "ld"): (358, 368),
    ("divsd", "r"): (358, 368), ("divsd", "ld"): (358, 368), ("divpd", "r"): (358, 368),
    ("divpd", "ld"): (358, 368), ("rcpps", "r"): (358, 368), ("rcpps", "ld"): (358, 368),
    ("rcpss", "r"): (358, 368), ("rcpss", "ld"): (358, 368), ("maxps", "r"): (358, 368),
    ("maxps", "ld"): (358, 368), ("maxpd", "r"): (358, 368), ("maxpd", "ld"): (358, 368),
    ("maxss", "r"): (358, 368), ("maxss", "ld"): (358, 368), ("maxsd", "r"): (358, 368),
    ("maxsd", "ld"): (358, 368), ("minps", "r"): (358, 368), ("minps", "ld"): (358, 368),
    ("minpd", "r"): (358, 368), ("minpd", "ld"): (358, 368), ("minss", "r"): (358, 368),
    ("minss", "ld"): (358, 368), ("minsd", "r"): (358, 368), ("minsd", "ld"): (358, 368),
    ("cmpps", "r"): (358, 368), ("cmpps", "ld"): (358, 368), ("cmppd", "r"): (358, 368),
    ("cmppd", "ld"): (358, 368), ("cmpss", "r"): (358, 368), ("cmpss", "ld"): (358, 368),
    ("cmpsd", "r"): (358, 368), ("cmpsd", "ld"): (358, 368), ("comiss", "r"): (358, 368),
    ("comiss", "ld"): (358, 368), ("comisd", "r"): (358, 368), ("comisd", "ld"): (358, 368),
    ("ucomiss", "r"): (358, 368), ("ucomiss", "ld"): (358, 368), ("ucomisd", "r"): (358, 368),
    ("ucomisd", "ld"): (358, 368), ("addsubps", "r"): (None, 368), ("addsubps", "ld"): (None, 368),
    ("addsubpd", "r"): (None, 368), ("addsubpd", "ld"): (None, 368), ("haddps", "r"): (None, 368),
    ("haddps", "ld"): (None, 368), ("haddpd", "r"): (None, 368), ("haddpd", "ld"): (None, 368),
    ("hsubps", "r"): (None, 368), ("hsubps", "ld"): (None, 368), ("hsubpd", "r"): (None, 368),
    ("hsubpd", "ld"): (None, 368), ("andps", "r"): (358, 369), ("andps", "ld"): (358, 369),
    ("andpd", "r"): (358, 369), ("andpd", "ld"): (358, 369), ("andnps", "r"): (358, 369),
    ("andnps", "ld"): (358, 369), ("andnpd", "r"): (358, 369), ("andnpd", "ld"): (358, 369),
    ("orps", "r"): (358, 369), ("orps", "ld"): (358, 369), ("orpd", "r"): (358, 369),
    ("orpd", "ld"): (358, 369), ("xorps", "r"): (358, 369), ("xorps", "ld"): (358, 369),
    ("xorpd", "r"): (358, 369), ("xorpd", "ld"): (358, 369), ("sqrtss", "r"): (358, 369),
    ("sqrtss", "ld"): (358, 369), ("sqrtps", "r"): (358, 369), ("sqrtps", "ld"): (358, 369),
    ("sqrtsd", "r"): (358, 369), ("sqrtsd", "ld"): (358, 369), ("sqrtpd", "r"): (358, 369),
    ("sqrtpd", "ld"): (358, 369), ("rsqrtss", "r"): (358, 369), ("rsqrtss", "ld"): (358, 369),
    ("rsqrtps", "r"): (358, 369), ("rsqrtps", "ld"): (358, 369), ("ldmxcsr", "ld"): (358, 369),
    ("stmxcsr", "st"): (358, 369),
}
