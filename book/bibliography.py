"""The book's bibliography, gathered from the lessons when the book is built (``build.py``): nothing here
is written by hand, so a citation added to a lesson is on the page at the next ``make book``.

A lesson cites a paper in two ways, and both are read:

- an item of its ``## References`` list: ``- A. Author, B. Author (YEAR). *Title.* Venue, arXiv:ID — why``
  (the text before " — " is the reference as the bibliography shows it; after it, what the lesson uses);
- a citation in its prose: ``Author et al. (YEAR, "Title", arXiv:ID)``, ``(Author & Author YEAR)``,
  ``Author (YEAR)``, ``(Author YEAR; ...)``: authors and a year, and what follows them up to the end of
  the citation (a closing bracket, ``;``, a table cell's ``|``, the end of the sentence): the arXiv id
  and the quoted title found there belong to it.

A paper is one entry by its arXiv id, else by its first author and year. A citation without an id is
the paper of the same author (any author of a reference list's item) and year that the lesson itself
cites elsewhere, else that the book cites once; one it cannot tell apart (two papers by Schulman et al.
in 2015) adds nothing, since both are then in the lesson's list already; one it does not know at all is
an entry of its own (authors, year and title as the prose gives them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote_plus

ARXIV_ID = re.compile(r"\barXiv:(\d{4}\.\d{4,5})(?:v\d+)?")
URL = re.compile(r"https?://[^\s)>\]]+[^\s)>\].,;]")
REFERENCES_HEADING = re.compile(r"^#{1,6}\s+References\s*$", re.M)
HEADING = re.compile(r"^#{1,6}\s", re.M)
# Code and math hold no citation (and a year in them is a number).
NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$", re.S)
_NAME = r"[A-Z][A-Za-z'’\-]*[a-z][A-Za-z'’\-]*|[A-Z][a-z]+"  # a surname: capitalised, not all capitals (AIME, ICML)
# Authors and a year: "Shao et al. 2024", "Bradley & Terry 1952", "Weaver and Tao (2001)", "Hoeffding's (1948)",
# "(Williams, 1992)". A single name with a bare year counts only where a citation opens: "(Mitchell 2023)",
# "; MiniMax 2025" (not "AIME 2024", "Two 2025 methods").
CITATION = re.compile(
    rf"(?P<authors>(?P<surname>{_NAME})(?P<more>\s+et\s+al\.|\s+(?:and|&)\s+(?:{_NAME}))?)(?:'s|’s)?"
    r"(?P<sep>,?\s+\(|,?\s+)(?P<year>1[89]\d\d|20\d\d)\b(?![.\d])")
QUOTED = re.compile(r"[\"“]([^\"”]{3,200})[\"”]")
TAIL = 300  # characters after a citation's year that can still belong to it


@dataclass
class Citation:
    """One citation of a paper in one lesson, as written there."""

    authors: str
    year: str
    arxiv: str = ""
    title: str = ""
    url: str = ""
    reference: str = ""  # the reference list's text (Markdown), when the citation is an item of one
    listed: bool = False  # an item of the lesson's reference list (its authors name every author)
    subject: str = ""  # what the prose calls the work: "AReaL", "Group Sequence Policy Optimization"


@dataclass
class Paper:
    """One entry of the bibliography: how to show it, its link, and the lessons citing it (file names)."""

    key: str
    authors: str
    year: str
    title: str = ""
    arxiv: str = ""
    url: str = ""
    reference: str = ""
    subject: str = ""
    lessons: set[str] = field(default_factory=set)

    @property
    def link(self) -> tuple[str, str]:
        """(text, address): the arXiv abstract, else the address the lessons give, else a search for the title."""
        if self.arxiv:
            return f"arXiv:{self.arxiv}", f"https://arxiv.org/abs/{self.arxiv}"
        if self.url:
            return self.url, self.url
        words = self.title or f"{self.authors} {self.year}"
        return "search for it", f"https://scholar.google.com/scholar?q={quote_plus(words)}"

    @property
    def surname(self) -> str:
        return _surname(self.authors)


def _surname(authors: str) -> str:
    """The first author's surname: "R. J. Williams, ..." -> "Williams"; "Shao et al." -> "Shao"."""
    first = re.split(r",|\s+et\s+al\.|\s+(?:and|&)\s+", authors.strip())[0].split()
    return first[-1] if first else ""


