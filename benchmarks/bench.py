"""patchkit's benchmark: whole commands, side by side with their floors, in one run.

    python benchmarks/bench.py --mirror build/sglang-mirror --patchkit .venv/bin/patchkit

1. generate over every tag of the mirror, against
   - a loop that checks out each tag in a clone and reads the candidate files
     (the floor of any work-tree approach), and
   - the rewriter's parse time summed over the distinct blobs that hold a table
     (the limit), plus one interpreter start;
2. apply, verify, revert and status as whole processes on a clone of one real
   release, against ``python -c "import click"`` (the floor of any click program)
   and ``git apply`` of the same patch;
3. the peak memory (max RSS) of each.

Every figure is a median over repeated runs; ratios are the headline, absolute
times are this machine's.  Prints a markdown table.
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

HERE = Path(__file__).resolve().parent


TIME = shutil.which("time") and Path("/usr/bin/time").exists()


def measure(cmd: list[str], cwd: Path | None = None, check: bool = True) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one whole process.

    The peak RSS comes from ``/usr/bin/time -f %M``: a child forked straight from
    this (large) Python process would count the parent's pages it shares until exec.
    Every command, floors included, runs under the same wrapper.
    """
    wrapped = ["/usr/bin/time", "-f", "%M", *cmd] if TIME else cmd
    start = time.perf_counter()
    done = subprocess.run(wrapped, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    err = done.stderr.decode(errors="replace").strip().splitlines()
    code = done.returncode
    if check and code != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {code}: {' '.join(err)[-300:]}")
    rss = int(err[-1]) if TIME and err and err[-1].isdigit() else 0
    return elapsed, rss


class Row:
    def __init__(self, name: str) -> None:
        self.name = name
        self.times: list[float] = []
        self.rss: list[int] = []

    def add(self, sample: tuple[float, int]) -> None:
        self.times.append(sample[0])
        self.rss.append(sample[1])

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def peak_mib(self) -> float:
        return max(self.rss) / 1024 if self.rss else float("nan")


def checkout_loop_script(clone: Path, tags: list[str], globs: tuple[str, ...]) -> str:
    return f"""
import glob, subprocess
for tag in {tags!r}:
    subprocess.run(["git", "-C", {str(clone)!r}, "checkout", "-q", "-f", tag], check=True)
    for pattern in {globs!r}:
        for path in glob.glob({str(clone)!r} + "/" + pattern):
            open(path, "rb").read()
"""


def parse_limit(mirror: Path, tables: tuple[str, ...], globs: tuple[str, ...], runs: int) -> tuple[float, float, int, int]:
    """Median over runs of the summed libcst parse time of (a) every distinct candidate
    blob and (b) the distinct blobs that hold a table (the ones patchkit parses)."""
    import libcst

    from patchkit.git.objects import GitSource

    source = GitSource(mirror)
    blobs: dict[str, bytes] = {}
    for tag in source.release_tags():
        for f in source.files(tag, globs):
            if f.blob not in blobs:
                blobs[f.blob] = source.read(f.blob)
    holding = [data for data in blobs.values() if any(n.encode() in data for n in tables)]

    def summed(datas: list[bytes]) -> float:
        sums = []
        for _ in range(runs):
            start = time.perf_counter()
            for data in datas:
                libcst.parse_module(data)
            sums.append(time.perf_counter() - start)
        return statistics.median(sums)

    return summed(list(blobs.values())), summed(holding), len(blobs), len(holding)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, required=True)
    parser.add_argument("--patchkit", default=str(Path(sys.executable).with_name("patchkit")))
    parser.add_argument("--version", default="0.5.9", help="release for the checkout commands")
    parser.add_argument("--runs", type=int, default=15, help="runs per checkout command")
    parser.add_argument("--generate-runs", type=int, default=9)
    args = parser.parse_args()

    from patchkit.data import shipped
    from patchkit.fixes.registry import SGLANG

    py, pk, mirror = sys.executable, args.patchkit, args.mirror.resolve()
    tags = subprocess.run(["git", "-C", str(mirror), "tag", "--list", "v*"], capture_output=True, text=True, check=True).stdout.split()
    work = Path(tempfile.mkdtemp(prefix="patchkit-bench-"))
    try:
        # -- 1. generate -----------------------------------------------------------------
        gen, loop, start, start_libs = Row("patchkit generate (every tag)"), Row("checkout loop"), Row("python -c pass"), Row("python -c 'import libcst, git, jinja2, click'")
        for i in range(args.generate_runs):
            gen.add(measure([pk, "generate", "--repo", str(mirror), "--out", str(work / f"gen{i}")]))
            start.add(measure([py, "-c", "pass"]))
            start_libs.add(measure([py, "-c", "import libcst, git, jinja2, click"]))
        clone = work / "loop-clone"
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(mirror), str(clone)], check=True)
        script = checkout_loop_script(clone, tags, SGLANG.files)
        for _ in range(max(2, args.generate_runs // 2)):
            loop.add(measure([py, "-c", script]))
        parse_all, parse, distinct, holding = parse_limit(mirror, SGLANG.tables, SGLANG.files, args.generate_runs)

        # -- 2. checkout commands --------------------------------------------------------
        repo = work / "sglang"
        subprocess.run(["git", "clone", "-q", "-b", f"v{args.version}", str(mirror), str(repo)], check=True, capture_output=True)
        patch = next((shipped("patches") / args.version).glob("*.patch"))
        rows = {k: Row(k) for k in ("click", "apply", "verify", "status", "revert", "git apply", "verify (LibCST fallback)")}
        for _ in range(args.runs):
            rows["click"].add(measure([py, "-c", "import click"]))
            rows["verify (LibCST fallback)"].add(measure([pk, "verify", str(repo)], check=False))
            rows["apply"].add(measure([pk, "apply", str(repo), "--no-generate"]))
            rows["verify"].add(measure([pk, "verify", str(repo)]))
            rows["status"].add(measure([pk, "status", str(repo)]))
            rows["revert"].add(measure([pk, "revert", str(repo)]))
            rows["git apply"].add(measure(["git", "-C", str(repo), "apply", str(patch)]))
            measure(["git", "-C", str(repo), "apply", "-R", str(patch)])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    limit_all = parse_all + start.median
    limit = parse + start.median
    limit_libs = parse + start_libs.median
    floor = rows["click"].median
    out = [
        f"Machine: {platform.node() and 'this machine'}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}; "
        f"{len(tags)} tags, {distinct} distinct candidate blobs, {holding} holding a table; "
        f"checkout commands on SGLang {args.version}; medians of {args.generate_runs} (generate) and {args.runs} runs.",
        "",
        "| what | median | peak RSS | ratio |",
        "|---|---:|---:|---|",
        f"| patchkit generate, every tag | {gen.median * 1000:.0f} ms | {gen.peak_mib:.0f} MiB | |",
        f"| checkout loop (git checkout + read, every tag) | {loop.median * 1000:.0f} ms | {loop.peak_mib:.0f} MiB | generate is **{loop.median / gen.median:.1f}x faster** |",
        f"| parse of all {distinct} distinct candidate blobs + `python -c pass` | {limit_all * 1000:.0f} ms | | generate is **{gen.median / limit_all:.2f}x** |",
        f"| parse of the {holding} distinct blobs holding a table + `python -c pass` | {limit * 1000:.0f} ms | | generate is **{gen.median / limit:.2f}x** |",
        f"| parse of those {holding} + start with libcst, GitPython, jinja2, click imported | {limit_libs * 1000:.0f} ms | {start_libs.peak_mib:.0f} MiB | generate is **{gen.median / limit_libs:.2f}x** |",
        f"| `python -c \"import click\"` (floor of a click program) | {floor * 1000:.1f} ms | {rows['click'].peak_mib:.0f} MiB | 1.00x |",
    ]
    for name in ("apply", "verify", "revert", "status", "verify (LibCST fallback)"):
        r = rows[name]
        label = "verify, files not patched (LibCST evaluation)" if "fallback" in name else f"patchkit {name}"
        out.append(
            f"| {label} | {r.median * 1000:.1f} ms | {r.peak_mib:.0f} MiB | **{r.median / floor:.2f}x** click, "
            f"{r.median / rows['git apply'].median:.1f}x git apply |"
        )
    ga = rows["git apply"]
    out.append(f"| `git apply` of the same patch | {ga.median * 1000:.1f} ms | {ga.peak_mib:.0f} MiB | {ga.median / floor:.2f}x click |")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
