"""What a person sees of a page's charts, read from the rendered SVG in Chromium, and what makes
one unreadable.

`CHART_FACTS` (run with `page.evaluate`) reads every Vega chart drawn on the page (Streamlit draws
them as SVG) into plain records: the chart's box, its plot areas, its data marks (each item's
box and colour), its texts (axis labels and titles, legend labels and titles, mark labels: text,
box, whether shown) and its legend entries (symbol colour, label). `chart_problems` turns one
record into the sentences a reader would say: "the bars are hairlines", "two labels are printed
over each other", "the legend is cut at the chart's edge", "a series has no legend entry",
"one line hides another and no word says so". Pure Python over the records, so the rules are
unit-tested without a browser (tests/browser/test_geometry.py).

`CLIPPED_OR_OUT` is the page-wide scan: an element that hides part of its content or sticks out
of the page.
"""
from __future__ import annotations

from dataclasses import dataclass

MIN_PLOT_PX = 30  # a plot area narrower or shorter than this shows nothing a reader can compare
MIN_BAR_PX = 4  # a bar's thickness (its band): thinner reads as a line, not a bar
MIN_CELL_PX = 1  # a heatmap cell: the cells tile, so one pixel still shows its colour
OVERLAP_PX = 2  # two text boxes sharing more than this (both ways) print over each other
EDGE_PX = 1  # a text box may touch its chart's edge by this much (anti-aliasing, rounding)
SAME_LINE_PX = 1.0  # two lines whose points all lie this close draw as one

