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

With --since REV, only the units that the changes since REV (commits and the working tree)
can give findings to are analysed: each changed unit, and for each changed header one unit that
includes it (the unit of the same name, else the first in path order: a finding in a header is
reported through any unit that includes it). A change to a .clang-tidy, to the flags (the top
CMakeLists.txt, cmake/, CMakePresets.json) or to this tool, or a REV that is not an ancestor of
HEAD, analyses everything. What a header change does to the findings of the units that include
it and did not change is left to the full run, which REV records (.ci/tidy-base).

Usage: tidy-run.py REGEX LOG [--since REV]
exit 0 clean, 1 findings (in LOG), 2 a failure to run
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


FULL_RUN = re.compile(r"(^|/)\.clang-tidy$|^CMakeLists\.txt$|^cmake/|^CMakePresets\.json$|^\.ci/tidy(-run\.py)?$")


def git(*args):
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return r.stdout if r.returncode == 0 else None


def changed_since(rev):
    """Paths (relative to the root) changed since `rev`, or None when everything is to be analysed
    (with the reason)."""
    if git("merge-base", "--is-ancestor", rev, "HEAD") is None:
        return None, f"{rev} is not an ancestor of HEAD"
    diff = git("diff", "--name-only", rev)
    new = git("ls-files", "--others", "--exclude-standard")
    if diff is None or new is None:
        return None, "git cannot list the changes"
    paths = {p for p in (diff + new).splitlines() if p}
    full = sorted(p for p in paths if FULL_RUN.search(p))
    if full:
        return None, f"{full[0]} changed"
    return paths, ""


def includes_of_units(db):
    """Each unit's file -> the files it included when it was last built (ninja's deps log)."""
    out = subprocess.run(["ninja", "-C", str(BUILD), "-t", "deps"], capture_output=True, text=True,
                         check=False).stdout
    unit_of = {}
    for e in db:
        args = shlex.split(e["command"])
        if "-o" in args:
            unit_of[args[args.index("-o") + 1]] = e["file"]
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            current = unit_of.get(line.split(":", 1)[0])
            if current is not None:
                deps[current] = set()
        elif current is not None and line.strip():
            deps[current].add(os.path.normpath(line.strip()))
    return deps


def units_for_changes(units, paths):
    """The units to analyse for the changed `paths`, and a line saying why."""
    changed = {str(ROOT / p) for p in paths}
    own = [e for e in units if e["file"] in changed]
    deps = includes_of_units(units)
    chosen, headers = {e["file"] for e in own}, 0
    for header in sorted(changed - chosen):
        includers = sorted(f for f, d in deps.items() if header in d)
        if not includers:
            continue
        headers += 1
        stem = Path(header).stem
        same = [f for f in includers if Path(f).stem == stem]
        chosen.add((same or includers)[0])
    picked = [e for e in units if e["file"] in chosen]
    return picked, f"{len(own)} changed, {len(picked) - len(own)} more for {headers} changed headers"


def main():
    argv = sys.argv[1:]
    since = None
    if len(argv) == 4 and argv[2] == "--since":
        since, argv = argv[3], argv[:2]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    pattern, log = re.compile(argv[0]), Path(argv[1])
    db = json.loads((BUILD / "compile_commands.json").read_text())
    units = [e for e in db if pattern.search(e["file"])]
    if since is not None:
        paths, why = changed_since(since)
        if paths is None:
            print(f"clang-tidy: every unit ({why})")
        else:
            units, why = units_for_changes(units, paths)
            print(f"clang-tidy: the units changes since {since[:12]} reach ({why})")
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
