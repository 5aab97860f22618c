"""The timing model against silicon (docs/timing.md, docs/silicon-sources.md).

* The model alone: the `chase` workload's loop (8 dependent loads per iteration) scheduled by
  emulator/clockmodel.py takes each core's L1 load-to-use latency per load; long-latency
  instructions cost their tables' clocks.
* In the guest (`--plugin-opt timing=memory`, Linux, perf stat -e cycles:u): cycles per load
  of a chase whose ring is held by L1, by L2, or by neither, on a Northwood (0F_02, i386) and
  a Prescott (0F_04, amd64) model, each within the published range for that model
  (emulator/silicon.py LOAD_LATENCIES: AIDA's dependent-load chains).
* In the same boots (one per model): the trace cache's misses by raw event (`perf stat -e
  $(p4event BPU_fetch_request:TCMISS:u)`) of the `tcsweep` workload, 9 per pass, exactly as the
  memory model's code-line record says (docs/memory-model.md), and the clocks and uops of
  their builds (TC_deliver_mode BI, uop_queue_writes FROM_TC_BUILD); the bus requests
  (BSQ_allocation, IOQ_allocation) of the `stream` and `wstream` workloads, a pass's worth per
  pass, as the reference memory model says.
"""
from __future__ import annotations

import functools
import math

import pytest
from test_linux_perf import run_session

from p4pmu.emulator import clockmodel as CM
from p4pmu.emulator import insn_classes as IC
from p4pmu.emulator import silicon as S
from p4pmu.emulator import timing as TM
from p4pmu.emulator.memmodel import MemorySystem
from p4pmu.emulator.models import get_model
from p4pmu.qemu_glue import perf_p4 as P
from p4pmu.qemu_glue import workloads as W

from guests import loops as L
from guests import sse_inputs

LOADS_PER_ITERATION = 8
ARCH = {"0F_02": "i386", "0F_04": "amd64"}  # 0F_02 has no EM64T


def _chase_block(arch: str, core: str) -> list:
    path = W.build_dir(arch) / "chase"
    syms = W.symbols(path)
    a, b = syms["chase_loop"][0], syms["chase_loop_end"][0]
    return IC.classify(W.code(path, a, b), a, 64 if arch == "amd64" else 32, core)


@pytest.fixture(scope="module")
def built():
    try:
        for arch in set(ARCH.values()):
            W.ensure_built(arch)
    except W.WorkloadBuildError as e:
        pytest.fail(f"cannot build the workloads: {e}", pytrace=False)


@pytest.mark.parametrize("model", sorted(ARCH))
def test_the_model_chases_at_the_l1_load_to_use_latency(built, model):
    core = get_model(model).core
    insns = _chase_block(ARCH[model], core)
    assert CM.self_loop(insns) and sum(i.loads for i in insns) == LOADS_PER_ITERATION
    clocks = CM.block_clocks(insns, (True, True), CM.core_params(core))
    assert len(clocks) / LOADS_PER_ITERATION == TM.CORE_TIMING[core].l1_load


@pytest.mark.parametrize("core", TM.CORES)
def test_long_latency_instructions_cost_their_tables_clocks(core):
    """A chain of 4 dependent IMULs takes 4 latencies; independent DIVs their throughput; a
    CPUID its stall; each from emulator/timing.py (Agner's tables)."""
    imul = bytes.fromhex("480fafc0") * 4  # imul rax, rax
    got = len(CM.schedule(IC.classify(imul, 0, 64, core)))
    lat = TM.insn_timing("imul", core)[0]
    assert 3 * lat < got <= 4 * lat
    div = bytes.fromhex("48f7f3") * 2  # div rbx: reads and writes RAX, RDX: a chain of two
    got = len(CM.schedule(IC.classify(div, 0, 64, core)))
    assert got >= TM.insn_timing("div", core)[0] + 1
    (cpuid,) = IC.classify(bytes.fromhex("0fa2"), 0, 64, core)
    got = len(CM.schedule([cpuid]))
    assert got == TM.insn_timing("cpuid", core)[1] + math.ceil(cpuid.uops / 3)


