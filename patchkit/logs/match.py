"""A log's lines against the failures patchkit knows (``patchkit.fixes.signatures``).

Feed a ``Matcher`` the lines of a log in order (all of them, or only the lines ``needles``
finds and the lines of each traceback after it); it keeps one ``Finding`` per distinct
failure or effect, counting repeats (eight TP ranks raise the same ``KeyError: 12``).

- a fix's signature: the fix, and the ``patchkit apply`` that applies it to the SGLang (and
  FlashInfer, vLLM) the traceback's frames ran;
- a known failure no patch fixes (a missing kernel image): the package the frames name and
  what to do instead;
- an effect (no multicast): what it means;
- a failure mode's sign (``fixes/modes.py``) that none of those names: the mode, and its ways out.

Every finding that belongs to a failure mode (a mode's sign, or a known failure's or a fix's finding
whose text holds a mode's sign) is one finding per mode: the texts of one
mode seen on eight ranks, or its exception and the tool's own line, are one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from fnmatch import fnmatchcase
from functools import lru_cache

from patchkit.cc import CC
from patchkit.fixes.modes import Mode, Sign
from patchkit.fixes.signatures import FailingPackage, Failure, Known, Signature, read_known
from patchkit.logs.origin import python_of, targets
from patchkit.logs.phases import READY, ready, sglang_record
from patchkit.logs.tracebacks import HEADER, Frame, Traceback, TracebackPart, TracebackReader
from patchkit.text import plain
from patchkit.types import StrEnum
from patchkit.values import Value


class Verdict(StrEnum):
    """What a finding is: a fix's failure, a known failure no patch fixes, or a fix's effect (a warning)."""

    FIX = "fix"
    FAILURE = "failure"
    EFFECT = "effect"
    MODE = "mode"  # a failure mode's sign that no fix or known failure names


FIX, FAILURE, EFFECT, MODE = Verdict.FIX, Verdict.FAILURE, Verdict.EFFECT, Verdict.MODE
_RECORD_PREFIX = re.compile(r"\[[^\]]*\] ")  # SGLang's "[2026-02-11 10:03:02 TP3] "
MAX_LINES = 8  # the log lines kept of a repeated finding
MAX_JUDGED = 4096  # the verdicts remembered of distinct tracebacks (a log repeats the same one on every rank)


@lru_cache(maxsize=1)
def known() -> Known:
    return read_known()


@lru_cache(maxsize=1)
def signs() -> tuple[tuple[Mode, Sign], ...]:
    """Every failure mode's signs, with their mode."""
    from patchkit.fixes.modes import modes

    return tuple((m, s) for m in modes() for s in m.signs)


def needles(data: Known | None = None) -> tuple[bytes, ...]:
    """What a line must hold for a Matcher to care about it (a traceback's later lines aside; the
    logging module's "--- Logging error ---" before a traceback matters to watch only, which
    reads every line)."""
    data = data or known()
    texts = [HEADER] + [t for s in data.signatures if (s.log or not s.raised_in) and (t := s.log or s.exception)]
    texts += [e.log for e in data.effects] + [f.log for f in data.failures if f.log] + list(READY)
    texts += [s.text for _, s in signs()]
    return tuple(dict.fromkeys(t.encode() for t in texts))


class LogFinding(Value):
    kind: Verdict
    name: str  # the fix, failure or effect
    line: int  # the first log line it was seen at: the exception's line of a traceback, or the line that says it
    what: str  # the exception, or the log line's message
    frame: Frame | None  # where it was raised (the innermost frame of the exception's part)
    project: str | None  # the project a fix's signature belongs to
    releases: str  # the releases a fix's signature comes from
    cause: str
    advice: str  # a failure's advice, an effect's meaning; "" for a fix
    commands: tuple[str, ...]  # the patchkit apply command lines (a fix), shell-quoted
    lines: tuple[int, ...]  # the log lines it was seen at (the first MAX_LINES)
    count: int
    origin: str | None = None  # a known failure: the path of the frame that named its package
    start: int | None = None  # a traceback's: the log line of its first "Traceback (most recent call last):"
    cc: CC | None = None  # a known failure of one GPU's (ptxas refusing sm_121a: 12.1); None: of SM12x as the fixes are
    mode: str | None = None  # the failure mode it is a sign of (``fixes/modes.py``)


