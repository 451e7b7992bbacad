#!/usr/bin/env python3
"""Compiles sources with clang's thread-safety analysis as errors.

usage: check_thread_safety.py CLANGXX COMPILE_COMMANDS_JSON SOURCE...

Each SOURCE is compiled with -fsyntax-only -Wthread-safety
-Werror=thread-safety and the include paths and definitions of its own
compile command in COMPILE_COMMANDS_JSON, or, for a source without one (the
library's sources are compiled in unity batches), those of the trainsnap_core
target; so the check follows the build's flags. Exit status 0 when every
source passes; otherwise clang's diagnostics are printed and the status is 1.
"""
import json
import os
import shlex
import subprocess
import sys


def compile_flags(args):
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


def flags_by_source(compile_commands):
    """(flags of each compiled file by its real path, the library's flags)."""
    by_file, library = {}, None
    for entry in json.load(open(compile_commands)):
        args = shlex.split(entry["command"])
        flags = compile_flags(args)
        by_file[os.path.realpath(os.path.join(entry["directory"], entry["file"]))] = flags
        if library is None and "/trainsnap_core.dir/" in entry["command"]:
            library = flags
    if library is None:
        sys.exit("no compile command of the trainsnap_core library in " + compile_commands)
    return by_file, library


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    clang, compile_commands, sources = sys.argv[1], sys.argv[2], sys.argv[3:]
    by_file, library = flags_by_source(compile_commands)
    failed = []
    for source in sources:
        flags = by_file.get(os.path.realpath(source), library)
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
