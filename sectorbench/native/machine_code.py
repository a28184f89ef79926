"""What a built kernel's machine code says: which loops are vectorised, and a lower bound.

For a function of a built library (static functions keep their symbols), `analyze`
disassembles it with objdump, picks its hot loop — the innermost, bottom-tested loop with
the most packed floating-point arithmetic, which is a compiler's main vector loop rather
than its scalar epilogue — and reports:
  vector   the widest packed FP arithmetic in that loop: scalar, xmm, ymm or zmm (logic
           ops such as vandps are not counted: scalar code uses them for fabs);
  bound    llvm-mca's cycles per iteration of the loop, on the CPU model gcc's
           -march=native names, divided by the tests one iteration performs: a lower bound
           in cycles per test, derived from the kernel's own instructions.
llvm-mca (Debian's llvm-19, which models Zen 4 and Zen 5) is optional; without it the
bound is "unavailable" with the reason.  A loop calling through a pointer (`--mode call`)
has no bound: llvm-mca cannot see the callee.  Nor has a loop that is not the kernel's hot
loop or not what runs: one with no floating-point arithmetic (at -O0 the predicate is called
out of line, and the loop found is a setup loop), or a function instrumented by a sanitizer
(-fsanitize=undefined puts checks in the loop and branches from it to their handlers, which
llvm-mca's straight-line model neither follows nor skips).  Results are cached next to the
library.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import SectorbenchError

#: llvm-mca binaries to try, newest first: Zen 4's model needs LLVM >= 16.
LLVM_MCA = ("llvm-mca-19", "llvm-mca-18", "llvm-mca-17", "llvm-mca-16", "llvm-mca-15", "llvm-mca-14", "llvm-mca")
MCA_ITERATIONS = 1000
WIDTH_BITS = {"none": 0, "scalar": 32, "xmm": 128, "ymm": 256, "zmm": 512}

_FUNCTION = re.compile(r"^([0-9a-f]+) <([^>]+)>:\s*$")
_INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\s+(.*?)\s*$")
_JUMP = re.compile(r"^(j[a-z]+|loop[a-z]*)\s+([0-9a-f]+)\s+<[^>]+>")
_PREFIXES = ("notrack ", "bnd ", "ds ", "cs ", "rep ", "repz ", "repnz ")
_PACKED = re.compile(
    r"^v?(add|sub|mul|div|sqrt|min|max|cmp[a-z_]*|fn?m(add|sub)[0-9]*|rcp|rsqrt|round|range"
    r"|fpclass|getexp|hadd|dp)p[sd]$"
)
_SCALAR = re.compile(r"^v?(add|sub|mul|div|sqrt|min|max|cmp[a-z_]*|u?comi|fn?m(add|sub)[0-9]*|rcp|rsqrt|round)s[sd]$")
_LIBMVEC = re.compile(r"call\s+[0-9a-f]+\s+<_ZGV([bcde])N\d+")
_LIBMVEC_WIDTH = {"b": "xmm", "c": "ymm", "d": "ymm", "e": "zmm"}
#: Runtimes whose calls mean the function is instrumented (sanitizers): its loops carry checks
#: and branches to their handlers, so llvm-mca's cycles for the loop bound nothing.
_INSTRUMENTED = re.compile(r"call\s+\S+\s+<(__(?:ubsan|asan|hwasan|tsan|msan|lsan|sanitizer)_[^@>]*)")
#: The version of the analysis the loops cache holds: a new rule must not be hidden by an old
#: library's cached analyses (2: no bound for a loop without FP arithmetic or in instrumented code;
#: 3: those two said of the function whatever its loops look like, as clang compiles them).
ANALYSIS_VERSION = "v3"
#: The reason machine_code gives for a loop with no floating-point arithmetic it can see.
NO_FP_ARITHMETIC = "no floating-point arithmetic in it"


@dataclass(frozen=True)
class LoopAnalysis:
    function: str
    vector: str  # widest packed FP arithmetic of the hot loop (see the module doc)
    instructions: int = 0  # in the hot loop
    tests_per_iteration: float | None = None
    bound_cycles_per_test: float | None = None
    model: str | None = None  # "llvm-mca-19 -mcpu=znver4"
    reason: str | None = None  # why there is no bound

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Instruction:
    address: int
    text: str

    @property
    def mnemonic(self) -> str:
        return strip_prefixes(self.text).split(" ", 1)[0]


@dataclass
class _Loop:
    head: int
    tail: int
    body: list[_Instruction] = field(default_factory=list)
    innermost: bool = True


def strip_prefixes(text: str) -> str:
    """An instruction's text without its prefixes (notrack, rep, a segment override, ...: _PREFIXES)."""
    while text.startswith(_PREFIXES):
        text = text.split(" ", 1)[1]
    return text


