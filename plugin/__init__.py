"""p4pmu.plugin"""
