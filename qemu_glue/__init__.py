"""p4pmu.qemu_glue"""
