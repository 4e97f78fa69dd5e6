"""The built book (``make book``) in a browser: every page renders, its math typesets with no error,
every image loads, every internal link resolves (its anchor included), and nothing is fetched from
outside the site.

And what a reader must be able to read: no check line (✓ / =) cut off, no TeX left as text, every
figure at a legible size; each lesson offers its notebook, links its mentions of other lessons and
its arXiv citations; API entries link to their source; every page links the repository (or the book's
source, downloaded from the site) and lists the bibliography in its navigation, whose papers link to the
lessons citing them. The site: conftest's ``book_html``/``book_url``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urldefrag, urlparse

from labtools import REPO, assert_no_console_errors

# A figure is legible when shown at no less than this share of its own width: matplotlib's 10 pt labels at
# the lessons' 100 dpi are 14 px tall, and at 80 % still 11 px, the size of the theme's smallest text.
LEGIBLE = 0.8
# Figures stored before the library drew them to fit the column (rlbook._figures), by page and their width in
# px: each is shown scaled below LEGIBLE until its lesson is executed again (then its width changes and it
# leaves this list on its own; a figure still too wide then fails). Every other figure below LEGIBLE fails.
STORED_BEFORE_THE_FIX: set[tuple[str, int]] = set()  # empty since every listed lesson was executed again

# What each page reports once MathJax (if the page loads it) has finished typesetting.
PAGE_REPORT_JS = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const math = Array.from(document.querySelectorAll('span.math, div.math'));
  return {
    title: document.title.trim(),
    heading: (document.querySelector('article h1') || document.querySelector('h1') || {}).textContent || '',
    math: math.length,
    untypeset: math.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    mathErrors: Array.from(document.querySelectorAll('mjx-merror, [data-mml-node="merror"]'))
                     .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120)),
    images: document.images.length,
    brokenImages: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))
                       .map(i => i.currentSrc || i.src),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.getAttribute('name')),
    sliders: document.querySelectorAll('.rlbook-widget-slider input[type=range]').length,
    labLinks: Array.from(document.querySelectorAll('.rlbook-open-in-lab a.rlbook-lab-link')).map(a => a.href),
    downloads: Array.from(document.querySelectorAll('.rlbook-open-in-lab a.rlbook-download')).map(a => a.href),
    // A check line (✓ / =) of an output that the reader cannot see whole: its block scrolls sideways.
    clippedChecks: Array.from(document.querySelectorAll('article pre'))
        .filter(pre => pre.scrollWidth > pre.clientWidth + 1)
        .flatMap(pre => pre.textContent.split('\\n').filter(line => /^\\s*[✓=] /.test(line)))
        .map(line => line.slice(0, 80)),
    clippedBlocks: Array.from(document.querySelectorAll('article pre')).filter(pre => pre.scrollWidth > pre.clientWidth + 1).length,
    // Each figure of a cell's output: its shown width against its own (its text's size on screen).
    figures: Array.from(document.querySelectorAll('article .cell_output img')).map(img => ({
        src: img.currentSrc.split('/').pop().slice(0, 60), shown: img.getBoundingClientRect().width,
        natural: img.naturalWidth, column: img.closest('.cell_output').clientWidth,
        opensFullSize: img.classList.contains('rlbook-scaled')})),
    // TeX left as text: a backslash command or $$ in the prose (not in code, not in typeset math).
    rawTex: (() => {
      const walker = document.createTreeWalker(document.querySelector('article') || document.body, NodeFilter.SHOW_TEXT, {
        acceptNode: node => node.parentElement.closest('pre, code, script, style, mjx-container, .math, textarea')
                            ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
      const found = [];
      while (walker.nextNode()) {
        const match = walker.currentNode.textContent.match(/\\\\[a-zA-Z]{2,}|\\$\\$/);
        if (match) found.push(walker.currentNode.textContent.trim().slice(0, 80));
      }
      return found;
    })(),
    // Mentions of another lesson in the prose (not in code, math or a heading), and how many are links.
    lessonMentions: (() => {
      const own = (window.location.pathname.match(/lessons\\/(\\d\\d)_/) || [])[1];
      const article = document.querySelector('article');
      const counts = {prose: 0, linked: 0};
      if (!article) return counts;
      const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
      while (walker.nextNode()) {
        const node = walker.currentNode;
        if (node.parentElement.closest('pre, code, h1, h2, h3, h4, .math, mjx-container')) continue;
        const others = (node.textContent.match(/\\blesson \\d\\d\\b/gi) || []).filter(m => m.slice(-2) !== own);
        counts.prose += others.length;
        if (node.parentElement.closest('a[href]')) counts.linked += others.length;
      }
      return counts;
    })(),
    arxivLinks: Array.from(document.querySelectorAll('article a[href^="https://arxiv.org/abs/"]')).length,
    sourceLinks: document.querySelectorAll('a .viewcode-link, a.viewcode-link, .viewcode-link').length,
    codeBlocks: document.querySelectorAll('article div.highlight').length,
    copyButtons: document.querySelectorAll('article div.highlight > button.rlbook-copy').length,
    navigation: Array.from(document.querySelectorAll('.bd-sidebar-primary nav a[href]')).map(a => a.href),
    repository: Array.from(document.querySelectorAll('a.btn-source-repository-button')).map(a => a.href),
  };
}"""