# One record per drawn chart. Boxes are {x, y, w, h} in page pixels (getBoundingClientRect).
CHART_FACTS = r"""() => {
  const box = e => { const r = e.getBoundingClientRect();
                     return {x: r.x, y: r.y + window.scrollY, w: r.width, h: r.height}; };
  const known = new Map();  // group -> shown, so that a mark's thousand items read their groups once
  const shownGroup = e => {  // drawn with some opacity, it and its groups up to the svg
    if (!e || e.tagName === 'svg') return true;
    if (known.has(e)) return known.get(e);
    const cs = getComputedStyle(e);
    const seen = !(Number(e.getAttribute('opacity') ?? 1) < 0.05 || cs.display === 'none'
                   || cs.visibility === 'hidden' || Number(cs.opacity) < 0.05) && shownGroup(e.parentElement);
    known.set(e, seen);
    return seen;
  };
  // An item is drawn when its own opacity (Vega hides overlapping labels with opacity 0, and draws
  // invisible hover targets at 0.001: attributes, not styles) and its groups' let it show.
  const shown = e => Number(e.getAttribute('opacity') ?? 1) >= 0.05 && shownGroup(e.parentElement);
  // A mark's items alike in size, colours and visibility read as one, with their count `n` (a
  // heatmap's or a bar chart's thousands of cells come back as a few records).
  const alike = items => {
    const groups = new Map();
    for (const i of items) {
      const k = [i.box.w.toFixed(1), i.box.h.toFixed(1), i.fill, i.stroke, i.shown].join('|');
      if (groups.has(k)) groups.get(k).n += 1; else groups.set(k, {...i, n: 1});
    }
    return [...groups.values()];
  };
  const ruler = document.createElement('canvas').getContext('2d');
  const ink = t => {  // a text's box shrunk to its glyphs' ink: across the line the font box adds
                     // leading, along it the first and last letters' side bearings
    const b = box(t), cs = getComputedStyle(t);
    ruler.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const m = ruler.measureText(t.textContent);
    const above = Math.max(0, m.fontBoundingBoxAscent - m.actualBoundingBoxAscent);
    const below = Math.max(0, m.fontBoundingBoxDescent - m.actualBoundingBoxDescent);
    const start = Math.max(0, -m.actualBoundingBoxLeft), end = Math.max(0, m.width - m.actualBoundingBoxRight);
    const turn = ((t.getAttribute('transform') || '').match(/rotate\((-?[\d.]+)/) || [0, 0])[1] % 360;
    const across = Math.max(0, (turn == 0 ? b.h : b.w) - above - below);
    const along = Math.max(0, (turn == 0 ? b.w : b.h) - start - end);
    if (turn == 0) return {x: b.x + start, y: b.y + above, w: along, h: across};
    if (turn == -90 || turn == 270) return {x: b.x + above, y: b.y + end, w: across, h: along};
    if (turn == 90 || turn == -270) return {x: b.x + below, y: b.y + start, w: across, h: along};
    return b;
  };
  const colour = (e, attr) => {
    const v = e.getAttribute(attr);
    return v && v !== 'none' && v !== 'transparent' ? v.toLowerCase() : null;
  };
  const named = el => {  // the chart's Streamlit key, else its axis titles, for messages
    const keyed = el.closest('[class*="st-key-"]');
    const key = keyed ? [...keyed.classList].find(c => c.startsWith('st-key-')).slice(7) : '';
    return key;
  };
  const cellOf = (root, e) => {  // the plot cell a mark belongs to: a scope outside legends, or the root
    for (let n = e.parentElement; n; n = n.parentElement) {
      if (n === root) return n;
      if (n.classList && n.classList.contains('role-scope') && !n.closest('.role-legend')) return n;
    }
    return root;
  };
  const background = g => {
    for (const child of g.children)
      for (const p of child.children)
        if (p.tagName === 'path' && p.classList.contains('background')) return p;
    return null;
  };
  const charts = [];
  document.querySelectorAll('[data-testid=stVegaLiteChart]').forEach((el, index) => {
    const svg = el.querySelector('svg.marks');
    const outer = box(el);
    const details = el.closest('details');
    if (!svg || outer.w < 20 || outer.h < 20 || (details && !details.open)) return;  // a preload, a chart
    // not drawn yet, or one folded away in a closed expander
    const root = svg.querySelector('g.role-frame.root') || svg;
    const cells = new Map();
    const marks = [];
    svg.querySelectorAll('g.role-mark').forEach(g => {
      const items = [...g.children].filter(c => c.getAttribute('aria-roledescription'));
      if (!items.length) return;
      const kind = items[0].getAttribute('aria-roledescription').replace(/ mark$/, '');
      const cell = cellOf(root, g);
      if (!cells.has(cell)) { const bg = background(cell); cells.set(cell, bg ? box(bg) : null); }
      const read = items.map(i => ({
        box: kind === 'text' ? ink(i) : box(i), fill: colour(i, 'fill'), stroke: colour(i, 'stroke'), shown: shown(i),
        d: i.tagName === 'path' && kind === 'line' ? i.getAttribute('d') : null,
        width: Number(i.getAttribute('stroke-width') || 1), dashed: !!i.getAttribute('stroke-dasharray'),
        text: kind === 'text' ? i.textContent : null}));
      marks.push({kind, cell: [...cells.keys()].indexOf(cell),
                  items: kind === 'text' || kind === 'line' ? read : alike(read)});
    });
    const texts = [];
    const roles = {'role-axis-label': 'axis label', 'role-axis-title': 'axis title',
                   'role-legend-label': 'legend label', 'role-legend-title': 'legend title',
                   'role-title-text': 'title', 'role-title-subtitle': 'subtitle'};
    for (const [cls, role] of Object.entries(roles))
      svg.querySelectorAll(`g.${cls} text`).forEach(t => {
        if (t.textContent.trim()) texts.push({role, text: t.textContent, box: ink(t), shown: shown(t)});
      });
    for (const m of marks)
      if (m.kind === 'text')
        m.items.forEach(i => { if ((i.text || '').trim()) texts.push({role: 'mark label', text: i.text, box: i.box, shown: i.shown}); });
    const legends = [];
    svg.querySelectorAll('g.role-legend').forEach(lg => {
      const entries = [];
      lg.querySelectorAll('g.role-legend-symbol > path').forEach(sym => {
        const entry = sym.parentElement.parentElement;
        const label = entry.querySelector('g.role-legend-label text');
        entries.push({fill: colour(sym, 'fill'), stroke: colour(sym, 'stroke'),
                      label: label ? label.textContent : '', box: label ? ink(label) : box(sym),
                      shown: shown(sym)});
      });
      legends.push({gradient: !!lg.querySelector('g.role-legend-gradient'), entries, label: lg.getAttribute('aria-label') || ''});
    });
    charts.push({index, key: named(el), box: outer, svg: box(svg),
                 plots: [...cells.values()], marks, texts, legends});
  });
  return charts;
}"""


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    w: float
    h: float

    @classmethod
    def of(cls, d: dict) -> "Box":
        return cls(d["x"], d["y"], d["w"], d["h"])

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def bottom(self) -> float:
        return self.y + self.h

    def shared(self, other: "Box") -> tuple[float, float]:
        """Width and height the two boxes share (0 where they do not meet)."""
        return (max(0.0, min(self.right, other.right) - max(self.x, other.x)),
                max(0.0, min(self.bottom, other.bottom) - max(self.y, other.y)))

    def holds(self, other: "Box", slack: float = EDGE_PX) -> bool:
        return (other.x >= self.x - slack and other.y >= self.y - slack and other.right <= self.right + slack
                and other.bottom <= self.bottom + slack)


