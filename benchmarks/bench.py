"""patchkit's benchmark: whole commands, side by side with their floors, in one run.

    python benchmarks/bench.py --mirror build/sglang-mirror [--flashinfer-mirror DIR] [--vllm-mirror DIR]

1. generate over every tag of each mirror given (SGLang, FlashInfer, vLLM), against
   - its parse limit: LibCST's parse of each distinct candidate Python blob once, plus one
     interpreter start with libcst, GitPython, jinja2 and click imported, and
   - the checkout loop: check out each tag in a clone and read the candidate files
     (the floor of any work-tree approach);
2. apply, verify and revert as whole processes: on a clone of one SGLang release (one
   project), and with ``--python`` on one virtualenv holding the sglang and
   flashinfer-python wheels (two projects, every fix) and on the official image's layout
   (an editable SGLang checkout and FlashInfer's wheel, every fix), against
   ``python -c "import click"`` (the floor of any click program);
3. scan of one SGLang release, against its grep floor: ``git grep -c`` of the prefilter's
   words plus ``python -c pass``;
4. diagnose of a 200 MB log (real SGLang noise repeated, a KeyError: 12 in its middle, the
   logging traceback at its end), against ``grep -c`` of the texts it looks for over the same
   file plus ``python -c pass``; and of 10^6 short tracebacks (44 MB, every line a traceback's),
   against a Python loop that decodes each line and makes one call per line (LINE_LOOP);
5. doctor with ``--python`` on that virtualenv and the stand-in ``nvidia-smi`` of 8 PCIe
   RTX PRO 6000 (tests/gpus/standin.py), against the click floor plus the stand-in's own
   two answers (``--query-gpu`` and ``topo -m``);
6. kernels over the six shared objects of the real sglang-kernel 0.4.10 wheel, against cuobjdump's
   ``--list-elf`` and ``--list-ptx`` over the same files;
7. the peak memory (max RSS) of each.

Every figure is a median over repeated runs, all in one run of this script (a command's ratio to
the click floor: the median of its rounds' ratios, 21 rounds); the ratios
are the headline, absolute times are this machine's.  A command and its floor are measured
in the same rounds (the floor, then the commands, again and again), so that a machine that
other work loads unevenly loads both alike.  Prints a markdown table with each target and
whether it is met; ``--only commands,doctor`` runs those parts alone.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The release mirrors and the image layout are test tooling (tests/support/), not patchkit.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

TIME = Path("/usr/bin/time").exists()
GREP_WORDS = r"capab|major|sm_?ver|\bsm\b|\bcc\b|\bcap\b|arch|is_(sm|hopper|blackwell)"  # the prefilter's words (capabilities, flags)


def measure(cmd: list[str], cwd: Path | None = None, check: bool = True, env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one whole process, under ``/usr/bin/time -f %M``
    (a child forked from this Python would count the parent's shared pages until exec)."""
    wrapped = ["/usr/bin/time", "-f", "%M", *cmd] if TIME else cmd
    start = time.perf_counter()
    done = subprocess.run(wrapped, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    err = done.stderr.decode(errors="replace").strip().splitlines()
    if check and done.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {done.returncode}: {' '.join(err)[-300:]}")
    return elapsed, int(err[-1]) if TIME and err and err[-1].isdigit() else 0


class Row:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.rss: list[int] = []

    def add(self, sample: tuple[float, int]) -> None:
        self.times.append(sample[0])
        self.rss.append(sample[1])

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mib(self) -> str:
        return f"{max(self.rss) / 1024:.0f} MiB" if self.rss and max(self.rss) else ""


def sample(cmd: list[str], runs: int, **kw) -> Row:
    row = Row()
    for _ in range(runs):
        row.add(measure(cmd, **kw))
    return row


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 1 else f"{seconds * 1000:.1f} ms"


def verdict(ratio: float, target: float, at_most: bool = True) -> str:
    met = ratio <= target if at_most else ratio >= target
    return f"**{ratio:.2f}x** ({'≤' if at_most else '≥'} {target:g}x: {'met' if met else 'missed'})"


# -- 1. generate ---------------------------------------------------------------------------


def parse_sum(mirror: Path, globs: tuple[str, ...], runs: int) -> tuple[float, int]:
    """Median over runs of LibCST's summed parse time of every distinct candidate Python blob.

    Only Python files are parsed: a backport's other files (FlashInfer's CUDA sources) are
    patched as text, which LibCST cannot parse and generate never asks it to."""
    import libcst

    from patchkit.git.objects import GitSource

    source = GitSource(mirror)
    blobs: dict[str, bytes] = {}
    for tag in source.release_tags():
        for f in source.files(tag, globs):
            if f.path.endswith(".py"):
                blobs.setdefault(f.blob, b"")
    blobs = source.read_many(sorted(blobs))
    sums = []
    for _ in range(runs):
        start = time.perf_counter()
        for data in blobs.values():
            libcst.parse_module(data)
        sums.append(time.perf_counter() - start)
    return statistics.median(sums), len(blobs)


def checkout_loop(mirror: Path, globs: tuple[str, ...], work: Path) -> str:
    clone = work / f"loop-{mirror.name}"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], check=True)
    tags = subprocess.run(["git", "-C", str(mirror), "tag", "--list", "v*"], capture_output=True, text=True, check=True).stdout.split()
    return f"""
import glob, subprocess
for tag in {tags!r}:
    subprocess.run(["git", "-C", {str(clone)!r}, "checkout", "-q", "-f", tag], check=True)
    for pattern in {globs!r}:
        for path in glob.glob({str(clone)!r} + "/" + pattern):
            open(path, "rb").read()
"""