def disassemble(library: Path) -> dict[str, list[_Instruction]]:
    """Every function's instructions, from `objdump -d --no-show-raw-insn`."""
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    functions: dict[str, list[_Instruction]] = {}
    current = None
    for line in out.splitlines():
        if m := _FUNCTION.match(line):
            current = functions.setdefault(m.group(2), [])
        elif current is not None and (m := _INSTRUCTION.match(line)) and m.group(2) and "(bad)" not in m.group(2):
            current.append(_Instruction(int(m.group(1), 16), m.group(2)))
    return functions


def _loops(code: list[_Instruction]) -> list[_Loop]:
    """Backward branches; a loop is innermost when no other lies strictly inside it."""
    loops = []
    for instruction in code:
        m = _JUMP.match(strip_prefixes(instruction.text))
        if m and code[0].address <= int(m.group(2), 16) <= instruction.address:
            head = int(m.group(2), 16)
            body = [i for i in code if head <= i.address <= instruction.address]
            loops.append(_Loop(head, instruction.address, body))
    for loop in loops:
        loop.innermost = not any(
            other is not loop
            and loop.head <= other.head
            and other.tail <= loop.tail
            and (other.head, other.tail) != (loop.head, loop.tail)
            for other in loops
        )
    return loops


def vector_class(code: list[_Instruction]) -> str:
    """The widest packed FP arithmetic (or a libmvec call) in `code`."""
    widest, scalar = 0, False
    for instruction in code:
        if m := _LIBMVEC.search(instruction.text):
            widest = max(widest, WIDTH_BITS[_LIBMVEC_WIDTH[m.group(1)]])
        elif _PACKED.match(instruction.mnemonic):
            registers = re.findall(r"%([xyz]mm)\d+", instruction.text)
            widest = max(widest, max((WIDTH_BITS[r] for r in registers), default=128))
        elif _SCALAR.match(instruction.mnemonic):
            scalar = True
    if widest:
        return {128: "xmm", 256: "ymm", 512: "zmm"}[widest]
    return "scalar" if scalar else "none"


def hot_loop(code: list[_Instruction]) -> _Loop | None:
    """The innermost bottom-tested loop with the widest, then most, FP arithmetic."""

    def bottom_tested(loop):  # a conditional latch, no return inside
        latch = _JUMP.match(strip_prefixes(loop.body[-1].text))
        return latch and latch.group(1) != "jmp" and not any(i.mnemonic.startswith("ret") for i in loop.body)

    def contiguous(loop):  # no branch leaves it: one loop, not blocks of an epilogue
        jumps = (_JUMP.match(strip_prefixes(i.text)) for i in loop.body[:-1])
        return all(not m or loop.head <= int(m.group(2), 16) <= loop.tail for m in jumps)

    candidates = [loop for loop in _loops(code) if loop.innermost and bottom_tested(loop)]
    candidates = [loop for loop in candidates if contiguous(loop)] or candidates
    if not candidates:
        return None

    def weight(loop):
        arithmetic = sum(1 for i in loop.body if _PACKED.match(i.mnemonic) or _SCALAR.match(i.mnemonic))
        return WIDTH_BITS[vector_class(loop.body)], arithmetic, -loop.head

    return max(candidates, key=weight)


