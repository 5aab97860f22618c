"""The bridge says each notice of emulator/notices.py once, on stderr and in the log
(no QEMU: the bridge's Python side alone; the guest tests see the same lines through QEMU)."""
from __future__ import annotations

from p4pmu.plugin.bridge import OK, Bridge, Options

FSB_ESCR0, BPU_CCCR0, BPU_COUNTER0 = 0x3A2, 0x360, 0x300
# IOQ_allocation ALL_READ|ALL_WRITE (no request type, memory type or agent: it selects none of
# the modelled bus requests), T0_OS|T0_USR, through FSB_ESCR0
BUS_ESCR, CCCR_ON = (0x03 << 25) | (0x60 << 9) | 0xC, 0x0003_D000


def test_a_notice_is_said_once_on_stderr_and_in_the_log(tmp_path, capsys):
    log = tmp_path / "pmu.log"
    b = Bridge(Options(log=str(log)))
    for _ in range(3):  # perf starts the event again and again: one warning
        assert b.wrmsr(0, FSB_ESCR0, BUS_ESCR) == OK
        assert b.wrmsr(0, BPU_CCCR0, CCCR_ON) == OK
        assert b.wrmsr(0, BPU_CCCR0, CCCR_ON & ~(1 << 12)) == OK
    b.counter_rewritten(0, BPU_COUNTER0, (1 << 40) - 5, 0)
    b.counter_rewritten(0, BPU_COUNTER0, (1 << 40) - 7, 0)
    b.close()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("p4pmu: warning:")]
    assert len(err) == 2, err
    assert "IOQ_allocation" in err[0] and "reads 0" in err[0]
    assert "p4_pmu_set_period" in err[1]
    text = log.read_text()
    assert text.count("# warning:") == 2
    assert b.rdmsr(0, BPU_CCCR0) == (OK, CCCR_ON & ~(1 << 12))  # the guest sees no difference


def test_replay_event_metrics_are_all_modelled(capsys):
    """replay_event NBOGUS under the tagged mispredicted-branch metric, Linux's
    L1-dcache-load-misses (01000001h, 1) and MOB_load_replay_retired (01000200h, 1; the
    memory model's store buffers): all modelled, no warning; and replay_event with no metric
    selected reads 0 on silicon too: no warning."""
    PEBS_ENABLE, MATRIX_VERT, CRU_ESCR2, IQ_CCCR1 = 0x3F1, 0x3F2, 0x3CC, 0x36D
    replay_escr = (0x09 << 25) | (1 << 9) | (1 << 2) | (1 << 3)  # replay_event NBOGUS, T0 OS+USR
    cccr = (1 << 12) | (5 << 13) | (3 << 16)  # ENABLE, ESCR_SELECT 5 (CRU_ESCR2), ANY thread
    b = Bridge(Options())
    assert b.wrmsr(0, CRU_ESCR2, replay_escr) == OK
    assert b.wrmsr(0, IQ_CCCR1, cccr) == OK  # no metric: no warning
    for pebs, vert in ((0x0101_8000, 0x10), (0x0100_0001, 0x1), (0x0100_0200, 0x1)):
        assert b.wrmsr(0, PEBS_ENABLE, pebs) == OK
        assert b.wrmsr(0, MATRIX_VERT, vert) == OK
        assert b.wrmsr(0, IQ_CCCR1, cccr) == OK
    b.close()
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("p4pmu: warning:")]
    assert err == [], err