def bench_generate(project: str, mirror: Path, pk: str, runs: int, loop_runs: int, work: Path, start_libs: Row) -> list[str]:
    from patchkit.fixes.registry import PROJECTS

    globs = PROJECTS[project].files
    gen = Row()
    for i in range(runs):
        gen.add(measure([pk, "generate", "--project", project, "--repo", str(mirror), "--out", str(work / f"gen-{project}-{i}")]))
    parse, distinct = parse_sum(mirror, globs, runs)
    limit = parse + start_libs.median
    loop = sample([sys.executable, "-c", checkout_loop(mirror, globs, work)], loop_runs)
    tags = len(subprocess.run(["git", "-C", str(mirror), "tag", "--list", "v*"], capture_output=True, text=True).stdout.split())
    label = PROJECTS[project].label
    return [
        f"| {label}: patchkit generate, {tags} tags | {ms(gen.median)} | {gen.mib} | {verdict(gen.median / limit, 1.5)} its parse limit; "
        f"{verdict(loop.median / gen.median, 30, at_most=False)} faster than the checkout loop |",
        f"| {label}: parse limit ({distinct} distinct Python blobs + start with the libraries) | {ms(limit)} | | |",
        f"| {label}: checkout loop | {ms(loop.median)} | {loop.mib} | |",
    ]


# -- 2. apply, verify, revert ---------------------------------------------------------------


def environment(work: Path, sglang: str, flashinfer: str) -> str:
    """A virtualenv holding the sglang and flashinfer-python wheels; its python."""
    from support.mirror import default_cache, fetch_wheel

    wheels = [fetch_wheel(sglang, default_cache()), fetch_wheel(flashinfer, default_cache(), "flashinfer-python")]
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *map(str, wheels)], check=True)
    return str(venv / "bin/python")


def image_layout(work: Path, sglang: str, flashinfer: str) -> str:
    """SGLang's official image's layout: a shallow clone at the tag of the release's real
    files, ``pip install -e python``, FlashInfer's wheel beside it; its python."""
    from support.image import pip_editable, release_repo, shallow_clone
    from support.mirror import default_cache, fetch_wheel

    checkout = shallow_clone(release_repo(work / "origin", sglang), f"v{sglang}", work / "image/sglang")
    venv = work / "image/env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    pip_editable(venv / "bin/python", checkout)
    wheel = fetch_wheel(flashinfer, default_cache(), "flashinfer-python")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", "--no-deps", str(wheel)], check=True)
    return str(venv / "bin/python")