def _pages(html: Path) -> list[str]:
    skip = {"_static", "_sources", "_images"}
    return sorted(str(p.relative_to(html)) for p in html.rglob("*.html") if not skip & set(p.relative_to(html).parts))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_every_page_renders_with_math_images_and_links(page, book_html, book_url):
    # Every request the pages make, seen as it starts (a listener, not page.route: routing turns the browser's
    # cache off, and then every page fetches and compiles MathJax and the theme again: twice the CPU).
    outside = []
    page.on("request", lambda request: request.url.startswith((book_url, "data:", "blob:"))
            or outside.append(request.url))
    # With its cache on, Chromium also asks the server for /favicon.ico, which no page links (the site has no
    # icon): its 404 is the browser's, not a page's.
    browser_own = (f"({book_url}favicon.ico)",)
    problems, ids, links, reports = [], {}, {}, {}
    for name in _pages(book_html):
        errors_before = len(page.console_errors)
        page.goto(book_url + name, wait_until="load")
        report = page.evaluate(PAGE_REPORT_JS)
        reports[name] = report
        where = f"{name}:"
        if not report["title"] or not report["heading"].strip():
            problems.append(f"{where} no title or heading")
        if report["untypeset"]:
            problems.append(f"{where} math not typeset: {report['untypeset'][:3]}")
        if report["mathErrors"]:
            problems.append(f"{where} math errors: {report['mathErrors'][:3]}")
        if report["brokenImages"]:
            problems.append(f"{where} images that did not load: {report['brokenImages'][:3]}")
        problems += [f"{where} {error}" for error in page.console_errors[errors_before:]
                     if not error.endswith(browser_own)]
        ids[name] = set(report["ids"])
        for link in report["links"]:
            if link.startswith(book_url):
                links.setdefault(link, name)
    for link, source in links.items():
        target, anchor = urldefrag(link)
        path = urlparse(target).path.lstrip("/") or "index.html"
        if path.endswith("/"):
            path += "index.html"
        if path in ids:
            if anchor and anchor not in ids[path]:
                problems.append(f"{source}: link to a missing anchor {path}#{anchor}")
        elif _status(target) != 200:
            problems.append(f"{source}: broken link {target}")
    assert not outside, f"pages fetched from outside the site: {sorted(set(outside))[:5]}"
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])

    lessons = [name for name in reports if name.startswith("lessons/")]
    assert len(lessons) == len(list((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))), "a page per lesson"
    for name in lessons:  # served here, not by `make lab`: rlbook.js points the link at JupyterLab's default address
        notebook = f"{Path(name).stem}.ipynb"
        assert reports[name]["labLinks"] == [f"http://localhost:8888/lab/tree/{notebook}"], name
        assert reports[name]["downloads"] == [f"{book_url}notebooks/{notebook}"], name
        assert _status(reports[name]["downloads"][0]) == 200, f"{name}: its notebook cannot be downloaded"
    what_a_reader_misses, too_wide, executed_again = [], [], set(STORED_BEFORE_THE_FIX)
    for name, report in reports.items():
        what_a_reader_misses += [f"{name}: check line cut off: {line!r}" for line in report["clippedChecks"]]
        what_a_reader_misses += [f"{name}: TeX shown as text: {text!r}" for text in report["rawTex"]]
        for figure in report["figures"]:
            scale = figure["shown"] / figure["natural"]
            if scale >= LEGIBLE:
                continue
            if (name, figure["natural"]) in STORED_BEFORE_THE_FIX and figure["opensFullSize"]:
                too_wide.append(f"{name}: {figure['natural']} px wide, shown at {scale:.0%}")
                executed_again.discard((name, figure["natural"]))
                continue
            what_a_reader_misses.append(f"{name}: figure {figure['src']} shown at {scale:.0%} of its size, in a "
                                        f"{figure['column']} px column")
    assert not what_a_reader_misses, (f"{len(what_a_reader_misses)} things a reader cannot read:\n"
                                      + "\n".join(what_a_reader_misses[:40]))
    if too_wide:  # stored before their figures were drawn to fit the column: a click opens each at full size
        print(f"\n{len(too_wide)} figures stored before the library drew them to fit the column (their lessons "
              "are to be executed again):\n" + "\n".join(too_wide))
    if executed_again:
        print(f"\nno longer on their pages (executed again; STORED_BEFORE_THE_FIX can drop them): {sorted(executed_again)}")
    mentions = sum(reports[name]["lessonMentions"]["prose"] for name in lessons)
    linked = sum(reports[name]["lessonMentions"]["linked"] for name in lessons)
    assert mentions > 100 and linked == mentions, f"{linked} of {mentions} mentions of another lesson link to it"
    assert sum(reports[name]["arxivLinks"] for name in lessons) > 50, "arXiv citations link to their abstracts"
    assert reports["api/rlbook.kl.html"]["sourceLinks"] > 0, "API entries link to their source"
    assert all(reports[name]["copyButtons"] == reports[name]["codeBlocks"] for name in lessons), "a copy button per code block"
    assert sum(reports[name]["math"] for name in lessons) > 100, "the lessons' math is on the pages"
    assert sum(reports[name]["sliders"] for name in lessons) > 10, "stored sliders are drawn"
    assert sum(1 for name in reports if name.startswith("api/")) > 20, "API pages exist"

    # The bibliography: in every page's navigation; its papers link to their abstracts and to the lessons
    # citing them (pages of the site: the link check above found each one).
    bibliography = reports["bibliography.html"]
    assert [name for name in lessons + ["index.html"] if f"{book_url}bibliography.html" not in reports[name]["navigation"]] == []
    cited_in = {urlparse(link).path.lstrip("/") for link in bibliography["links"] if "/lessons/" in link}
    assert cited_in <= set(lessons) and len(cited_in) >= 20, f"the bibliography links {len(cited_in)} lessons"
    assert bibliography["arxivLinks"] >= 40, "each paper with an arXiv id links to its abstract"
    # A repository link on every page: the theme's button, to the public repository or to the book's source
    # as the site ships it (book/conf.py), which the link check above fetched.
    assert [name for name, report in reports.items() if len(report["repository"]) != 1] == [], "a repository link per page"
    assert len({link if not link.startswith(book_url) else urldefrag(link)[0].rsplit("/", 1)[-1]
                for report in reports.values() for link in report["repository"]}) == 1
    assert_no_console_errors(page, ignore=browser_own)
