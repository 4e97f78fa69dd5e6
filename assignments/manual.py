"""The hand-graded questions: export every student's written answers and a score sheet, then merge the scores.

    python assignments/manual.py export SUBMISSIONS/ --assignment a2_ppo --out a2_manual/
    (fill in a2_manual/scores.csv: one row per student, one column per hand-graded question)
    python assignments/manual.py merge a2_scores.csv a2_manual/scores.csv --out a2_final.csv

``export`` reads each notebook (as ``grade.py`` does: nothing is executed) and writes ``OUT/<student>.md``,
the student's answer cells of each hand-graded question (the cells between the question's prompt and its
end marker), and ``OUT/scores.csv``, a sheet with an empty score column per question (its maximum in the
header) and a comment column. ``merge`` checks every score (a number in [0, max], or empty for 0) and
writes the autograded CSV with the hand-graded columns, ``manual_total``, ``grand_total`` (times the
late factor when ``grade.py --late`` set one) and ``grand_possible`` added.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import grade  # noqa: E402

BEGIN, END = "<!-- BEGIN QUESTION -->", "<!-- END QUESTION -->"


def written_answers(path: pathlib.Path, names: list[str]) -> dict[str, str]:
    """{question: the text of the student's cells inside it}, the hand-graded questions in notebook order."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return {name: "(the notebook could not be read)" for name in names}
    answers, current, pending = {}, None, list(names)
    for cell in cells:
        source = "".join(cell.get("source", ""))
        if current is not None and source.lstrip().startswith(END):
            current = None
        if BEGIN in source and pending:
            current = pending.pop(0)
            answers[current] = ""
            continue
        if current is not None:
            answers[current] += source.strip() + "\n\n"
    return {name: answers.get(name, "(not found: the question's cells were deleted)").strip() for name in names}


def _column(question: dict) -> str:
    return f"{question['name']} (max {question['points']:g})"


def export(submissions: pathlib.Path, autograder: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """Write ``out/<student>.md`` and the score sheet ``out/scores.csv``; returns the sheet's path."""
    if not submissions.is_dir():
        raise ValueError(f"submissions must be a folder of .ipynb files, got {submissions}")
    manual = grade.load_spec(autograder)["manual"]
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for path in sorted(submissions.glob("*.ipynb")):
        answers = written_answers(path, [q["name"] for q in manual])
        text = "\n\n".join(f"## {q['name']} ({q['points']:g} points)\n\n{answers[q['name']]}" for q in manual)
        (out / f"{path.stem}.md").write_text(f"# {path.stem}\n\n{text}\n")
        rows.append({"student": path.stem, **{_column(q): "" for q in manual}, "comment": ""})
    sheet = out / "scores.csv"
    with open(sheet, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["student", *map(_column, manual), "comment"])
        writer.writeheader()
        writer.writerows(rows)
    return sheet


def _score(text: str, student: str, question: dict) -> float:
    try:
        value = float(text) if text.strip() else 0.0
    except ValueError:
        raise ValueError(f"scores: {student}'s {question['name']} must be a number, got {text!r}") from None
    if not 0 <= value <= question["points"]:
        raise ValueError(f"scores: {student}'s {question['name']} must be in [0, {question['points']:g}], got {value:g}")
    return value


def merge(autograded: pathlib.Path, sheet: pathlib.Path, autograder: pathlib.Path, out: pathlib.Path) -> list[dict]:
    """The autograded CSV with each hand-graded score and the grand totals added, written to ``out``."""
    manual = grade.load_spec(autograder)["manual"]
    with open(autograded, newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(sheet, newline="") as handle:
        scores = {row["student"]: row for row in csv.DictReader(handle)}
    missing = [row["student"] for row in rows if row["student"] not in scores]
    if missing:
        raise ValueError(f"scores: no row for {', '.join(missing)} in {sheet}")
    for row in rows:
        entered = scores[row["student"]]
        for question in manual:
            if _column(question) not in entered:
                raise ValueError(f"scores: {sheet} has no column {_column(question)!r}")
            row[question["name"]] = _score(entered[_column(question)], row["student"], question)
        row["manual_total"] = sum(row[q["name"]] for q in manual)
        row["manual_comment"] = entered.get("comment", "")
        factor = float(row.get("late_factor") or 1.0)  # grade.py --late: the same factor on the hand-graded part
        row["grand_total"] = (float(row["total"]) + row["manual_total"]) * factor
        row["grand_possible"] = float(row["possible"]) + sum(q["points"] for q in manual)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["student"])
        writer.writeheader()
        writer.writerows(rows)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=pathlib.Path, default=grade.DEFAULT_BUILD, help="where `make assignments` built")
    commands = parser.add_subparsers(dest="command", required=True)
    exporting = commands.add_parser("export", help="written answers and an empty score sheet")
    exporting.add_argument("submissions", type=pathlib.Path)
    exporting.add_argument("--assignment", required=True)
    exporting.add_argument("--out", type=pathlib.Path, required=True)
    merging = commands.add_parser("merge", help="add the filled score sheet to grade.py's CSV")
    merging.add_argument("autograded", type=pathlib.Path)
    merging.add_argument("sheet", type=pathlib.Path)
    merging.add_argument("--assignment", required=True)
    merging.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    autograder = args.build / args.assignment / "autograder"
    if args.command == "export":
        print(export(args.submissions, autograder, args.out))
    else:
        for row in merge(args.autograded, args.sheet, autograder, args.out):
            print(f"{row['student']}: {row['grand_total']:g} / {row['grand_possible']:g}")


if __name__ == "__main__":
    main()