def bench_commands(mirror: Path, pk: str, version: str, flashinfer: str, runs: int, work: Path) -> list[str]:
    """Each round runs the click floor, then the commands: on a machine that other work loads
    unevenly, a command and its floor are measured under the same load."""
    repo = work / "sglang"
    subprocess.run(["git", "clone", "-q", "-b", f"v{version}", str(mirror), str(repo)], check=True, capture_output=True)
    python = environment(work, version, flashinfer)
    image = image_layout(work, version, flashinfer)
    click = Row()
    rows = {k: Row() for k in ("apply", "verify", "revert", "env apply", "env verify", "env revert", "image apply", "image verify", "image revert")}
    for _ in range(runs):  # each round: the floor, then every command (the ratios are taken round by round)
        click.add(measure([sys.executable, "-c", "import click"]))
        rows["apply"].add(measure([pk, "apply", str(repo), "--no-generate"]))
        rows["verify"].add(measure([pk, "verify", str(repo)]))
        rows["revert"].add(measure([pk, "revert", str(repo)]))
        rows["env apply"].add(measure([pk, "apply", "--python", python, "--all-fixes", "--no-generate"]))
        rows["env verify"].add(measure([pk, "verify", "--python", python]))
        rows["env revert"].add(measure([pk, "revert", "--python", python]))
        rows["image apply"].add(measure([pk, "apply", "--python", image, "--all-fixes", "--no-generate"]))
        rows["image verify"].add(measure([pk, "verify", "--python", image, "--all-fixes"]))
        rows["image revert"].add(measure([pk, "revert", "--python", image]))
    floor = click.median
    out = [f"| `python -c \"import click\"` (the click floor) | {ms(floor)} | {click.mib} | 1.00x |"]
    # The ratio of a command to the floor is the median of its rounds' ratios (each command and the floor
    # timed in the same round, one after the other): a machine whose speed drifts moves both alike.
    for name, label in (("apply", "apply, one project (SGLang checkout)"), ("verify", "verify, one project"),
                        ("revert", "revert, one project"), ("env apply", "apply --python, two projects, every fix"),
                        ("env verify", "verify --python, two projects"), ("env revert", "revert --python, two projects"),
                        ("image apply", "apply --python, image layout (editable SGLang + FlashInfer wheel), every fix"),
                        ("image verify", "verify --python --all-fixes, image layout"), ("image revert", "revert --python, image layout")):
        r = rows[name]
        target = 2 if " " not in name else 3  # issue 43: one project within 2x the floor, an environment within 3x
        ratio = statistics.median(t / c for t, c in zip(r.times, click.times, strict=True))
        out.append(f"| {label} | {ms(r.median)} | {r.mib} | {verdict(ratio, target)} the click floor |")
    return out


# -- 3. scan --------------------------------------------------------------------------------


def bench_scan(mirror: Path, pk: str, tag: str, runs: int, work: Path, start: Row) -> list[str]:
    tree = work / "scan"
    subprocess.run(["git", "clone", "-q", "-b", tag, str(mirror), str(tree)], check=True, capture_output=True)
    scan = sample([pk, "scan", str(tree / "python")], runs, check=False)
    grep = sample(["git", "-C", str(tree), "grep", "-c", "-i", "-E", GREP_WORDS, "--", "*.py"], runs)
    floor = grep.median + start.median
    return [
        f"| scan of SGLang {tag[1:]} | {ms(scan.median)} | {scan.mib} | {verdict(scan.median / floor, 3)} its grep floor |",
        f"| grep floor (`git grep -c` of the prefilter's words + `python -c pass`) | {ms(floor)} | {grep.mib} | |",
    ]


# -- 4. diagnose ----------------------------------------------------------------------------

# The floor of any reader that looks at every line in Python: decode each line, one call per line.
LINE_LOOP = """
import sys
look = lambda number, text: None
for number, line in enumerate(open(sys.argv[1], "rb"), 1):
    look(number, line.decode("utf-8", "replace"))
"""