@lru_cache(maxsize=64)
def _whole(pattern: str) -> re.Pattern[str]:
    return re.compile(re.escape(pattern) + r"(?!\w)")


def _ends_with(text: str, pattern: str) -> bool:
    """``pattern`` in ``text``, not followed by a word character ("KeyError: 12" is not "KeyError: 120")."""
    return pattern in text and _whole(pattern).search(text) is not None


def _raised_in(sig: Signature, frames: tuple[Frame, ...]) -> bool:
    return not sig.raised_in or bool(frames) and any(fnmatchcase(frames[-1].path, g) for g in sig.raised_in)


def _ran(sig: Signature, frames: tuple[Frame, ...]) -> bool:
    """Whether the traceback may have run what the signature's fix patches: not when its frames show
    other projects only (DeepGEMM's "Unsupported architecture" under vLLM is not SGLang's gate, which
    is all deepgemm-sm12x patches); a project the fix patches that re-raises the message counts
    (SGLang's "Capture cuda graph failed: <FlashInfer's message>", SGLang issue 15650: allreduce-fusion
    patches SGLang's gate too); a file run from elsewhere (``/tmp/u/torch_symm_mem.py``) tells nothing.
    A ``framed`` signature needs a frame of a project the fix patches: no frame, or none of those, is not it."""
    from patchkit.fixes.registry import FIXES, PROJECTS

    paths = [f.path for f in frames]
    patched = {sig.project} | {r.project for r in FIXES[sig.fix].rules}
    mine = [(p.name, p.source_root) for p in PROJECTS.values() if p.name in patched]
    if sig.framed:
        return bool(paths) and bool(targets(paths, mine))
    others = [(p.name, p.source_root) for p in PROJECTS.values() if p.name not in patched]
    return not paths or bool(targets(paths, mine)) or not targets(paths, others)


def apply_commands(fix: str, frames: tuple[Frame, ...]) -> tuple[str, ...]:
    """``patchkit apply`` for each checkout or environment of the fix's projects that the frames show,
    as a shell command line (``shlex.join``: the paths are the log's, and may hold spaces or ``;``)."""
    from patchkit.fixes.registry import FIXES, PROJECTS

    spec = FIXES[fix]
    projects = dict.fromkeys(["sglang"] + [r.project for r in spec.rules])  # the SGLang the traceback ran first
    found = targets([f.path for f in frames], [(p, PROJECTS[p].source_root) for p in projects if p in PROJECTS])
    option = [] if spec.default else ["--fix", fix]
    return tuple(shlex.join(["patchkit", "apply", *where, *option]) for where in found)


# The fields of a traceback's Finding but its line (``Matcher._add``'s parameters from ``kind`` to ``cc``).
_Fields = tuple[Verdict, str, str, tuple[Frame, ...], "str | None", str, str, str, tuple[str, ...], "str | None",
                "str | None", "CC | None"]
_Key = tuple[tuple[tuple[Frame, ...], str], ...]  # a traceback's frames and exception of each part


class _Seen:
    """A finding recorded: the first Finding, how many times it was seen, its first MAX_LINES lines."""

    __slots__ = ("finding", "count", "lines")

    def __init__(self, finding: LogFinding, line: int) -> None:
        self.finding, self.count, self.lines = finding, 1, [line]


