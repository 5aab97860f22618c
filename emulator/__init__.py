"""p4pmu.emulator"""