def test_every_core_timing_row_is_sourced():
    for core, t in TM.CORE_TIMING.items():
        assert t.sources and t.bp_penalty and t.l1_load < t.l2_load < t.mem_load, core
    for name, rows in TM.INSN_TIMING.items():
        assert len(rows) == 2 and all(len(r) == 2 for r in rows), name


# ---- in the guest ---------------------------------------------------------------------------

ITERATIONS = {"L1": (20000, 40000), "L2": (4000, 8000), "memory": (1000, 2000)}
TC_PASSES = (1000, 3000)  # tcsweep's passes
# the bus requests (emulator/bus_requests.py) by raw event: (name, workload, events (the
# allocations first, then the same queue's occupancy with the same mask), mask bits, passes).
# stream loads one word per line of 8 MB, wstream stores one (workloads.py): stream's pass
# from its start is exact; wstream's first pass also has the kernel clear its pages, so a
# second run with one pass more gives a pass's worth.  (Each perf run takes a few seconds
# here: reads for ownership are left to tests/test_events_memory.py.)
_BSQ_LINE = ("REQ_LEN0", "REQ_LEN1", "REQ_CACHE_TYPE", "REQ_DEM_TYPE", "MEM_TYPE1", "MEM_TYPE2")
BUS_RUNS = (("bsq-read", "stream", ("BSQ_allocation", "bsq_active_entries"), _BSQ_LINE, (1,)),
            ("ioq-read", "stream", ("IOQ_allocation", "IOQ_active_entries"),
             ("ReqA0", "ALL_READ", "MEM_WB", "OWN"), (1,)),
            ("bsq-wb", "wstream", ("BSQ_allocation",), _BSQ_LINE + ("REQ_TYPE0", "REQ_TYPE1"),
             (1, 2)))
BUS_WANT = {"bsq-read": "read", "ioq-read": "read", "bsq-wb": "writeback"}
STREAM_OUTSIDE = 8  # stream's loads outside its loop (the argument) may miss L2 too
# the trace cache by raw event on tcsweep, in one perf run (BPU_ESCR0, TC_ESCR0, MS_ESCR0): its
# misses, and the clocks and uops of its block executions, which all miss and are built
TC_EVENTS = ("BPU_fetch_request:TCMISS", "TC_deliver_mode:BI",
             "uop_queue_writes:FROM_TC_BUILD")


DENORM_N = 100000  # iterations of the denorm workload's loop


def _section(m, n: int) -> str:
    return f"{m.level}-{n}"


# One boot per model (timing=memory, the virtual clock) runs every section of this file that
# model needs: the chases and the trace-cache sweeps on both, the compression programs on the
# CPI model (0F_02), the memcomp profile last on PROFILE_MODEL (0F_04; perf-setup unthrottles
# sampling).
_boots: dict = {}


