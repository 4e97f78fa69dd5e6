"""Prose agrees with the run: every number about the run in a lesson's markdown is one its stored outputs show.

The design ("What a claim is") asks that a run number in prose be one an output prints, so that a
re-execution that changes the run cannot leave stale prose behind. This test reads every stored lesson
(``notebooks/[0-9][0-9]_*.ipynb``) and fails, naming the lesson, the cell index and the sentence, on a
number in a markdown cell that none of the lesson's stored outputs and none of its code cells shows.
The same check reads the README's lesson table: a row's numbers must be shown by its lesson.

What is shown. Every number printed by the lesson's stored outputs (stream text and the text/plain,
text/html, text/latex and text/markdown forms of results and displays; figures are pixels and count for
nothing) and every number written in the lesson's code cells (the settings of the run: ``lr=5e-4``, 8
prompts × 8 samples). Numbers are read as magnitudes: signs are ignored, since prose says "falls by
0.05" of an output's −0.05, and an en dash between two numbers is a range, not a minus.

When a prose number matches. A prose number written with d decimals matches a shown number x when x
rounded to d decimals equals it (|x − prose| ≤ ½·10^−d, so either rounding convention passes): "0.29"
matches 0.293, "801,920" matches only 801920. A percentage matches x or 100·x ("29 %" matches 0.293 and
"29.3%"), and a plain fraction matches a shown percentage divided by 100. A scale word or letter after
a number (thousand, million, k, M) multiplies it, and its precision with it: "about 0.8 M" matches
801,920. Scientific notation (5e-4, 1e−3) is one number. A range "0.41–0.60" is its two ends, each
checked.

What is not a number about the run (skipped before matching):
- anything inside LaTeX math ($…$, $$…$$, \\(…\\), \\[…\\]), inline code spans and fenced code
  blocks, HTML tags and link targets;
- a number glued to a letter or underscore (k3, Q1, fp32, H800s, 7B, pass@8's 8, ε_high) — names, not
  measurements;
- lesson, section, exercise, question, step-of-an-algorithm and other references: a number after
  "lesson(s)", "§", "section", "chapter", "appendix", "table", "figure", "fig.", "eq.", "equation",
  "exercise", "question", "part", "act", "stage", "cell", "algorithm", "theorem", "version", and the
  rest of a list of references joined by "and", "or", ",", "–" ("lessons 16 and 18", "§2.3.1");
- the number of a heading ("## 3 · The clip") and of a numbered list item;
- a bibliography: everything under a heading "References", "Further reading", "Sources" or
  "Bibliography", up to the next heading (volumes, pages and years of cited works);
- years (1900–2099 written as four digits) and arXiv ids (2402.03300);
- every number in a sentence that carries a citation — a literature figure must say where it comes
  from: "et al." followed by a year, a parenthesis holding an author and a year ("(DeepSeek-AI 2025)",
  "(Schulman, 2020)"), an arXiv id, the README (whose results table records runs made outside the
  lessons), a zoo model's card ("its card", "the zoo card": the quality recorded beside the model and
  checked by the zoo's tests), a link to a paper (arxiv.org, openreview.net, doi.org,
  aclanthology.org), or "the paper's Table 1" / "the paper's Figure 3" / "its Table 6";
- a number quoted from another lesson is checked against that lesson's outputs and code instead,
  when the sentence names it ("lesson 03's PPO run: 0.37 → 0.03 nats");
- a number the cell lists in an allow-list marker, for the rare case none of the above covers. The
  marker is an HTML comment in the markdown cell (invisible when rendered)::

      <!-- prose-numbers-not-from-this-run: 0.5, 7 — model sizes of the hub models named -->

  numbers separated by commas, then " — " and a reason, which is required. Each listed number must
  occur in the cell's prose, so a marker cannot outlive its sentence. Use it sparingly.

A sentence is what lies between sentence ends (". ", "? ", "! " before a capital or an opening mark),
blank lines, list items and table rows; common abbreviations (et al., e.g., i.e., vs., cf.) do not end
one.

Limits, on purpose: numbers written in words ("two seeds", "half") are not read, small integers usually
find a match somewhere, and a qualitative statement ("clips fewer tokens") is the business of the ✓ that
sits beside it, not of this test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

MARKER = re.compile(r"<!--\s*prose-numbers-not-from-this-run:(?P<numbers>.*?)\s+—\s+(?P<reason>.*?)-->", re.S)
BLANK = "¤"  # what skipped text becomes: not a space, so a blanked line does not end a paragraph
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
FENCED_CODE = re.compile(r"```.*?```", re.S)
DISPLAY_MATH = re.compile(r"\$\$.*?\$\$|\\\[.*?\\\]|\\begin\{(\w+\*?)\}.*?\\end\{\1\}", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?!\$)(?:\\.|[^$\\])+?\$|\\\(.*?\\\)", re.S)
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)
LINK_TARGET = re.compile(r"\]\((?P<url>[^)\s]*)[^)]*\)")
HTML_TAG = re.compile(r"<[^>\n]+>")
BIBLIOGRAPHY = re.compile(r"^#+\s*(?:References|Further reading|Sources|Bibliography)\b.*?(?=^#|\Z)", re.M | re.S)
HEADING_NUMBER = re.compile(r"^(#+\s*)[\d.]+", re.M)
LIST_NUMBER = re.compile(r"^(\s*)\d+[.)](?=\s)", re.M)
ARXIV_ID = re.compile(r"(?<![\d.])\d{4}\.\d{4,5}(?:v\d+)?(?![\d])")

PAPER_LINK = re.compile(r"arxiv\.org|openreview\.net|doi\.org|aclanthology\.org", re.I)
CITATION = re.compile(
    r"et al\.?,?\s*\(?(?:19|20)\d\d"  # Shao et al. 2024, Shao et al. (2024)
    r"|\((?:[^()]*?[A-Z][^()]*?)[ ,]\s*(?:19|20)\d\d[a-z]?(?:[;,][^()]*)?\)"  # (DeepSeek-AI 2025), (Schulman, 2020; ...)
    r"|arXiv:?\s*\d{4}\.\d{4,5}"
    r"|\b(?:paper|report|card|supplement)'s\s+(?:Table|Figure|Fig\.|§|Section|Eq\.)"
    r"|\b(?:its|their)\s+(?:Table|Figure)\s+\d"
    r"|\bREADME\b"  # the README's results table: measured outside the notebook, and saying so
    r"|\b(?:zoo|its) cards?\b"  # a zoo model's card: its measured quality, checked by tests/test_zoo.py
)

# A number: digits with thousands commas or a decimal part, optional exponent, optional percent or scale.
NUMBER = re.compile(
    r"(?<![\w.@^/\\])"  # not glued to a name, not a decimal tail, not pass@k's k, not an exponent
    r"(?P<digits>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-−+]?\d+))?"
    r"(?P<suffix>\s?%|\s(?:thousand|million|billion)\b|\s[kKMB](?![\w]))?"
    r"(?![\w])"
)
SCALES = {"thousand": 3, "million": 6, "billion": 9, "k": 3, "K": 3, "M": 6, "B": 9}
REFERENCE_WORD = re.compile(
    r"(?:\b(?:[Ll]essons?|[Ss]ections?|[Ss]ec\.|[Cc]hapters?|[Aa]ppendix|[Tt]ables?|[Ff]igures?|[Ff]ig\.|[Ee]q\.|"
    r"[Ee]quations?|[Ee]xercises?|[Qq]uestions?|[Pp]arts?|[Aa]cts?|[Ss]tages?|[Cc]ells?|[Aa]lgorithms?|"
    r"[Tt]heorems?|[Vv]ersions?|[Nn]otebooks?|Step)|§)\s*$"
)
REFERENCE_JOIN = re.compile(r"^\s*(?:,|and|or|to|–|-|&)\s*$")

ABBREVIATIONS = ("et al.", "e.g.", "i.e.", "vs.", "cf.", "Fig.", "Eq.", "Sec.", "approx.", "resp.", "No.")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[*\"“‘'_$`])")
BLOCK_START = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+]\s|\d+[.)]\s|\||#))")


@dataclass(frozen=True)
class ProseNumber:
    text: str  # as written
    digits: str  # the digits alone, as written
    value: Decimal  # magnitude
    tolerance: Decimal  # half a unit of the last written digit
    percent: bool


@dataclass(frozen=True)
class Finding:
    lesson: str
    cell: int
    number: str
    sentence: str

    def __str__(self):
        return f"{self.lesson} cell {self.cell}: {self.number!r} is in no output or code cell — {self.sentence!r}"


def _parse(match: re.Match) -> ProseNumber:
    digits = match["digits"].replace(",", "")
    value = Decimal(digits)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    tolerance = Decimal(5).scaleb(-(decimals + 1))
    if match["exp"]:
        shift = int(match["exp"].replace("−", "-"))
        value, tolerance = value.scaleb(shift), tolerance.scaleb(shift)
    suffix = (match["suffix"] or "").strip()
    if suffix in SCALES:
        value, tolerance = value.scaleb(SCALES[suffix]), tolerance.scaleb(SCALES[suffix])
    return ProseNumber(match.group(0).strip(), match["digits"], abs(value), tolerance, suffix == "%")


def shown_numbers(text: str) -> set[Decimal]:
    """Every number in output or code text, as a magnitude; a percentage also as its fraction."""
    found = set()
    text = re.sub(r"(?<=\d)_(?=\d)", "", text)  # Python's 20_000
    for match in NUMBER.finditer(text.replace("−", "-")):
        number = _parse(match)
        found.add(number.value)
        if number.percent:
            found.add(number.value / 100)
    # Python and numpy print numbers glued to names or brackets ("x0.5", "[0.1,"): read those too.
    for raw in re.findall(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text.replace("−", "-")):
        found.add(abs(Decimal(raw)))
    # and model sizes printed glued to their scale ("Qwen2.5-7B", "135M").
    for raw, scale in re.findall(r"(\d+(?:\.\d+)?)([kKMB])(?![a-zA-Z])", text):
        found.add(Decimal(raw).scaleb(SCALES[scale]))
    return found


def _strip_non_prose(text: str) -> str:
    """The markdown with math, code, comments, tags, link targets, heading and list numbers blanked out."""
    for pattern in (BIBLIOGRAPHY, HTML_COMMENT, FENCED_CODE, DISPLAY_MATH, INLINE_MATH, CODE_SPAN):
        text = pattern.sub(lambda m: re.sub(r"[^\n]", BLANK, m.group(0)), text)
    text = LINK_TARGET.sub(lambda m: "](" + " " * (len(m.group(0)) - 3) + ")" if not PAPER_LINK.search(m.group(0)) else m.group(0), text)
    text = HTML_TAG.sub(" ", text)
    text = HEADING_NUMBER.sub(lambda m: m.group(1), text)
    text = LIST_NUMBER.sub(lambda m: m.group(1), text)
    return text


def sentences(text: str) -> list[str]:
    """The prose split at blank lines, list items, table rows and sentence ends."""
    out = []
    for block in BLOCK_START.split(text):
        protected = block
        for abbreviation in ABBREVIATIONS:
            protected = protected.replace(abbreviation, abbreviation.replace(".", "\0"))
        for sentence in SENTENCE_END.split(protected):
            sentence = " ".join(re.sub(BLANK + "+", "…", sentence.replace("\0", ".")).split())
            if sentence:
                out.append(sentence)
    return out


def _is_reference(sentence: str, match: re.Match) -> bool:
    """A lesson, section, table … number, or one of a list of them ("lessons 16 and 18", "§2.3.1")."""
    before = sentence[: match.start()]
    while True:
        if REFERENCE_WORD.search(before):
            return True
        previous = list(NUMBER.finditer(before))
        if not previous or not REFERENCE_JOIN.match(before[previous[-1].end():]):
            return False
        before = before[: previous[-1].start()]


def prose_numbers(sentence: str) -> list[ProseNumber]:
    """The numbers about the run in one sentence of prose (none if the sentence cites a source)."""
    if CITATION.search(sentence) or PAPER_LINK.search(sentence):
        return []
    sentence = ARXIV_ID.sub(" ", sentence)
    numbers = []
    for match in NUMBER.finditer(sentence):
        number = _parse(match)
        is_year = re.fullmatch(r"(19|20)\d\d", match["digits"]) is not None and not match["suffix"]
        if is_year or _is_reference(sentence, match):
            continue
        numbers.append(number)
    return numbers


def is_shown(number: ProseNumber, shown: set[Decimal]) -> bool:
    """Some shown number, rounded to the prose's precision, is the prose number (a percentage: or its fraction)."""
    targets = [(number.value, number.tolerance)]
    if number.percent:
        targets.append((number.value / 100, number.tolerance / 100))
    return any(abs(x - target) <= tolerance for x in shown for target, tolerance in targets)


