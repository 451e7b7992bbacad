#!/usr/bin/env python3
"""Compiles sources with clang's thread-safety analysis as errors.

usage: check_thread_safety.py CLANGXX COMPILE_COMMANDS_JSON SOURCE...

Each SOURCE is compiled with -fsyntax-only -Wthread-safety
-Werror=thread-safety and the include paths and definitions of the
libtrainsnap target (taken from its compile command in
COMPILE_COMMANDS_JSON, so that the check follows the build's flags). Exit
status 0 when every source passes; otherwise clang's diagnostics are printed
and the status is 1.
"""
import json
import shlex
import subprocess
import sys


def library_flags(compile_commands):
    for entry in json.load(open(compile_commands)):
        args = shlex.split(entry["command"])
        if "-Dtrainsnap_EXPORTS" not in args:
            continue
        flags, skip = [], False
        for arg in args[1:]:
            if skip:
                skip = False
            elif arg in ("-o", "-c", "-include"):
                skip = True  # and its argument (the object, source, precompiled header)
            elif arg.startswith("-I") or arg.startswith("-D") or arg.startswith("-std=") or arg == "-isystem":
                flags.append(arg)
            elif flags and flags[-1] == "-isystem":
                flags.append(arg)
        return flags
    sys.exit("no compile command of the trainsnap library in " + compile_commands)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    clang, compile_commands, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    flags = library_flags(compile_commands)
    failed = []
    for source in sources:
        command = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", *flags, source]
        result = subprocess.run(command, capture_output=True, text=True)
        # Other warnings (LibTorch's headers under clang) are not this check's concern.
        if result.returncode != 0:
            failed.append(source)
            sys.stderr.write(result.stderr)
        else:
            print("ok  " + source)
    if failed:
        print("thread-safety errors in: " + " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