def timing_boot(tmp_path_factory, model: str):
    if model not in _boots:
        sections = [("off", "echo 0 > /proc/sys/kernel/nmi_watchdog")]
        sections += [(_section(m, n), f"perf stat -x, -e cycles:u -- chase {m.ring_kb} {n}")
                     for m in S.LOAD_LATENCIES if m.model == model
                     for n in ITERATIONS[m.level]]
        events = " ".join(f"-e $(p4event {e}:u)" for e in TC_EVENTS)
        sections += [(f"tc-{n}", f"perf stat -x, {events} -- tcsweep {n}") for n in TC_PASSES]
        sections.append(("denorm", f"perf stat -x, -e $(p4event SSE_input_assist:u) "
                                   f"-e $(p4event x87_assist:PREA:POAU:u) -- denorm {DENORM_N}"))
        sections += [(f"{name}-{n}", "perf stat -x, " + " ".join(
                          f"-e $(p4event {':'.join((ev,) + bits)}:u)" for ev in evs) +
                      f" -- {prog} {n}")
                     for name, prog, evs, bits, passes in BUS_RUNS for n in passes]
        cpi = [c for c in S.COMPRESSION_CPI if c.model == model]
        if cpi:
            sections.append(("cpi-input", S.CPI_INPUT))
            sections += [(c.program, f"perf stat -x, -e instructions:u -e cycles:u -- "
                                     f"{c.command} >/dev/null") for c in cpi]
        if model == PROFILE_MODEL:
            sections += [
                ("perf-setup", "perf-setup"),
                ("record", f"perf record -q -o /tmp/m.data -e cycles:u -c {MEMCOMP_PERIOD} "
                           f"-- memcomp {MEMCOMP_N}"),
                ("report", "perf report -i /tmp/m.data --stdio -n --sort comm,dso,sym")]
        _boots[model] = run_session(
            tmp_path_factory.mktemp(f"timing-{model}"), f"timing-{model}", ARCH[model],
            sections, kernel="5.10", recipe=False, clock="virtual", timeout=900,
            plugin_opts=(f"model={model}", "timing=memory"))
    return _boots[model]


@pytest.fixture(scope="module", params=sorted(ARCH))
def chase_session(request, tmp_path_factory, built):
    model = request.param
    rows = [m for m in S.LOAD_LATENCIES if m.model == model]
    return model, rows, timing_boot(tmp_path_factory, model)


@pytest.mark.guest
def test_chase_cycles_per_load_are_silicons(chase_session):
    model, rows, s = chase_session
    report = []
    for m in rows:
        n1, n2 = ITERATIONS[m.level]
        c = []
        for n in (n1, n2):
            got = P.parse_stat_csv(s.sec(_section(m, n)).text)
            line = next((v for k, v in got.items() if k.startswith("cycles")), None)
            assert line is not None and line.value, (m.level, n, s.sec(_section(m, n)).text)
            c.append(line.value)
        per = (c[1] - c[0]) / (LOADS_PER_ITERATION * (n2 - n1))
        report.append((m.level, round(per, 2), (m.lo, m.hi)))
    print(f"{model}: cycles per load (level, p4pmu, silicon's range): {report}")
    for _level, per, (lo, hi) in report:
        assert lo <= per <= hi, f"{model}: cycles per load {report}"


def tcsweep_predicted(arch: str, model: str, passes: int) -> int:
    """tcsweep's loop through the reference memory model: its 9 blocks' fetches, `passes`
    times, from an empty code-line record."""
    sym = W.symbols(W.build_dir(arch) / "tcsweep")
    m = MemorySystem(get_model(model).memory)
    blocks = [sym["tcsweep_loop"][0]] + [sym[f"tcsweep_{k}"][0] for k in range(1, 9)]
    return sum(m.fetch_code(a, a + 8) for _ in range(passes) for a in blocks)


@pytest.mark.guest
def test_trace_cache_misses_by_raw_event_are_the_models(chase_session):
    """perf stat of BPU_fetch_request:TCMISS by its raw encoding (the guest's p4event): 9
    misses per pass of tcsweep, as the reference model predicts, on both models (the
    difference of two runs is exact; a run adds the few lines of the code outside the
    loop)."""
    model, _, s = chase_session
    arch = ARCH[model]
    raw = P.raw_event("BPU_fetch_request", "TCMISS")
    got = []
    for n in TC_PASSES:
        stat = P.parse_stat_csv(s.sec(f"tc-{n}").text)
        assert raw in stat and stat[raw].value is not None, (raw, s.sec(f"tc-{n}").text)
        got.append(stat[raw].value)
        want = tcsweep_predicted(arch, model, n)
        assert want == 9 * n
        assert want <= stat[raw].value <= want + 4, (model, n, stat[raw].value, want)
    assert got[1] - got[0] == 9 * (TC_PASSES[1] - TC_PASSES[0]), (model, got)
    assert "BPU_fetch_request" not in s.stderr  # modelled: no notice
    # the i386 kernel's REP strings at timing=memory once made more clock kinds than the
    # plugin holds (their memory fields summed without the per-clock cap of 15)
    assert "distinct clock kinds" not in s.kernel_log + s.stderr