def allowed_numbers(source: str) -> tuple[set[str], list[str]]:
    """The numbers a cell's allow-list markers exempt, and the problems with its markers."""
    allowed, problems = set(), []
    for marker in MARKER.finditer(source):
        numbers = [n.strip() for n in marker["numbers"].split(",") if n.strip()]
        if not numbers or not marker["reason"].strip():
            problems.append(f"marker without numbers or reason: {marker.group(0)!r}")
        allowed.update(numbers)
    if "prose-numbers-not-from-this-run" in source and not MARKER.search(source):
        problems.append("malformed prose-numbers-not-from-this-run marker (needs 'numbers — reason')")
    return allowed, problems


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def lesson_shown_numbers(notebook: dict) -> set[Decimal]:
    texts = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        texts.append(_text(cell["source"]))
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream":
                texts.append(_text(output["text"]))
            for mime in ("text/plain", "text/html", "text/latex", "text/markdown"):
                if mime in output.get("data", {}):
                    texts.append(_text(output["data"][mime]))
            if output["output_type"] == "error":
                texts.append(_text(output.get("evalue", "")))
    return shown_numbers("\n".join(texts))


LESSON_MENTION = re.compile(r"\b[Ll]essons?[ -](\d\d)((?:(?:,\s*|\s+and\s+|\s+or\s+|–)\d\d)*)")


