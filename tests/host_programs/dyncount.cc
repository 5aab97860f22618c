// dyncount++ N: dyncount.c's loop in a dynamically linked C++ program (libstdc++, iostream,
// a std::vector and an exception thrown and caught: what the host's libstdc++ and libgcc_s
// must do in the guest).
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "spin.h"

int main(int argc, char **argv)
{
    std::vector<std::string> args(argv, argv + argc);
    try {  // an exception thrown and caught on every run: libgcc_s's unwinder at work
        (void)std::stoul("not a number");
    } catch (const std::invalid_argument &) {
    }
    if (args.size() != 2) {
        std::cerr << "usage: dyncount++ N" << std::endl;
        return 2;
    }
    unsigned long n = std::stoul(args[1]);
    std::cout << "dyncount++ " << n << ": " << std::hex << spin(n) << std::endl;
    return 0;
}