def tcsweep_build(arch: str, model: str) -> tuple[int, int]:
    """(build-mode clocks, uops built) of one pass of tcsweep, whose 9 block executions all
    miss the trace cache: each is built, every clock of its schedule after the bubble
    (clockmodel.block_clocks), and its uops come from the build."""
    path = W.build_dir(arch) / "tcsweep"
    core = get_model(model).core
    params = CM.core_params(core)
    insns = P.program_insns(path, core)
    index = {i.addr: k for k, i in enumerate(insns)}
    sym = W.symbols(path)
    clocks = uops = 0
    for a in [sym["tcsweep_loop"][0]] + [sym[f"tcsweep_{k}"][0] for k in range(1, 9)]:
        k = index[a]
        block = [insns[k]]
        while block[-1].branch == CM.BR_NONE:
            k += 1
            block.append(insns[k])
        clocks += len(CM.schedule(block, params))
        uops += sum(i.uops for i in block if not CM.microcoded(i, params))
    return clocks, uops


@pytest.mark.guest
def test_trace_cache_builds_by_raw_event_are_the_models(chase_session):
    """perf stat of TC_deliver_mode BI (build mode, the other logical processor absent) and
    uop_queue_writes FROM_TC_BUILD by raw encoding on tcsweep: a pass more adds exactly the
    clocks and uops of its 9 built block executions (clockmodel.block_clocks), on both
    models."""
    model, _, s = chase_session
    clocks, uops = tcsweep_build(ARCH[model], model)
    assert clocks >= 9 and uops >= 17, (clocks, uops)
    for spec, per_pass in zip(TC_EVENTS[1:], (clocks, uops)):
        raw = P.raw_event(*spec.split(":"))
        got = []
        for n in TC_PASSES:
            stat = P.parse_stat_csv(s.sec(f"tc-{n}").text)
            assert raw in stat and stat[raw].value is not None, (raw, s.sec(f"tc-{n}").text)
            assert stat[raw].running_pct == 100.0, stat[raw]  # (not multiplexed)
            got.append(stat[raw].value)
        assert got[1] - got[0] == per_pass * (TC_PASSES[1] - TC_PASSES[0]), (model, spec, got)
        assert got[0] >= per_pass * TC_PASSES[0], (model, spec, got)
    assert "TC_deliver_mode" not in s.stderr and "uop_queue_writes" not in s.stderr


@functools.cache
def stream_pass(arch: str, model: str, program: str) -> dict[str, int]:
    """stream's (loads) or wstream's (stores) second pass through the reference memory model
    (one pass of 8 MB has replaced everything the caches held before): its bus requests by
    kind (bus_requests.REQUESTS)."""
    sym = W.symbols(W.build_dir(arch) / program)
    buf, size = sym["stream_buf"]
    m = MemorySystem(get_model(model).memory)
    store = program == "wstream"
    for _ in range(2):
        n = {"read": 0, "rfo": 0, "writeback": 0}
        for a in range(buf, buf + size, 64):
            o = m.access(a, 4, store)
            n["rfo" if store else "read"] += o.l2_miss
            n["writeback"] += o.writeback
    return n


def check_occupancy(model: str, text: str, event: str, bits, reads: int) -> None:
    """The queue's occupancy in the same perf run as its allocations: each line read is
    active for the clocks its load waits for memory, one count per update of the queue's
    count (clockmodel.queue_active: 288 on the Northwood, 286 / 2 on the Prescott); the guest's
    p4event knows the run is at timing=memory and does not warn."""
    stat = P.parse_stat_csv(text)
    raw = P.raw_event(event, *bits)
    assert raw in stat and stat[raw].value is not None, (raw, text)
    assert stat[raw].running_pct == 100.0, stat[raw]  # (not multiplexed)
    per_read = CM.queue_active({"l2_ld": 1}, CM.core_params(get_model(model).core,
                                                            memory_timing=1))
    assert per_read == {"0F_02": 288, "0F_04": 143}[model]
    assert stat[raw].value == reads * per_read, (model, event, stat[raw].value, reads)
    assert "warning" not in text, text