def mentioned_lessons(sentence: str) -> set[str]:
    """The two-digit lesson numbers a sentence names ("lesson 03's run", "lessons 16 and 18")."""
    found = set()
    for match in LESSON_MENTION.finditer(sentence):
        found.add(match.group(1))
        found.update(re.findall(r"\d\d", match.group(2)))
    return found


def check_notebook(notebook: dict, lesson: str, other_lessons: dict[str, set[Decimal]] | None = None,
                   shown: set[Decimal] | None = None) -> list[Finding | str]:
    """Every prose number of the notebook that no output or code cell shows, and every bad marker.

    ``other_lessons`` maps a lesson's two-digit number to the numbers it shows: a sentence that names
    another lesson may quote that lesson's numbers. ``shown`` replaces the notebook's own outputs (for
    text that quotes a lesson from outside it, such as the README's table).
    """
    shown = lesson_shown_numbers(notebook) if shown is None else shown
    other_lessons = other_lessons or {}
    findings: list[Finding | str] = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        source = _text(cell["source"])
        allowed, problems = allowed_numbers(source)
        findings += [f"{lesson} cell {index}: {problem}" for problem in problems]
        prose = _strip_non_prose(source)
        used = set()
        for sentence in sentences(prose):
            for number in prose_numbers(sentence):
                if number.digits in allowed:
                    used.add(number.digits)
                elif not is_shown(number, shown) and not any(
                        is_shown(number, other_lessons.get(other, set())) for other in mentioned_lessons(sentence)):
                    findings.append(Finding(lesson, index, number.text, sentence))
        for stale in sorted(allowed - used):
            findings.append(f"{lesson} cell {index}: allow-listed {stale!r} is not in the cell's prose")
    return findings