def _key(arxiv: str, authors: str, year: str) -> str:
    return f"arxiv-{arxiv}" if arxiv else f"{_surname(authors)}-{year}".lower()


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def reference_list(markdown: str) -> list[Citation]:
    """The items of every ``References`` list in ``markdown`` (a cell's source), in order."""
    citations = []
    for heading in REFERENCES_HEADING.finditer(markdown):
        following = HEADING.search(markdown, heading.end())
        section = markdown[heading.end():following.start() if following else len(markdown)]
        for item in re.split(r"^- ", section, flags=re.M)[1:]:
            item = _one_line(item)
            match = re.match(r"(?P<authors>.+?) \((?P<year>\d{4})\)\.\s*(?P<rest>.*)", item)
            if not match:
                continue  # not a paper (no year): nothing to list
            reference = f"{match['authors']} ({match['year']}). {match['rest'].split(' — ')[0].strip()}"
            arxiv, url, title = ARXIV_ID.search(item), URL.search(item), re.search(r"\*([^*]+)\*", match["rest"])
            citations.append(Citation(match["authors"], match["year"], arxiv.group(1) if arxiv else "",
                                      _one_line(title.group(1)).rstrip(".") if title else "",
                                      url.group(0) if url else "", reference, listed=True))
    return citations


def _citation_end(tail: str) -> int:
    """How much of ``tail`` (the text after a citation's year) still belongs to that citation."""
    depth = 0
    for i, char in enumerate(tail[:TAIL]):
        if char == "(":
            depth += 1
        elif char == ")":
            if depth == 0:
                return i
            depth -= 1
        elif char in ";|" or tail.startswith("\n\n", i) or re.match(r"[.!?]\s+[A-Z]", tail[i:i + 3]):
            return i
    return min(len(tail), TAIL)


def _subject(before: str) -> str:
    """What the prose calls the work cited at the end of ``before``: the start of the bracket the citation
    opens with ("(Group Sequence Policy Optimization; Zheng et al."), else the capitalised words just before
    that bracket ("Asynchronous RLHF (Noukhovitch et al."); '' when neither is there."""
    depth, start = 0, -1
    for i in range(len(before) - 1, max(-1, len(before) - 120), -1):
        if before[i] == ")":
            depth += 1
        elif before[i] == "(":
            if depth == 0:
                start = i
                break
            depth -= 1
    if start < 0:
        return ""
    inside = _one_line(before[start + 1:]).rstrip(";, ")
    if inside and re.fullmatch(r"[\w'’\- ]{2,60}", inside):
        return re.sub(r"['’]s$", "", inside)
    words = re.search(r"((?:[A-Z][\w.\-]*)(?:\s+[A-Z][\w.\-]*)*)\s*$", before[:start].replace("*", ""))
    return words.group(1) if words else ""


def prose_citations(markdown: str) -> list[Citation]:
    """The author-year citations in ``markdown``'s prose (its reference lists, code and math left out),
    each with the arXiv id and quoted title that follow it in the same citation."""
    prose = REFERENCES_HEADING.split(markdown)[0]
    prose = NOT_PROSE.sub(lambda m: " " * len(m.group(0)), prose)
    matches = list(CITATION.finditer(prose))
    citations = []
    for index, match in enumerate(matches):
        bare = not match["more"] and "(" not in match["sep"]
        if bare and not re.search(r"(?:\(|;\s*)$", prose[:match.start()]):
            continue
        stop = matches[index + 1].start() if index + 1 < len(matches) else len(prose)
        tail = prose[match.end():stop]
        tail = tail[:_citation_end(tail)]
        arxiv, title = ARXIV_ID.search(tail), QUOTED.search(tail)
        authors = re.sub(r"['’]s$", "", _one_line(match["authors"]))  # "Hoeffding's (1948)"
        citations.append(Citation(authors, match["year"], arxiv.group(1) if arxiv else "",
                                  _one_line(title.group(1)).rstrip(".,") if title else "",
                                  subject=_subject(prose[:match.start()])))
    return citations


def lesson_citations(notebook: dict) -> list[Citation]:
    """Every citation in ``notebook``'s Markdown cells: its reference lists' items, then its prose's."""
    cells = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
             for c in notebook["cells"] if c["cell_type"] == "markdown"]
    return [c for text in cells for c in reference_list(text)] + [c for text in cells for c in prose_citations(text)]


