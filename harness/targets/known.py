"""obligations/targets.yaml: the expected failures of each third-party target, validated.

A third-party target is surveyed, not gated: its failing cells are findings
about the library, and a survey-mode run needs to tell the expected ones
from new ones. Each entry names the cell (card, witness, test), the class at
fault, the claim and the documentation that backs it, an upstream link when
one matches, and the reproduction script (which exits 1 while the problem is
present). The file's format is obligations/targets.schema.json; :func:`load`
also checks what a schema cannot: every target is registered, every
reproduction and card file exists inside the project root, findings are
unique per target, and each card names the witness and test given.

A known list says what a target did on the version it was surveyed on
(``surveyed: dist==version``). When another version is installed its cells
are expectations from that version, not findings about this one:
:meth:`Survey.drift` is the one-line note a ``run --target`` subject carries
then, and ``python -m harness.targets.survey --drift`` (:mod:`harness.targets.survey`)
re-runs the reproductions on the installed version.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness import schemas
from harness.errors import UsageError
from harness.project import KVPROOF_HOME, shown_path
from harness.select.cards import TARGETS_FILE
from harness.select.problems import short
from harness.select.suggest import did_you_mean
from harness.targets import registry

KNOWN_PATH = Path("obligations") / TARGETS_FILE  # relative to the project root
SCHEMA_PATH = KVPROOF_HOME / "obligations" / "targets.schema.json"  # kvproof's, whatever the project


class KnownInvalid(UsageError):
    """obligations/targets.yaml is malformed: ``path``, ``where`` (a field path), ``message`` (what and the fix)."""

    def __init__(self, path: Path, where: str, message: str) -> None:
        super().__init__(f"{path}: {where}: {message}")
        self.path, self.where, self.message = path, where, message


@dataclass(frozen=True)
class Known:
    """One expected failure of one target."""

    target: str
    finding: str
    card: str
    witness: str
    test: str
    cls: str
    claim: str
    backing: str
    reproduction: str  # relative to the project root
    link: str = ""
    link_note: str = ""
    observed: str = ""
    also: tuple[str, ...] = ()

    @property
    def cells(self) -> tuple[str, ...]:
        """Every ``CARD/witness`` cell this finding fails on this target, the first one first."""
        return (f"{self.card}/{self.witness}", *self.also)


@dataclass(frozen=True)
class Survey:
    """Per target: the version it was surveyed on and its expected failures."""

    surveyed: dict[str, str]
    known: dict[str, tuple[Known, ...]]

    def expected(self, target: str, card: str, witness: str) -> Known | None:
        """The known finding that makes cell (target, card, witness) fail, or None if none is expected."""
        return next((k for k in self.known.get(target, ()) if f"{card}/{witness}" in k.cells), None)

    def stale(self, target: str) -> bool:
        """True when the target now binds to another version than the one its list was surveyed on."""
        return target in self.surveyed and registry.get(target).binding() != self.surveyed[target]

    def drifted(self, target: str, installed: str) -> bool:
        """True when ``target``'s distribution is installed (``installed``, its binding here, has a version) at
        another version than its known list was surveyed on. Not installed: nothing to compare, False."""
        return target in self.surveyed and "==" in installed and installed != self.surveyed[target]

    def drift(self, target: str, installed: str, root: Path) -> str:
        """The one-line note for a ``run --target`` subject whose known list was surveyed on another version than
        the installed one (``installed``: the target's binding here); "" when :meth:`drifted` is False. No
        verdict changes: a FAILED cell the list names is still shown as known, the note says on what."""
        if not self.drifted(target, installed):
            return ""
        was, findings = self.surveyed[target], self.known.get(target, ())
        if not findings:
            return (
                f"known list surveyed on {was}, installed {installed}: it lists no finding; a survey on "
                f"{installed} ({survey_command(f'--targets {target}', root)}) re-checks every cell"
            )
        return (
            f"known list surveyed on {was}, installed {installed}: known cells are expectations from {was} "
            f"({survey_command(f'--drift --targets {target}', root)} re-checks them)"
        )


def survey_command(args: str, root: Path) -> str:
    """``python -m harness.targets.survey ARGS`` with this interpreter, as typed from ``root`` (the venv the
    target's library is installed in matters: another one may hold another version)."""
    python = shown_path(sys.executable, root, cwd=root)
    return f"{shlex.quote(python if '/' in python else './' + python)} -m harness.targets.survey {args}"


def problem(path: Path, where: str, msg: str) -> KnownInvalid:
    return KnownInvalid(path, where, msg)


def load(root: Path) -> Survey:
    """Read and check ``root/obligations/targets.yaml``; UsageError naming the file, field and fix otherwise.

    A missing file is an empty survey.
    """
    path = root / KNOWN_PATH
    if not path.is_file():
        return Survey({}, {})
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise problem(path, "YAML", f"{exc}; fix the YAML") from None
    check_schema(path, data)
    surveyed: dict[str, str] = {}
    known: dict[str, tuple[Known, ...]] = {}
    for name, entry in data["targets"].items():
        try:
            registry.get(name)
        except LookupError as exc:
            raise problem(path, f"targets/{name}", f"{exc}; name a registered target, or remove the entry") from None
        surveyed[name] = entry["surveyed"]
        items, seen = [], set()
        for i, k in enumerate(entry["known"]):
            where = f"targets/{name}/known/{i}"
            if k["finding"] in seen:
                raise problem(path, where, f"finding={k['finding']!r} twice for one target: give each its own id")
            seen.add(k["finding"])
            check_files(root, path, where, k)
            items.append(
                Known(
                    name,
                    k["finding"],
                    k["card"],
                    k["witness"],
                    k["test"],
                    k["class"],
                    " ".join(k["claim"].split()),
                    " ".join(k["backing"].split()),
                    k["reproduction"],
                    k.get("link", ""),
                    k.get("link_note", ""),
                    " ".join(k.get("observed", "").split()),
                    tuple(k.get("also", ())),
                )
            )
        known[name] = tuple(items)
    return Survey(surveyed, known)


def check_schema(path: Path, data: object) -> None:
    """KnownInvalid for the topmost way ``data`` breaks the targets schema (:mod:`harness.schemas` words it): its
    field path as ``targets/NAME/known/0``, then the value (none for a missing field or an unknown one)."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    found = sorted(schemas.problems(data, schema, near=did_you_mean), key=lambda p: [str(x) for x in p.parts])
    if found:
        p = found[0]
        where = "/".join(str(x) for x in p.parts) or "(top)"
        value = "" if p.missing or p.unknown else f"{short(p.value)} "
        raise problem(path, where, f"{value}{p.message}; the format is {SCHEMA_PATH.name} (docs/targets.md)")


def check_files(root: Path, path: Path, where: str, k: dict) -> None:
    """The reproduction exists inside the root; the card exists and names this witness with this test."""
    repro = (root / k["reproduction"]).resolve()
    if not repro.is_relative_to(root.resolve()) or not repro.is_file():
        raise problem(
            path,
            f"{where}/reproduction",
            f"{k['reproduction']!r} is not a file inside the project root; "
            "write the reproduction there (--kvproof-repro DIR writes one per failure) or correct the path",
        )
    card_path = root / "obligations" / f"{k['card']}.yaml"
    if not card_path.is_file():
        raise problem(path, f"{where}/card", f"card={k['card']!r}: no {card_path.relative_to(root)}; name a card")
    card = yaml.safe_load(card_path.read_text(encoding="utf-8")) or {}
    tests = {w.get("id"): w.get("test") for w in card.get("witnesses", []) + card.get("controls", [])}
    if k["witness"] not in tests:
        raise problem(path, f"{where}/witness", f"witness={k['witness']!r} is not a witness of {k['card']}")
    if tests[k["witness"]] != k["test"]:
        raise problem(path, f"{where}/test", f"{k['card']}/{k['witness']} runs {tests[k['witness']]}, not {k['test']}")