def _all_lessons_shown() -> dict[str, set[Decimal]]:
    return {path.stem[:2]: lesson_shown_numbers(json.loads(path.read_text(encoding="utf-8"))) for path in LESSONS}


@pytest.fixture(scope="module")
def all_lessons_shown():
    return _all_lessons_shown()


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_prose_numbers_are_shown_by_the_run(path, all_lessons_shown):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    findings = check_notebook(notebook, path.stem, all_lessons_shown)
    assert not findings, "prose numbers no stored output shows:\n" + "\n".join(map(str, findings))


README = NOTEBOOKS.parent / "README.md"


def readme_findings(readme: str, shown_by_lesson: dict[str, set[Decimal]]) -> list[Finding | str]:
    """The README's lesson table quotes run numbers too: each row is checked against its lesson."""
    findings = []
    for line in readme.splitlines():
        row = re.match(r"\|\s*(\d\d)\s*\|(.*)", line)
        if not row:
            continue
        notebook = {"cells": [{"cell_type": "markdown", "source": row.group(2)}]}
        findings += check_notebook(notebook, f"README row {row.group(1)}", shown_by_lesson, shown_by_lesson[row.group(1)])
    return findings


def test_readme_lesson_table_quotes_the_stored_runs(all_lessons_shown):
    findings = readme_findings(README.read_text(encoding="utf-8"), all_lessons_shown)
    assert not findings, "README lesson-table numbers no stored output shows:\n" + "\n".join(map(str, findings))


