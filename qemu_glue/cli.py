def main(argv=None):
    print("p4pmu")
    return 0