class Matcher:
    def __init__(self, data: Known | None = None, helps: Callable[[str, str, tuple[Frame, ...]], bool] | None = None,
                 python: str | None = None) -> None:
        self.data = data or known()
        self.python = python  # the server's interpreter, as diagnose --python gave it (a failure's advice names it)
        # ``helps(fix, project, frames)``: False where the release the frames ran is known and the fix
        # does nothing there (its shipped manifest says already upstream, nothing to patch, cannot
        # apply): the traceback is then judged as the failure it is, if one is known.  None: any.
        self.helps = helps
        self.reader = TracebackReader()
        self.tracebacks = 0
        self.verdict: LogFinding | None = None  # what the last traceback that ended was
        self._found: dict[tuple[str | Frame | None, ...], _Seen] = {}
        self._judged: dict[_Key, tuple[int, _Fields] | None] = {}  # a traceback's frames and exceptions -> what it is
        self.ready: int | None = None  # the line the server said it was ready at (the first)

    @property
    def findings(self) -> list[LogFinding]:
        return sorted((s.finding._replace(count=s.count, lines=tuple(s.lines)) for s in self._found.values()),
                      key=lambda f: f.line)

    def feed(self, number: int, text: str) -> Traceback | None:
        """Read one line; the traceback it ended, if any (judged already)."""
        reader = self.reader
        ended = reader.feed(number, text)
        if ended is not None:
            self.verdict = self.judge(ended)
        if not reader.open:
            if self.ready is None and ready(text, sglang_record(text)):
                self.ready = number
            self._line(number, text)
        return ended

    def finish(self) -> Traceback | None:
        """The log ended (or paused): judge the traceback still open."""
        ended = self.reader.finish()
        if ended is not None:
            self.verdict = self.judge(ended)
        return ended

    def judge(self, tb: Traceback) -> LogFinding | None:
        """The finding a traceback is (recorded), or None when patchkit knows nothing of it.  The
        same traceback again (another rank, another request) is judged once."""
        self.tracebacks += 1
        parts = tb.parts
        key: _Key = ((parts[0].frames, parts[0].exception),) if len(parts) == 1 else tuple((p.frames, p.exception) for p in parts)
        if key in self._judged:
            verdict = self._judged[key]
        else:
            verdict = self._judge(tb.parts)
            if len(self._judged) >= MAX_JUDGED:
                self._judged.clear()
            self._judged[key] = verdict
        if verdict is None:
            return None
        index, fields = verdict
        part = parts[index]
        return self._add(fields[0], fields[1], part.line or tb.line, *fields[2:], start=tb.line)

    def _judge(self, parts: tuple[TracebackPart, ...]) -> tuple[int, _Fields] | None:
        """(the part, the fields of its Finding but the line) of a traceback, or None."""
        frames = tuple(f for part in parts for f in part.frames)
        unhelped: tuple[int, _Fields] | None = None  # a fix's signature, where the fix does nothing for the release that ran
        for i, part in enumerate(parts):
            for sig in self.data.signatures:
                if sig.exception and _ends_with(part.exception, sig.exception) and _raised_in(sig, part.frames) \
                        and _ran(sig, frames):
                    fields: tuple[int, _Fields] = i, (FIX, sig.fix, part.exception, part.frames, sig.project, sig.releases,
                                                      sig.cause, "", apply_commands(sig.fix, frames), None, None, None)
                    if self.helps is None or self.helps(sig.fix, sig.project, frames):
                        return fields
                    unhelped = unhelped or fields
        for i, part in enumerate(parts):
            for failure in self.data.failures:
                if failure.exception and failure.exception in part.exception:
                    package, origin, named = self._package(failure, part.frames or frames, part.exception)
                    advice = (named and named.advice or failure.advice).format(package=package, python=self._python(frames))
                    return i, (FAILURE, failure.name, part.exception, part.frames, None, "",
                               failure.cause.format(package=package), advice, (), None, origin, failure.cc)
        for i, part in enumerate(parts):
            for mode, sign in signs():
                if sign.in_exception and _ends_with(part.exception, sign.text) and _framed(sign, frames):
                    return i, (MODE, mode.name, part.exception, part.frames, sign.project, "", "", "", (), None, None, None)
        return unhelped

    # -- helpers ----------------------------------------------------------------------------

    def _line(self, number: int, text: str) -> None:
        """A log line a signature or an effect names: the same line of every rank, whatever its
        time and prefix, is one finding."""
        for sig in self.data.signatures:
            says = sig.log if sig.log and sig.log in text else sig.exception \
                if sig.exception and not (sig.raised_in or sig.framed) and _ends_with(text, sig.exception) else None
            if says is not None:
                said = text[text.find(says):]
                self._add(FIX, sig.fix, number, _message(text), (), sig.project, sig.releases, sig.cause, "",
                          apply_commands(sig.fix, ()), said)
                return
        for failure in self.data.failures:  # a line a known failure says by itself (ptxas's)
            if failure.log and failure.log in text:
                self._add(FAILURE, failure.name, number, _message(text), (), None, "", failure.cause.format(package=""),
                          failure.advice.format(package="", python=self._python(())), (), text[text.find(failure.log):],
                          cc=failure.cc)
                return
        for mode, sign in signs():  # a mode's text on a line of its own (a log line, an exception logged)
            if (not sign.in_exception or not sign.frames) and _ends_with(text, sign.text):
                self._add(MODE, mode.name, number, _message(text), (), sign.project, "", "", "", (), text[text.find(sign.text):])
                return
        for effect in self.data.effects:
            if effect.log in text:
                self._add(EFFECT, effect.name, number, _message(text), (), None, "", "", effect.means, (),
                          text[text.find(effect.log):])
                return

    def _python(self, frames: tuple[Frame, ...]) -> str:
        """The server's interpreter as a failure's advice names it, shell-quoted: the one whose
        packages the frames ran, else diagnose --python's, else the placeholder EXE."""
        python = python_of(f.path for f in frames) or self.python
        return shlex.quote(python) if python else "EXE"

    @staticmethod
    def _package(failure: Failure, frames: tuple[Frame, ...], exception: str) -> tuple[str, str | None, FailingPackage | None]:
        """The package a failure names, the path of the frame that names it (None: named by the message),
        and its entry of the failure's packages (None: none named)."""
        for package in failure.packages:
            named = next((f.path for f in frames if f"/{package.frames}/" in f.path), None)
            if named is not None:
                return package.name, named, package
        for package in failure.packages:
            if package.message and package.message in exception:
                return package.name, None, package
        return "a compiled package (no frame names it)", None, None

    def _add(self, kind: Verdict, name: str, line: int, what: str, frames: tuple[Frame, ...], project: str | None,
             releases: str, cause: str, advice: str, commands: tuple[str, ...], said: str | None = None,
             origin: str | None = None, cc: CC | None = None, start: int | None = None) -> LogFinding:
        """Record a finding, or count it again: one per failure, however the log dressed its text (the
        same exception with colour codes and without is one), one per mode where its text is a mode's sign
        (a known failure's, where the frames are the sign's too; a fix's signature placed it already)."""
        frame = frames[-1] if frames else None
        mode = name if kind is MODE else None if kind is EFFECT else \
            next((m.name for m, s in signs() if _ends_with(what, s.text) and (kind is FIX or _framed(s, frames))), None)
        key: tuple[str | Frame | None, ...] = ("mode", mode) if mode else (kind, name, plain(said or what.split("\n", 1)[0]), frame)
        seen = self._found.get(key)
        if seen is None:
            finding = LogFinding(kind, name, line, what, frame, project, releases, cause, advice, commands, (line,), 1, origin,
                              start, cc, mode)
            self._found[key] = _Seen(finding, line)
            return finding
        seen.count += 1
        if len(seen.lines) < MAX_LINES:
            seen.lines.append(line)
        return seen.finding


def _framed(sign: Sign, frames: tuple[Frame, ...]) -> bool:
    """Whether a traceback's frames show a package the sign needs (a sign that needs none: yes)."""
    return not sign.frames or any(f"/{p}/" in f.path for f in frames for p in sign.frames)


def _message(text: str) -> str:
    """A log line without its record prefix, at most 300 characters."""
    text = text.strip()
    match = _RECORD_PREFIX.match(text)
    return (text[match.end():] if match else text)[:300]