def points_per_iteration(loop: _Loop) -> int | None:
    """How many float32 points one iteration consumes, from its pointer or index increments.

    An index register scaled by 4 in an address, `(%base,%reg,4)`, advancing by k: k
    points; one scaled by 1, or a base register, advancing by k bytes: k / 4 points.  The
    largest such step is taken (gcc keeps one induction variable per loop, sometimes a
    second for a tail).
    """
    text = "\n".join(strip_prefixes(i.text) for i in loop.body)
    steps = []
    for instruction in loop.body:
        line = strip_prefixes(instruction.text)
        if m := re.match(r"(?:add|sub)\s+\$(-?0x[0-9a-f]+|-?\d+),%(r\w+)$", line):
            step, register = abs(int(m.group(1), 0)), m.group(2)
        elif m := re.match(r"inc\s+%(r\w+)$", line):
            step, register = 1, m.group(1)
        else:
            continue
        if re.search(rf",%{register},4\)", text):
            steps.append(step)
        elif re.search(rf"\(%{register}\)|\(%{register},|,%{register},1\)", text) and step % 4 == 0:
            steps.append(step // 4)
    return max(steps) if steps else None


def to_mca(loop: _Loop) -> str:
    """The loop as assembly llvm-mca reads: a label at the head, the latch retargeted to it."""
    lines = [".text", "L_head:"]
    for instruction in loop.body:
        text = re.sub(r"\s*#.*$", "", strip_prefixes(instruction.text))
        if m := _JUMP.match(text):
            text = f"{m.group(1)} " + ("L_head" if int(m.group(2), 16) == loop.head else "L_out")
        text = re.sub(r"^call\s+[0-9a-f]+\s+<[^>]+>$", "call L_out", text)
        lines.append("  " + re.sub(r"\s+<[^>]+>$", "", text))
    return "\n".join([*lines, "L_out:"]) + "\n"


def find_llvm_mca() -> str | None:
    return next((shutil.which(name) for name in LLVM_MCA if shutil.which(name)), None)


def host_cpu(llvm_mca: str | None) -> str | None:
    """The CPU model LLVM names for this machine (`llvm-mca --version`: "Host CPU: znver4").

    Asked of LLVM rather than of the compiler: gcc 12 calls a Zen 4 "znver3", a model
    under which llvm-mca rejects AVX-512 instructions.
    """
    if llvm_mca is None:
        return None
    try:
        text = subprocess.run([llvm_mca, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Host CPU:\s*(\S+)", text)
    return m.group(1) if m and m.group(1) != "(unknown)" else None


def mca_cycles_per_iteration(loop: _Loop, llvm_mca: str, mcpu: str) -> float:
    run = subprocess.run(
        [llvm_mca, f"-mcpu={mcpu}", f"-iterations={MCA_ITERATIONS}"],
        input=to_mca(loop),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip().splitlines()[0] if run.stderr.strip() else "llvm-mca failed")
    total = re.search(r"^Total Cycles:\s+(\d+)", run.stdout, re.M)
    iterations = re.search(r"^Iterations:\s+(\d+)", run.stdout, re.M)
    return int(total.group(1)) / int(iterations.group(1))


def analyze(library: Path, functions: dict[str, int]) -> dict[str, LoopAnalysis]:
    """Each function's hot loop; functions maps a name to its tests per point step (shapes
    tested per point, the kernel's block).  Cached in LIBRARY.loops-MCPU-MCA.json."""
    library = Path(library)
    llvm_mca = find_llvm_mca()
    mcpu = host_cpu(llvm_mca)
    mca_name = Path(llvm_mca).name if llvm_mca else "none"
    cache = library.with_name(f"{library.stem}.loops-{ANALYSIS_VERSION}-{mcpu}-{mca_name}.json")
    known = _read_loops_cache(cache)
    missing = [name for name in functions if name not in known]
    if missing:
        code = disassemble(library)
        memo = _CyclesMemo(library.with_name(f"mca-{mcpu}-{Path(llvm_mca).name}.json")) if llvm_mca and mcpu else None
        for name in missing:
            body = _folded(code[name], code) if code.get(name) else None
            known[name] = _analyze_one(name, body, functions[name], llvm_mca, mcpu, memo).to_dict()
        if memo is not None:
            memo.save()
        partial = cache.with_suffix(".partial")
        try:
            partial.write_text(json.dumps(known))
            partial.replace(cache)
        except OSError:  # a full or read-only cache: the analysis is redone next time, no more
            with contextlib.suppress(OSError):
                partial.unlink()
    return {name: LoopAnalysis(**known[name]) for name in functions}


class _CyclesMemo:
    """llvm-mca's cycles per iteration of a loop, by the loop's code, for every library of one
    cache: builds that link the same objects (a --source file added, a --against ref) hold the
    same loops at other addresses, and llvm-mca takes ~30 ms a loop.  The key is the text
    llvm-mca reads with RIP-relative displacements left out (only they move with the code);
    a damaged file is ignored and rewritten, like the loops cache."""

    def __init__(self, path: Path):
        self.path, self.new = path, {}
        self.known = self._read()

    def _read(self) -> dict[str, float]:
        try:
            known = json.loads(self.path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return {}
        if not isinstance(known, dict):
            return {}
        return {k: v for k, v in known.items() if isinstance(k, str) and isinstance(v, float) and v > 0}

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(re.sub(r"-?0x[0-9a-f]+\(%rip\)", "(%rip)", text).encode()).hexdigest()[:32]

    def cycles(self, loop: _Loop, llvm_mca: str, mcpu: str) -> float:
        key = self.key(to_mca(loop))
        if key not in self.known:
            self.known[key] = self.new[key] = mca_cycles_per_iteration(loop, llvm_mca, mcpu)
        return self.known[key]

    def save(self) -> None:
        """The new entries added to what the file holds now (another process may have written it)."""
        if not self.new:
            return
        merged = {**self._read(), **self.new}
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.partial")
        try:
            partial.write_text(json.dumps(merged))
            partial.replace(self.path)
        except OSError:  # a full or read-only cache: the loops are measured again next time
            with contextlib.suppress(OSError):
                partial.unlink()


def _read_loops_cache(cache: Path) -> dict:
    """The cached analyses, or {} if the file is missing or damaged (it is rewritten then):
    a cache is a shortcut, never a reason for a measured run to fail."""
    from ..model.schema import check_object

    try:
        known = json.loads(cache.read_text())
        if not isinstance(known, dict):
            return {}
        for name, entry in known.items():
            check_object(entry, LoopAnalysis, name)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, SectorbenchError):
        return {}
    return known


def _folded(code: list[_Instruction], functions: dict) -> list[_Instruction]:
    """A function gcc folded into an identical one (its body a lone jmp): the other's code."""
    for _ in range(4):
        m = _JUMP.match(strip_prefixes(code[0].text)) if len(code) <= 2 else None
        target = re.search(r"<([^>+]+)>", code[0].text) if m and m.group(1) == "jmp" else None
        if not target or target.group(1) not in functions:
            break
        code = functions[target.group(1)]
    return code


def _instrumented_reason(handler: str) -> str:
    return (
        f"instrumented by a sanitizer (it calls {handler}): llvm-mca would model the loop's "
        "checks and its branches to their handlers as straight-line code, not the loop that runs"
    )


def _analyze_one(
    name: str, code, shapes_per_step: int, llvm_mca: str | None, mcpu: str | None, memo: _CyclesMemo | None = None
) -> LoopAnalysis:
    if not code:
        return LoopAnalysis(name, "none", reason="not in the library's symbols")
    loop = hot_loop(code)
    # What holds of the whole function comes first, before what its loops' shapes can tell:
    # clang's -O0 loops end in a jmp back (no bottom-tested loop is found in a function with
    # no FP arithmetic at all), and clang's ubsan checks leave its hot loop's step unreadable.
    instrumented = next((m.group(1) for i in code if (m := _INSTRUMENTED.search(i.text))), None)
    if loop is None:
        vector = vector_class(code)
        if instrumented:
            return LoopAnalysis(name, vector, reason=_instrumented_reason(instrumented))
        return LoopAnalysis(name, vector, reason=NO_FP_ARITHMETIC if vector == "none" else "no loop found")
    base = dict(function=name, vector=vector_class(loop.body), instructions=len(loop.body))
    if instrumented:
        return LoopAnalysis(**base, reason=_instrumented_reason(instrumented))
    points = points_per_iteration(loop)
    if points is None:
        return LoopAnalysis(**base, reason="cannot tell how many tests one iteration makes")
    tests = points * shapes_per_step
    base["tests_per_iteration"] = tests
    if any(i.mnemonic == "call" for i in loop.body):
        return LoopAnalysis(**base, reason="the loop calls a function (call mode, or a libm call)")
    if base["vector"] == "none":  # not the kernel's arithmetic: a setup loop (-O0), an integer search
        return LoopAnalysis(**base, reason=NO_FP_ARITHMETIC)
    if llvm_mca is None:
        return LoopAnalysis(**base, reason="llvm-mca not installed (Debian: llvm-19)")
    if not mcpu:
        return LoopAnalysis(**base, reason="llvm-mca does not know this CPU")
    try:
        cycles = memo.cycles(loop, llvm_mca, mcpu) if memo else mca_cycles_per_iteration(loop, llvm_mca, mcpu)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        return LoopAnalysis(**base, reason=f"llvm-mca: {exc}")
    return LoopAnalysis(**base, bound_cycles_per_test=cycles / tests, model=f"{Path(llvm_mca).name} -mcpu={mcpu}")