def name(chart: dict) -> str:
    """How a message names a chart: its container's key, its place on the page, its titles."""
    titles = [t["text"] for t in chart["texts"] if t["role"] in ("title", "axis title", "legend title") and t["shown"]]
    return f"{chart['key'] or 'chart'} #{chart['index']} ({' / '.join(titles[:3])[:80]})"


def collapsed_plots(chart: dict) -> list[str]:
    """Plot areas too small to compare anything in: those holding lines, points, areas or bars
    (a grid of cells, such as a one-row block pool, may be one cell high; hairline_marks
    judges its cells)."""
    cells = {m["cell"] for m in chart["marks"] if m["kind"] in SERIES_KINDS}
    return [f"plot area is {p['w']:.0f} x {p['h']:.0f} px" for n, p in enumerate(chart["plots"])
            if n in cells and p is not None and (p["w"] < MIN_PLOT_PX or p["h"] < MIN_PLOT_PX)]


def _thickness(items: list[dict]) -> list[tuple[float, int]]:
    """Each bar's thickness and how many bars are alike (`n`): the side all bars of the mark share
    (their band), else the thinner side."""
    boxes = [(Box.of(i["box"]), i.get("n", 1)) for i in items]
    if len(boxes) > 1:
        heights, widths = {round(b.h, 1) for b, _ in boxes}, {round(b.w, 1) for b, _ in boxes}
        if len(heights) == 1 and len(widths) > 1:
            return [(b.h, n) for b, n in boxes]
        if len(widths) == 1 and len(heights) > 1:
            return [(b.w, n) for b, n in boxes]
    return [(min(b.w, b.h), n) for b, n in boxes if max(b.w, b.h) > 0]  # one bar, or a heatmap-like grid


def hairline_marks(chart: dict) -> list[str]:
    """Bars thinner than MIN_BAR_PX, heatmap cells thinner than MIN_CELL_PX."""
    found = []
    for mark in chart["marks"]:
        least = {"bar": MIN_BAR_PX, "rect": MIN_CELL_PX}.get(mark["kind"])
        items = [i for i in mark["items"] if i["shown"]]
        if least is None or not items:
            continue
        thin = [(t, n) for t, n in _thickness(items) if t < least]
        if thin:
            found.append(f"{sum(n for _, n in thin)} of {sum(i.get('n', 1) for i in items)} {mark['kind']}s are "
                         f"{min(t for t, _ in thin):.2f} px thick (at least {least} px reads as a {mark['kind']})")
    return found


def _shown_texts(chart: dict) -> list[dict]:
    return [t for t in chart["texts"] if t["shown"]]