def _cites(citation: Citation, paper: Paper) -> bool:
    """Whether ``citation`` (no arXiv id) names ``paper``: its year, and its first surname among the paper's authors."""
    surname = _surname(citation.authors)
    return paper.year == citation.year and re.search(rf"(?<![\w-]){re.escape(surname)}(?![\w-])", paper.authors) is not None


def _merge(paper: Paper, citation: Citation) -> None:
    """Keep the fullest description of ``paper`` across its citations."""
    if citation.listed and len(citation.reference) > len(paper.reference):
        paper.reference, paper.authors = citation.reference, citation.authors
    if len(citation.title) > len(paper.title):
        paper.title = citation.title
    paper.url = paper.url or citation.url
    paper.subject = paper.subject or citation.subject


def bibliography(lessons: dict[str, dict]) -> list[Paper]:
    """Every paper the ``lessons`` (file name -> notebook) cite, each with the lessons citing it, sorted by
    first author and year."""
    papers: dict[str, Paper] = {}
    cited = {name: lesson_citations(notebook) for name, notebook in lessons.items()}
    pending = []  # prose citations without an id: resolved once every paper with an id or a list item is known
    for name, citations in cited.items():
        for citation in citations:
            if not (citation.arxiv or citation.listed):
                pending.append((name, citation))
                continue
            key = _key(citation.arxiv, citation.authors, citation.year)
            paper = papers.setdefault(key, Paper(key, citation.authors, citation.year, arxiv=citation.arxiv))
            _merge(paper, citation)
            paper.lessons.add(name)
    for name, citation in pending:
        own = [p for p in papers.values() if name in p.lessons and _cites(citation, p)]
        anywhere = [p for p in papers.values() if _cites(citation, p)]
        candidates = own or anywhere
        if len(candidates) == 1:
            candidates[0].lessons.add(name)
            _merge(candidates[0], citation)
        elif not candidates:
            key = _key("", citation.authors, citation.year)
            paper = papers.setdefault(key, Paper(key, citation.authors, citation.year))
            _merge(paper, citation)
            paper.lessons.add(name)
    return sorted(papers.values(), key=lambda p: (p.surname.lower(), p.year, p.title.lower()))


def bibliography_page(papers: list[Paper], pages: dict[str, str]) -> str:
    """``bibliography.md``: one paragraph per paper — its reference, its link, the lessons citing it
    (``pages``: lesson file name -> its page, relative to the bibliography)."""
    lines = ["# Bibliography", "",
             "Every paper the lessons cite, gathered from the lessons when the book is built: the items of their "
             "reference lists and the citations in their text (an arXiv id, or authors and a year). Each links to its "
             "arXiv abstract, or to the address the lessons give; a paper with neither links to a search for its "
             f"title. {len(papers)} papers.", ""]
    for paper in papers:
        text, address = paper.link
        lines += [f"(bib-{re.sub(r'[^a-z0-9]+', '-', paper.key.lower())})=",
                  f"{_shown(paper)} [{text}]({address}) — cited in "
                  f"{'lesson' if len(paper.lessons) == 1 else 'lessons'} "
                  + ", ".join(f"[{name[:2]}]({pages[name]})" for name in sorted(paper.lessons)) + ".", ""]
    return "\n".join(lines)


def _shown(paper: Paper) -> str:
    """``paper``'s reference as the bibliography shows it, without the link that follows it."""
    if paper.reference:
        shown = ARXIV_ID.sub("", paper.reference) if paper.arxiv else paper.reference
        shown = shown.replace(paper.url, "") if paper.url else shown
    elif paper.title:
        shown = f"{paper.authors} ({paper.year}). *{paper.title}*"
    else:
        shown = f"{paper.authors} ({paper.year})" + (f", on {paper.subject}" if paper.subject else "")
    shown = re.sub(r"\s*,\s*(?=[.,;]|$)", "", _one_line(shown)).rstrip(" ,;")
    shown = re.sub(r"\s+([.,;])", r"\1", shown)
    shown = re.sub(r"(?<!\.)\.(\**)\.(?!\.)", r".\1", shown)  # "*TRPO.* arXiv:1502.05477." -> "*TRPO.*"
    return shown if re.search(r"[.?!]\**$", shown) else shown + "."