def test_a_stale_readme_row_fails():
    shown = {"08": shown_numbers("advantages [+0.577, -1.732]")}
    assert readme_findings("| 08 | the worked example (+0.58 / −1.73) | ready |", shown) == []
    assert [f.number for f in readme_findings("| 08 | the worked example (+0.58 / −1.74) | ready |", shown)] == ["1.74"]


def test_all_lessons_are_checked():
    assert len(LESSONS) == 22


# ---- the matcher on small synthetic notebooks ----

def _notebook(markdown: str, output: str = "", code: str = "") -> dict:
    return {"cells": [
        {"cell_type": "markdown", "source": markdown},
        {"cell_type": "code", "source": code, "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]},
    ]}


def _numbers_found(markdown: str, output: str = "", code: str = "") -> list[str]:
    return [f.number if isinstance(f, Finding) else f for f in check_notebook(_notebook(markdown, output, code), "t")]


def test_a_stale_number_fails_and_names_cell_and_sentence():
    findings = check_notebook(_notebook("Before RL pass@1 was 0.29. After it, 0.71.", "pass@1 0.293 -> 0.684"), "99_x")
    assert [f.number for f in findings] == ["0.71"]
    assert findings[0].cell == 0 and findings[0].sentence == "After it, 0.71."
    assert "99_x cell 0" in str(findings[0])


def test_rounding_to_the_prose_precision():
    assert _numbers_found("It rose to 0.29.", "0.293") == []
    assert _numbers_found("It rose to 0.3.", "0.293") == []
    assert _numbers_found("It rose to 0.294.", "0.293") == ["0.294"]
    assert _numbers_found("It rose to 0.28.", "0.293") == ["0.28"]
    assert _numbers_found("The model has 801,920 parameters.", "801920") == []
    assert _numbers_found("The model has about 0.8 M parameters.", "parameters: 801,920") == []
    assert _numbers_found("The model has a few 100,000 parameters.", "801,920") == ["100,000"]


def test_percentages_and_fractions():
    assert _numbers_found("Right 29 % of the time.", "0.293") == []
    assert _numbers_found("Right 29% of the time.", "29.3%") == []
    assert _numbers_found("Right 0.29 of the time.", "29.3%") == []
    assert _numbers_found("Right 31 % of the time.", "0.293") == ["31 %"]


def test_signs_ranges_and_scientific_notation():
    assert _numbers_found("The loss fell by 0.05.", "-0.050") == []
    assert _numbers_found("pass@1 lies in 0.41–0.60.", "0.412 0.598") == []
    assert _numbers_found("pass@1 lies in 0.41–0.70.", "0.412 0.598") == ["0.70"]
    assert _numbers_found("At lr 5e-4 it collapses.", "", "lr=5e-4") == []
    assert _numbers_found("At lr 2e−3 it collapses.", "", "lr=5e-4") == ["2e−3"]


def test_settings_shown_in_code_count():
    assert _numbers_found("8 prompts of 16 samples at lr 0.0005.", "", "Config(prompts=8, group_size=16, lr=5e-4)") == []
    assert _numbers_found("20,000 draws.", "", "draws = 20_000") == []


def test_what_is_not_a_run_number():
    assert _numbers_found("Lesson 16 and lessons 17, 18 and 19 show it; see §2.3.1 and Table 6.") == []
    assert _numbers_found("The bound is $\\sqrt{2 \\log 256}$ and `max_len=48`.") == []
    assert _numbers_found("## 3 · The clip\n\n1. first\n2. second") == []
    assert _numbers_found("k3 and Q1 in fp32 on an H800, pass@8 of a 7B model.") == []
    assert _numbers_found("Published in 2024 as arXiv 2402.03300.") == []
    assert _numbers_found("## References\n\n- R. J. Williams (1992). *Simple.* Machine Learning 8, 229–256.") == []
    assert _numbers_found("## References\n\n- Williams (1992), 229–256.\n\n## Exercises\n\nIt is 0.7.") == ["0.7"]


def test_literature_figures_need_a_citation():
    assert _numbers_found("GRPO reached 51.7 % on MATH.") == ["51.7 %"]
    assert _numbers_found("GRPO reached 51.7 % on MATH (Shao et al. 2024).") == []
    assert _numbers_found("DeepSeekMath reached 51.7 % (arXiv:2402.03300).") == []
    assert _numbers_found("R1 scores 79.8 on AIME in the paper's Table 4.") == []
    assert _numbers_found("The longer run reaches 0.947 (README results table).") == []
    assert _numbers_found("`countdown-base` (pass@1 0.34 on its zoo card).") == []
    assert _numbers_found("It reports `cmd --steps 200`\nat 0.887 in the README.") == []
    # the citation covers its own sentence only
    assert _numbers_found("R1 scores 79.8 (DeepSeek-AI 2025). Ours scores 0.5.", "0.31") == ["0.5"]


def test_a_number_quoted_from_another_lesson_is_checked_against_that_lesson():
    others = {"03": shown_numbers("entropy 0.367 -> 0.031")}
    quoted = _notebook("Lesson 03's PPO run took entropy from 0.37 to 0.03 nats.")
    assert check_notebook(quoted, "16_x", others) == []
    wrong = _notebook("Lesson 03's PPO run took entropy from 0.47 to 0.03 nats.")
    assert [f.number for f in check_notebook(wrong, "16_x", others)] == ["0.47"]
    unnamed = _notebook("The PPO run took entropy from 0.37 to 0.03 nats.", "entropy 0.031")
    assert [f.number for f in check_notebook(unnamed, "16_x", others)] == ["0.37"]
    assert mentioned_lessons("lessons 16 and 18, and lesson-08's run") == {"16", "18", "08"}


def test_the_allow_list_marker():
    marker = "<!-- prose-numbers-not-from-this-run: 0.5 — the hub model's size, in billions -->"
    assert _numbers_found("A 0.5 billion-parameter model." + marker) == []
    assert _numbers_found("A 0.7 billion-parameter model." + marker) == ["0.7 billion", "t cell 0: allow-listed '0.5' is not in the cell's prose"]
    assert _numbers_found("A 0.5 model. <!-- prose-numbers-not-from-this-run: 0.5 -->") == [
        "t cell 0: malformed prose-numbers-not-from-this-run marker (needs 'numbers — reason')", "0.5"]


def _report():
    """python tests/test_prose_matches_outputs.py: every finding in every lesson, for fixing prose."""
    total, others = 0, _all_lessons_shown()
    for path in LESSONS:
        findings = check_notebook(json.loads(path.read_text(encoding="utf-8")), path.stem, others)
        total += len(findings)
        for finding in findings:
            print(finding)
    for finding in readme_findings(README.read_text(encoding="utf-8"), others):
        total += 1
        print(finding)
    print(f"{total} findings")


if __name__ == "__main__":
    _report()