@pytest.mark.guest
def test_bus_requests_by_raw_event_are_the_models(chase_session):
    """perf stat of BSQ_allocation (a line read, a read for ownership, a write-back: one
    encoding each) and IOQ_allocation (own reads) by raw encoding, on stream and wstream, as
    the reference memory model says: a pass of stream's 131,072 line reads (and the few of
    the code outside its loop); one pass of wstream more adds exactly its 131,072 reads for
    ownership, and its as many write-backs within 0.5 % (interrupts); the reads' occupancy of
    each queue (bsq_active_entries, IOQ_active_entries) in the same run (check_occupancy);
    on both models, 32- and 64-bit."""
    model, _, s = chase_session
    arch = ARCH[model]
    for name, prog, (ev, *occupancy), bits, passes in BUS_RUNS:
        raw = P.raw_event(ev, *bits)
        got = []
        for n in passes:
            stat = P.parse_stat_csv(s.sec(f"{name}-{n}").text)
            assert raw in stat and stat[raw].value is not None, (raw, s.sec(f"{name}-{n}").text)
            got.append(stat[raw].value)
        expect = stream_pass(arch, model, prog)[BUS_WANT[name]]
        assert expect == 131072, (name, expect)
        for active in occupancy:
            check_occupancy(model, s.sec(f"{name}-{passes[0]}").text, active, bits, got[0])
        if len(passes) == 1:
            assert expect <= got[0] <= expect + STREAM_OUTSIDE, (model, name, got)
            continue
        # a write-back goes to the level of the access whose sector replacement makes it:
        # the kernel's interrupt handlers (the virtual clock's timer) replace some sectors the
        # loop modified, and their lines give the loop some to write back: a few hundred of
        # 131,072 per pass, run to run
        slack = expect // 200 if BUS_WANT[name] == "writeback" else 0
        assert abs(got[1] - got[0] - expect) <= slack, (model, name, got, expect)
        assert got[0] >= expect // 2, (model, name, got)
    for ev in ("BSQ_allocation", "IOQ_allocation", "bsq_active_entries", "IOQ_active_entries"):
        assert ev not in s.stderr  # the masks select modelled requests: no notice


# ---- a profile of memory-bound and compute-bound code ------------------------------------

MEMCOMP_N = 5000
MEMCOMP_PERIOD = 20000
PROFILE_MODEL = "0F_04"


def published_mem_share(model: str) -> tuple[float, float]:
    """The range of mem_bound's share of memcomp's clocks by the published latencies of that
    model's parts: 8 loads of the memory range (LOAD_LATENCIES) against 8 IMULs of Agner's
    latency, per iteration."""
    core = get_model(model).core
    (mem,) = [m for m in S.LOAD_LATENCIES if m.model == model and m.level == "memory"]
    imul = TM.INSN_TIMING["imul"][TM.CORES.index(core)][0]
    return mem.lo / (mem.lo + imul), mem.hi / (mem.hi + imul)


@pytest.fixture(scope="module")
def profile_session(tmp_path_factory, built):
    # (perf-setup before the record: no throttling of the sampling rate -- the virtual clock
    # gives memory-bound code many clocks per guest nanosecond)
    return timing_boot(tmp_path_factory, PROFILE_MODEL)