def bench_diagnose(pk: str, runs: int, work: Path, start: Row) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from logs import real_text as r  # the tests' logs, built from real text

    from patchkit.logs.match import needles

    log = work / "server.log"
    noise = r.log(*([r.DECODE, r.ACCESS] * 2000))
    with open(log, "wb") as f:
        for i in range((200 << 20) // len(noise) + 1):
            f.write(noise + (r.log(r.KEYERROR) if i == (100 << 20) // len(noise) else b""))
        f.write(r.log(r.CHILD_FAILED, r.LOGGING_TAIL))
    diagnose = sample([pk, "diagnose", str(log)], runs, check=False)
    patterns = [a for n in needles() for a in ("-e", n.decode())]
    grep = sample(["grep", "-c", "-F", *patterns, str(log)], runs)
    floor = grep.median + start.median
    tracebacks = work / "tracebacks.log"  # a log that is nothing but tracebacks: each line is read by the traceback reader
    tracebacks.write_bytes(b"Traceback (most recent call last):\nKeyError\n" * 10**6)
    many = sample([pk, "diagnose", str(tracebacks)], max(3, runs // 3), check=False)
    loop = sample([sys.executable, "-c", LINE_LOOP, str(tracebacks)], max(3, runs // 3))
    return [
        f"| diagnose of a {log.stat().st_size >> 20} MB log | {ms(diagnose.median)} | {diagnose.mib} | {verdict(diagnose.median / floor, 2)} its grep floor |",
        f"| grep floor (`grep -c -F` of the texts diagnose looks for + `python -c pass`) | {ms(floor)} | {grep.mib} | |",
        f"| diagnose of 10^6 short tracebacks ({tracebacks.stat().st_size // 10**6} MB) | {ms(many.median)} | {many.mib} |"
        f" {verdict(many.median / loop.median, 10)} its line loop |",
        f"| line loop (a Python loop over its lines: decode each, one call each) | {ms(loop.median)} | {loop.mib} | |",
    ]


# -- 5. doctor ------------------------------------------------------------------------------


def bench_doctor(pk: str, version: str, flashinfer: str, runs: int, work: Path) -> list[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "gpus"))
    from standin import QUERY_ARGS, standin  # the stand-in nvidia-smi the tests use

    python = environment(work / "doctor", version, flashinfer)
    env = {**os.environ, **standin(work / "doctor", "rtxpro6000-8pcie")}
    smi = str(work / "doctor" / "bin" / "nvidia-smi")
    click, query, topo, doctor = Row(), Row(), Row(), Row()
    for _ in range(runs):  # each round under the same load, as bench_commands
        click.add(measure([sys.executable, "-c", "import click"]))
        query.add(measure([smi, *QUERY_ARGS.split()], env=env))
        topo.add(measure([smi, "topo", "-m"], env=env))
        doctor.add(measure([pk, "doctor", "--python", python], check=False, env=env))  # exit 1: a fix is missing
    floor = click.median + query.median + topo.median
    return [
        f"| doctor --python, 8 PCIe GPUs (stand-in nvidia-smi), two projects | {ms(doctor.median)} | {doctor.mib} | "
        f"{verdict(doctor.median / floor, 2)} its floor |",
        f"| doctor's floor: the click floor + the stand-in's `--query-gpu` ({ms(query.median)}) and `topo -m` ({ms(topo.median)}) | {ms(floor)} | | |",
    ]


# -- 7. kernels -----------------------------------------------------------------------------


def bench_kernels(pk: str, runs: int, work: Path) -> list[str]:
    """``patchkit kernels`` over the six shared objects of the real sglang-kernel 0.4.10 wheel (1.2 GB
    unpacked), against ``cuobjdump --list-elf`` and ``--list-ptx`` over the same files (NVIDIA's
    nvidia-cuda-cuobjdump wheel), page cache warm: what both read is read once before the runs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernels"))
    from oracle import WHEEL_SO, cuobjdump, extract  # the tests' oracle: wheels fetched once, cached

    files = [str(extract(member, work / "kernels")) for member in WHEEL_SO]
    size = sum(Path(f).stat().st_size for f in files)
    tool = str(cuobjdump())  # one file per run: it takes no more
    listing = [pk, "kernels", *files, "--to-cc", "12.0"]
    oracle = [[tool, option, f] for f in files for option in ("--list-elf", "--list-ptx")]
    for cmd in (listing, *oracle):
        measure(cmd, check=False)  # warm the page cache
    kernels = sample(listing, runs, check=False)  # exit 1: flash_ops.abi3.so has no code for 12.0
    floor = Row()
    for _ in range(runs):
        each = [measure(cmd) for cmd in oracle]
        floor.add((sum(t for t, _ in each), max(m for _, m in each)))
    return [
        f"| kernels over sglang-kernel 0.4.10's 6 .so files ({size >> 20} MiB) | {ms(kernels.median)} | {kernels.mib} | "
        f"{verdict(kernels.median / floor.median, 0.2)} cuobjdump |",
        f"| cuobjdump 13.4 `--list-elf` and `--list-ptx` of each of the same files | {ms(floor.median)} | {floor.mib} | |",
    ]


SECTIONS = ("generate", "commands", "scan", "diagnose", "doctor", "kernels")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True, help="the SGLang mirror")
    parser.add_argument("--flashinfer-mirror", type=Path, default=None)
    parser.add_argument("--vllm-mirror", type=Path, default=None)
    parser.add_argument("--patchkit", default=str(Path(sys.executable).with_name("patchkit")))
    parser.add_argument("--version", default="0.5.9", help="the SGLang release for apply, verify and revert")
    parser.add_argument("--flashinfer-version", default="0.6.4")
    parser.add_argument("--scan-tag", default="v0.5.23")
    parser.add_argument("--runs", type=int, default=11, help="runs per command")
    parser.add_argument("--command-runs", type=int, default=21, help="rounds of apply, verify and revert with their floor")
    parser.add_argument("--generate-runs", type=int, default=5)
    parser.add_argument("--loop-runs", type=int, default=2)
    parser.add_argument("--kernels-runs", type=int, default=5, help="runs of kernels and of cuobjdump (seconds each)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"the parts to run, of {','.join(SECTIONS)} [default: all]")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if not only <= set(SECTIONS):
        parser.error(f"--only: {', '.join(sorted(only - set(SECTIONS)))} is none of {', '.join(SECTIONS)}")

    py, pk = sys.executable, args.patchkit
    work = Path(tempfile.mkdtemp(prefix="patchkit-bench-"))
    try:
        start = sample([py, "-c", "pass"], args.runs)
        rows = []
        if "generate" in only:
            start_libs = sample([py, "-c", "import libcst, git, jinja2, click"], args.runs)
            for project, mirror in (("sglang", args.mirror), ("flashinfer", args.flashinfer_mirror), ("vllm", args.vllm_mirror)):
                if mirror is not None and mirror.is_dir():
                    rows += bench_generate(project, mirror.resolve(), pk, args.generate_runs, args.loop_runs, work, start_libs)
        if "commands" in only:
            rows += bench_commands(args.mirror.resolve(), pk, args.version, args.flashinfer_version, args.command_runs, work)
        if "scan" in only:
            rows += bench_scan(args.mirror.resolve(), pk, args.scan_tag, args.runs, work, start)
        if "diagnose" in only:
            rows += bench_diagnose(pk, args.runs, work, start)
        if "doctor" in only:
            (work / "doctor").mkdir()
            rows += bench_doctor(pk, args.version, args.flashinfer_version, args.runs, work)
        if "kernels" in only:
            rows += bench_kernels(pk, args.kernels_runs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}; medians of {args.generate_runs} (generate), {args.loop_runs} "
        f"(checkout loops), {args.command_runs} (apply, verify, revert: each ratio the median of the rounds' ratios) "
        f"and {args.runs} runs (the rest), all in this one run.\n"
    )
    print("| what | median | peak RSS | ratio (target) |\n|---|---:|---:|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
