#!/usr/bin/env python3
"""clang-tidy-19 over the translation units of build/default's compile database whose path
matches REGEX, on every core, with a cache of clean results (.ci/tidy calls it).

A translation unit found clean is remembered under $XDG_CACHE_HOME/tracer/tidy (default
~/.cache/tracer/tidy) by a key made of clang-tidy's version, every .clang-tidy from the
repository's root down to the file's directory, the compile command and the preprocessed
text of the unit (every header it includes, as it includes them). A unit with the same key is
clean again and is not analysed; any change to the file, a header it reaches, a flag or the
configuration changes the key. Findings are never cached: a unit with findings is analysed on
every run. TRACER_TIDY_CACHE=0 turns the cache off.

Usage: tidy-run.py REGEX LOG    exit 0 clean, 1 findings (in LOG), 2 a failure to run
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "default"
TIDY = "clang-tidy-19"
FINDING = re.compile(r"(warning|error): ")


def cache_dir():
    if os.environ.get("TRACER_TIDY_CACHE", "1") == "0":
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    d = base / "tracer" / "tidy"
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if d.is_symlink() or not os.access(d, os.W_OK):
            return None
    except OSError:
        return None
    return d


def configs_for(path):
    """The .clang-tidy files of the repository's root and of each directory down to `path`'s."""
    try:
        rel = Path(path).resolve().relative_to(ROOT)
    except ValueError:
        return []
    dirs = [ROOT] + [ROOT.joinpath(*rel.parts[: i + 1]) for i in range(len(rel.parts) - 1)]
    return [d / ".clang-tidy" for d in dirs if (d / ".clang-tidy").is_file()]


def preprocess_command(command):
    """The compile command turned into `-E -P` to standard output."""
    args, skip = [], False
    for a in shlex.split(command):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        args.append(a)
    return args + ["-E", "-P"]


def key_of(entry, version):
    h = hashlib.sha256()
    h.update(version)
    for f in configs_for(entry["file"]):
        h.update(f.read_bytes())
    h.update(entry["command"].encode())
    pre = subprocess.run(preprocess_command(entry["command"]), cwd=entry["directory"],
                         capture_output=True, check=False)
    if pre.returncode != 0:
        return None  # no key: analyse it
    h.update(pre.stdout)
    return h.hexdigest()


def check(entry, version, cache):
    key = key_of(entry, version) if cache is not None else None
    if key is not None and (cache / key).exists():
        return entry["file"], "", True
    r = subprocess.run([TIDY, "-p", str(BUILD), "--quiet", entry["file"]], capture_output=True,
                       text=True, check=False)
    text = r.stdout + r.stderr
    findings = any(
        FINDING.search(line) and "warnings generated" not in line for line in text.splitlines())
    if not findings and r.returncode == 0 and key is not None:
        try:
            (cache / key).touch()
        except OSError:
            pass
    return entry["file"], text, False


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    pattern, log = re.compile(sys.argv[1]), Path(sys.argv[2])
    db = json.loads((BUILD / "compile_commands.json").read_text())
    units = [e for e in db if pattern.search(e["file"])]
    version = subprocess.run([TIDY, "--version"], capture_output=True, check=True).stdout
    cache = cache_dir()
    hits = 0
    with log.open("w") as out, concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for file, text, hit in pool.map(lambda e: check(e, version, cache), units):
            hits += hit
            if text.strip():
                out.write(f"== {file}\n{text}\n")
    where = f"cache {cache}" if cache is not None else "no cache"
    print(f"clang-tidy: {len(units)} units, {hits} clean as before ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