@pytest.mark.guest
def test_a_cycles_profile_follows_the_published_latencies(profile_session):
    """perf record -e cycles:u of memcomp: mem_bound's share of the samples is within 2
    percentage points of the share the published latencies give (memory against IMUL), and
    the functions retire the same instructions (so core timing alone would give the compute
    function the larger share)."""
    out = profile_session.sec("report").text
    rep = P.parse_report(out)
    sm = rep.symbol_samples("mem_bound", "memcomp")
    sc = rep.symbol_samples("compute_bound", "memcomp")
    assert sm + sc > 0.9 * rep.samples and sm + sc > 400, out
    lo, hi = published_mem_share(PROFILE_MODEL)
    share = sm / (sm + sc)
    print(f"mem_bound {sm}, compute_bound {sc} samples: share {share:.3f}, published "
          f"[{lo:.3f}, {hi:.3f}]")
    assert lo - 0.02 <= share <= hi + 0.02, (share, (lo, hi), out)


# ---- CPI of compression code ---------------------------------------------------------------

@pytest.fixture(scope="module")
def cpi_session(tmp_path_factory, built):
    (model,) = {c.model for c in S.COMPRESSION_CPI}
    return timing_boot(tmp_path_factory, model)


@pytest.mark.guest
@pytest.mark.parametrize("program", [c.program for c in S.COMPRESSION_CPI])
def test_compression_cpi_is_within_the_published_range(cpi_session, program):
    """busybox gzip -9 and bzip2 in the guest (0F_02, timing=memory): CPI within the
    published CPI of SPEC CPU2000's gzip and bzip2 on a Northwood Xeon over their inputs,
    widened by silicon.CPI_WIDEN each way (emulator/silicon.py says why)."""
    (c,) = [c for c in S.COMPRESSION_CPI if c.program == program]
    got = P.parse_stat_csv(cpi_session.sec(program).text)
    instr = next((v.value for k, v in got.items() if k.startswith("instructions")), None)
    cycles = next((v.value for k, v in got.items() if k.startswith("cycles")), None)
    assert instr and cycles, cpi_session.sec(program).text
    cpi = cycles / instr
    lo, hi = c.band()
    print(f"{program}: CPI {cpi:.3f} ({cycles} / {instr}); published {c.range}, "
          f"band [{lo:.3f}, {hi:.3f}]")
    assert c.holds(cpi), (program, cpi, (lo, hi))


# ---- the SSE input assists --------------------------------------------------------------


def denorm_assists(arch: str) -> dict[str, int]:
    """The assists one iteration of the denorm workload's loop requests, by clock field: its
    instructions from _start to the loop's end replayed from the ELF's bytes
    (tests/guests/sse_inputs.py, emulator/fp_assist.py)."""
    img = L.image(str(W.build_dir(arch) / "denorm"))
    start, loop, end = (img.symbols[k] for k in ("_start", "denorm_loop", "denorm_loop_end"))
    got = sse_inputs.assists(img, [img.insns[a] for a in sorted(img.insns) if start <= a < end])
    return {f: sum(1 for a, g in got.items() if g == f and a >= loop)
            for f in ("sse_assist", "x87_prea", "x87_poau")}


@pytest.mark.guest
def test_input_assists_by_raw_event_are_the_models(chase_session):
    """perf stat of SSE_input_assist and x87_assist PREA|POAU by raw encoding, in one run, on
    the denorm workload: exactly the assists its loop requests per iteration (two SSE: a
    packed single and a scalar double with a denormal input; x87: a denormal single loaded
    and stored again), on both models, 32- and 64-bit."""
    model, _, s = chase_session
    per = denorm_assists(ARCH[model])
    assert per == {"sse_assist": 2, "x87_prea": 1, "x87_poau": 1}, per
    stat = P.parse_stat_csv(s.sec("denorm").text)
    for (event, *bits), want in ((("SSE_input_assist", "ALL"), per["sse_assist"]),
                                 (("x87_assist", "PREA", "POAU"),
                                  per["x87_prea"] + per["x87_poau"])):
        raw = P.raw_event(event, *bits)
        assert raw in stat and stat[raw].value is not None, s.sec("denorm").text
        assert stat[raw].running_pct == 100.0, stat[raw]  # (not multiplexed)
        assert stat[raw].value == want * DENORM_N, (model, event, stat[raw].value)
        assert event not in s.stderr  # modelled: no notice