def overlapping_texts(chart: dict) -> list[str]:
    """Pairs of shown text boxes printed over each other."""
    texts, found = _shown_texts(chart), []
    for i, a in enumerate(texts):
        for b in texts[i + 1:]:
            w, h = Box.of(a["box"]).shared(Box.of(b["box"]))
            if w > OVERLAP_PX and h > OVERLAP_PX:
                found.append(f"{a['role']} {a['text']!r} and {b['role']} {b['text']!r} overlap "
                             f"({w:.0f} x {h:.0f} px)")
    return found


def clipped_texts(chart: dict) -> list[str]:
    """Shown texts that run past the chart's box (the SVG cuts them there), or are cut short
    with an ellipsis by a label limit."""
    frame = Box.of(chart["svg"]).shared(Box.of(chart["box"]))
    outer = Box(max(chart["svg"]["x"], chart["box"]["x"]), max(chart["svg"]["y"], chart["box"]["y"]), *frame)
    found = []
    for t in _shown_texts(chart):
        b = Box.of(t["box"])
        if not outer.holds(b):
            found.append(f"{t['role']} {t['text']!r} is cut by the chart's edge "
                         f"(text {b.x:.0f}–{b.right:.0f} x {b.y:.0f}–{b.bottom:.0f}, "
                         f"chart {outer.x:.0f}–{outer.right:.0f} x {outer.y:.0f}–{outer.bottom:.0f})")
        elif t["text"].rstrip().endswith("…"):
            found.append(f"{t['role']} {t['text']!r} is cut short")
    return found


def texts_over_plots(chart: dict) -> list[str]:
    """Axis and legend texts drawn inside a plot area (over the data)."""
    found = []
    plots = [Box.of(p) for p in chart["plots"] if p is not None]
    for t in _shown_texts(chart):
        if t["role"] == "mark label":
            continue
        for p in plots:
            w, h = p.shared(Box.of(t["box"]))
            if w > OVERLAP_PX and h > OVERLAP_PX:
                found.append(f"{t['role']} {t['text']!r} lies over the plot ({w:.0f} x {h:.0f} px)")
    return found


SERIES_KINDS = {"line": "stroke", "bar": "fill", "area": "fill", "point": "fill", "circle": "fill",
                "square": "fill", "symbol": "fill"}


def _series_colours(chart: dict) -> set[str]:
    colours = set()
    for mark in chart["marks"]:
        attr = SERIES_KINDS.get(mark["kind"])
        if attr is None and mark["kind"] == "rect" and any(not lg["gradient"] for lg in chart["legends"]):
            attr = "fill"  # a categorical heatmap: its colours are series too
        for i in mark["items"] if attr else []:
            c = i[attr] or (i["stroke"] if attr == "fill" else None)  # an unfilled point
            if i["shown"] and c:
                colours.add(c)
    return colours


def _legend_labels(chart: dict) -> dict[str, str]:
    """colour -> the label of the legend entry a reader can see for it."""
    frame = Box.of(chart["svg"])
    labels = {}
    for lg in chart["legends"]:
        for e in lg["entries"]:
            if e["shown"] and frame.holds(Box.of(e["box"])):
                for c in (e["fill"], e["stroke"]):
                    if c:
                        labels.setdefault(c, e["label"])
    return labels


def unlabelled_series(chart: dict) -> list[str]:
    """Series colours drawn in the plot with no legend entry in view (when there are two or more)."""
    colours = _series_colours(chart)
    if len(colours) < 2:
        return []
    missing = sorted(colours - set(_legend_labels(chart)))
    return [f"{len(missing)} of {len(colours)} series have no legend entry in view (colours {', '.join(missing)})"] \
        if missing else []


def _points(d: str) -> list[tuple[float, float]]:
    import re
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d or "")]
    return list(zip(numbers[::2], numbers[1::2]))


def _same_line(a: list, b: list) -> bool:
    return len(a) == len(b) > 1 and all(abs(p[0] - q[0]) <= SAME_LINE_PX and abs(p[1] - q[1]) <= SAME_LINE_PX
                                        for p, q in zip(a, b))


