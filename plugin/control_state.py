"""What the control channel (plugin/control.py; docs/gdb.md) does with the bridge's PMUs: bring
every vCPU's counting up to date, describe the PMU state of a vCPU, write a register with
the model's validation, name registers and counters, describe a stop, start and end a trace.

Every function that touches PMU state runs while all vCPUs are parked (control.py
`_stopped`), so it may use the bridge's Python calls as a vCPU's own call would.
"""
from __future__ import annotations

from p4pmu.emulator import decode
from p4pmu.emulator import tables as T


class RequestError(Exception):
    """A control request that cannot be served: the message is the answer's `error`."""


def sync(bridge, lib) -> None:
    """Every vCPU's activity up to its stop folded and counted (the deadline's work)."""
    if bridge.feeder is None:
        return
    for vcpu in range(bridge.control_vcpus()):
        if lib.p4c_control_fold(vcpu):  # (a vCPU not started yet has nothing to fold)
            bridge.deadline(vcpu)


def register(bridge, reg) -> int:
    """A register given by name (with or without MSR_) or address (int or "0x...") -> MSR."""
    if isinstance(reg, int) and not isinstance(reg, bool):
        msr = reg
    elif isinstance(reg, str) and reg.strip():
        text = reg.strip()
        try:
            msr = int(text, 0)
        except ValueError:
            msr = decode.register_msrs().get(decode.bare_name(text))
            if msr is None:
                raise RequestError(f"no PMU register named {text!r} (names as in the SDM, "
                                   f"e.g. IQ_CCCR0 or MSR_BSU_ESCR0)") from None
    else:
        raise RequestError("\"reg\" must be a register name or an address")
    if decode.register_name(msr, bridge.model) is None:
        raise RequestError(f"0x{msr:X} is no PMU register of model {bridge.model.key}")
    return msr


def counter(bridge, value) -> int:
    """A counter given by index 0-17 or by name (IQ_COUNTER4, MSR_IQ_COUNTER4) -> index."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        msr = register(bridge, value)
        if not T.COUNTER_BASE <= msr < T.COUNTER_BASE + T.NUM_COUNTERS:
            raise RequestError(f"{value!r} is not a counter")
        return msr - T.COUNTER_BASE
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise RequestError("\"counter\" is an index 0-17 or a counter name") from None
    if not 0 <= n < T.NUM_COUNTERS:
        raise RequestError(f"counter {n}: the counters are 0-{T.NUM_COUNTERS - 1}")
    return n


def name(msr: int) -> str:
    return decode.bare_name(decode.register_name(msr) or f"0x{msr:X}")


def counter_name(n: int) -> str:
    return name(T.COUNTER_BASE + n)


def _reg(bridge, msr: int, value: int) -> dict:
    return {"name": name(msr), "msr": msr, "value": value,
            "text": decode.describe(msr, value, bridge.model),
            "fields": decode.fields(msr, value, bridge.model)}


def _escr(bridge, pmu, slot: int) -> dict:
    e = pmu.escrs[slot]
    value = int(pmu.escr_raw[slot])
    d = _reg(bridge, e.msr, value)
    ev = decode.E.event_for(e.name, T.ESCR_FIELD["EVENT_SELECT"].get(value), bridge.model.model)
    d["event"] = ev.name if ev is not None else None
    return d


def state(bridge, vcpu: int | None, lvt_of) -> dict:
    """The `state` answer (docs/gdb.md): one entry per vCPU asked for."""
    n_vcpus = bridge.control_vcpus()
    if vcpu is not None and not 0 <= vcpu < n_vcpus:
        raise RequestError(f"no vCPU {vcpu} (vCPUs 0-{n_vcpus - 1})")
    out = []
    for v in ([vcpu] if vcpu is not None else range(n_vcpus)):
        pmu = bridge.pmu_of(v)
        core, lp = bridge.core_lp(v)
        running, cascade = pmu.running(), pmu.in_cascade_mode()
        counters = []
        for c in T.COUNTERS:
            n = c.index
            slot = int(pmu.escr_index[n])
            counters.append({
                "n": n, "name": name(c.counter_msr), "msr": c.counter_msr,
                "value": int(pmu.counter[n]), "ovf": bool(pmu.ovf[n]),
                "counting": bool(running[n]), "cascade": bool(cascade[n]),
                "cccr": _reg(bridge, c.cccr_msr, int(pmu.rdmsr(lp, c.cccr_msr))),
                "escr": _escr(bridge, pmu, slot) if slot >= 0 else None})
        out.append({"vcpu": v, "core": core, "lp": lp, "lvt": lvt_of(v),
                    "pmi_pending": bool(pmu.pmi_request(lp)), "counters": counters,
                    "escrs": [_escr(bridge, pmu, s) for s in range(len(pmu.escrs))]})
    return {"vcpus": out, "findings": list(bridge.findings)}


def write(bridge, vcpu: int, msr: int, value: int) -> dict:
    """A register written as the guest's WRMSR would (the model's validation: a value the
    hardware faults is refused with the reason); vCPU `vcpu` steps at its next block entry."""
    if not 0 <= vcpu < bridge.control_vcpus():
        raise RequestError(f"no vCPU {vcpu}")
    if not 0 <= value < 1 << 64:
        raise RequestError(f"value {value:#x} does not fit 64 bits")
    ok, old, reason = bridge.host_wrmsr(vcpu, msr, value)
    if not ok:
        raise RequestError(f"refused: the hardware would fault (#GP): {reason}")
    bridge.control_changed(vcpu)
    return {"reg": name(msr), "msr": msr, "old": old, "value": value,
            "text": decode.describe(msr, value, bridge.model)}


def describe_stop(stop, kind_names: dict, ops: dict) -> dict:
    """The `why` answer from the C side's struct p4c_stop."""
    kind = kind_names.get(int(stop.kind), "?")
    d = {"seq": int(stop.seq), "kind": kind, "vcpu": int(stop.vcpu), "number": int(stop.number),
         "pc": int(stop.pc), "later": int(stop.later)}
    if kind == "overflow":
        d.update(counter=int(stop.counter), counter_name=counter_name(int(stop.counter)))
        what = f"counter {stop.counter} ({d['counter_name']}) overflowed"
    elif kind == "pmi":
        d["vector"] = int(stop.vector)
        mode = "NMI" if (stop.vector >> 8) & 7 == 4 else f"vector 0x{stop.vector & 0xFF:X}"
        what = f"PMI delivered ({mode})"
    else:
        op = ops.get(int(stop.op), "?")
        d.update(op=op, msr=int(stop.msr), fault=bool(stop.fault), value=int(stop.value))
        reg = f"ECX=0x{stop.msr:X}" if op == "rdpmc" else name(int(stop.msr))
        d["reg"] = reg
        what = f"{op.upper()} {reg}" + (" faulted (#GP)" if stop.fault else
                                       f" = 0x{stop.value:X}")
    d["text"] = (f"P4PMU breakpoint {stop.number}: {what} on vCPU {stop.vcpu} at "
                 f"0x{stop.pc:X}" + (f" ({stop.later} more events while stopping)"
                                     if stop.later else ""))
    return d