def hidden_lines(chart: dict) -> list[str]:
    """A series' line covered by another drawn over it on the same points (as wide or wider, and
    solid: a thinner or dashed line on top lets the one below show), with no text in the chart
    that names both: a reader sees one line and looks in vain for the other."""
    lines = [(i["stroke"], i["width"], i["dashed"], _points(i["d"])) for m in chart["marks"]
             if m["kind"] == "line" for i in m["items"] if i["shown"] and i["stroke"]]
    labels = _legend_labels(chart)
    words = [t["text"] for t in _shown_texts(chart)]
    found = []
    for n, (colour_a, width_a, _, a) in enumerate(lines):  # drawn first, below
        for colour_b, width_b, dashed_b, b in lines[n + 1:]:  # drawn later, on top
            if colour_a == colour_b or dashed_b or width_b < width_a or not _same_line(a, b):
                continue
            name_a, name_b = labels.get(colour_a, colour_a), labels.get(colour_b, colour_b)
            if not any(name_a in w and name_b in w for w in words):
                found.append(f"the line of {name_b!r} hides the line of {name_a!r} and no text says so")
    return found


RULES = (collapsed_plots, hairline_marks, overlapping_texts, clipped_texts, texts_over_plots,
         unlabelled_series, hidden_lines)


def chart_problems(chart: dict) -> list[str]:
    """Everything that makes this chart unreadable, one sentence each (empty when readable)."""
    return [f"{name(chart)}: {problem}" for rule in RULES for problem in rule(chart)]


# Elements that hide part of their content (overflow hidden or clip, content wider or taller
# than the box), and elements that stick out past the right edge of the page. Scrollers
# (overflow auto / scroll: tables, code) are meant to scroll and are left alone.
CLIPPED_OR_OUT = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const right = main.getBoundingClientRect().right;
  const found = [];
  const unseen = e => {  // inside a box of at most 2 px: nothing shown, or text for screen readers;
                        // or inside a closed expander (laid out, not shown)
    const details = e.closest('details');
    if (details && !details.open && !e.closest('summary')) return true;
    return tiny(e);
  };
  const memo = (f) => { const known = new Map();
                        return e => { if (!known.has(e)) known.set(e, f(e)); return known.get(e); }; };
  const tiny = memo(e => {  // it or a box around it (up to main) at most 2 px wide or high
    if (!e || e === main) return false;
    const b = e.getBoundingClientRect();
    return b.width <= 2 || b.height <= 2 || tiny(e.parentElement);
  });
  const scrolls = memo(e => !!e && e !== main
                       && (['auto', 'scroll'].includes(getComputedStyle(e).overflowX) || scrolls(e.parentElement)));
  const insideScroller = e => scrolls(e.parentElement);  // a table's or code block's content, scrolled in its own box
  for (const e of main.querySelectorAll('*')) {
    if (e.tagName !== 'svg' && e.closest('svg')) continue;  // a chart's insides: CHART_FACTS reads them
    const r = e.getBoundingClientRect();
    if (unseen(e)) continue;
    const cs = getComputedStyle(e);
    const hides = ['hidden', 'clip'];
    const label = e.getAttribute('aria-label') || e.getAttribute('type') || '';
    const name = () => `${e.tagName.toLowerCase()}.${e.dataset.testid || e.className.baseVal || e.className} ${label}`;
    const text = () => (e.innerText || '').slice(0, 60).replace(/\\s+/g, ' ');  // read only for a message
    if (hides.includes(cs.overflowX) && e.scrollWidth > e.clientWidth + 2)
      found.push(`clips width: ${name()} ${e.scrollWidth}>${e.clientWidth} "${text()}"`);
    if (hides.includes(cs.overflowY) && e.scrollHeight > e.clientHeight + 2 && e.tagName !== 'svg')
      found.push(`clips height: ${name()} ${e.scrollHeight}>${e.clientHeight} "${text()}"`);
    if (r.right > right + 1 && !insideScroller(e)) found.push(`sticks out: ${name()} right ${Math.round(r.right)} > ${Math.round(right)}`);
  }
  return found;
}"""
