"""The readability rules of tests/browser/geometry.py on hand-made chart records (no browser): each
rule finds the defect it names and passes a chart without it. The records have the shape
CHART_FACTS reads from a page; the figures are those read from the blocks chart of issue 37."""
from tests.browser import geometry


def box(x, y, w, h):
    return {"x": x, "y": y, "w": w, "h": h}


def text(role, words, b, shown=True):
    return {"role": role, "text": words, "box": b, "shown": shown}


def item(b, fill=None, stroke=None, d=None, width=1, dashed=False, shown=True):
    return {"box": b, "fill": fill, "stroke": stroke, "d": d, "width": width, "dashed": dashed, "shown": shown,
            "text": None}


def chart(marks=(), texts=(), legends=(), plots=(box(100, 10, 240, 120),)):
    return {"index": 0, "key": "panel-blocks", "box": box(0, 0, 378, 200), "svg": box(0, 0, 378, 200),
            "plots": list(plots), "marks": list(marks), "texts": list(texts), "legends": list(legends)}


def legend(*entries):
    return {"gradient": False, "label": "", "entries": [
        {"fill": colour, "stroke": None, "label": label, "box": b, "shown": True} for colour, label, b in entries]}


# The blocks chart as drawn at 1280 x 720 before the fix: a plot 0 px high, two stacked bars per
# row 0.25 px thick, both row labels at the same height, both "unused" labels too.
COLLAPSED = chart(
    plots=[box(132, 13, 246, 0)],
    marks=[{"kind": "bar", "cell": 0, "items": [item(box(132, 13, 168, 0.25), "#4c78a8"),
                                                item(box(300, 13, 5, 0.25), "#d5d5d5"),
                                                item(box(132, 13, 168, 0.25), "#4c78a8"),
                                                item(box(300, 13, 2, 0.25), "#d5d5d5")]}],
    texts=[text("axis label", "paged (modelled)", box(40, 8, 89, 10)),
           text("axis label", "contiguous max-length", box(10, 8, 119, 10)),
           text("mark label", "5% unused", box(310, 10, 45, 8)), text("mark label", "2% unused", box(308, 10, 45, 8))])


def test_the_collapsed_blocks_chart_is_found_unreadable():
    problems = geometry.chart_problems(COLLAPSED)
    assert any("plot area is 246 x 0 px" in p for p in problems)
    assert any("4 of 4 bars are 0.25 px thick" in p for p in problems)
    assert any("'paged (modelled)' and axis label 'contiguous max-length' overlap" in p for p in problems)
    assert any("'5% unused' and mark label '2% unused' overlap" in p for p in problems)


def test_bars_with_room_and_apart_labels_pass():
    rows = [item(box(0, 28, 300, 14), "#4c78a8"), item(box(300, 28, 10, 14), "#d5d5d5"),
            item(box(0, 74, 300, 14), "#4c78a8"), item(box(300, 74, 4, 14), "#d5d5d5")]
    readable = chart(plots=[box(0, 0, 378, 92)], marks=[{"kind": "bar", "cell": 0, "items": rows}],
                     texts=[text("mark label", "paged (modelled): 5% unused", box(0, 4, 170, 11)),
                            text("mark label", "contiguous max-length: 2% unused", box(0, 50, 200, 11))],
                     legends=[legend(("#4c78a8", "used", box(20, 150, 28, 12)),
                                     ("#d5d5d5", "unused", box(80, 150, 40, 12)))])
    assert geometry.chart_problems(readable) == []


def test_a_legend_past_the_edge_leaves_its_series_unlabelled():
    lines = [{"kind": "line", "cell": 0, "items": [item(box(100, 10, 200, 100), stroke=c, d="M0,0L10,10")
                                                   for c in ("#4c78a8", "#f58518", "#54a24b")]}]
    cut = chart(marks=lines, legends=[legend(("#4c78a8", "SnapKV", box(100, 150, 40, 12)),
                                             ("#f58518", "Knorm", box(160, 150, 40, 12)),
                                             ("#54a24b", "quanto 4-bit", box(360, 150, 70, 12)))],
                texts=[text("legend label", "quanto 4-bit", box(360, 150, 70, 12))])
    problems = geometry.chart_problems(cut)
    assert any("'quanto 4-bit' is cut by the chart's edge" in p for p in problems)
    assert any("1 of 3 series have no legend entry in view (colours #54a24b)" in p for p in problems)


def test_a_line_hidden_under_another_needs_a_word_naming_both():
    same = "M0,100L50,50L100,50"
    lines = {"kind": "line", "cell": 0, "items": [item(box(100, 10, 100, 50), stroke="#e45756", d=same, width=2),
                                                  item(box(100, 10, 100, 50), stroke="#54a24b", d=same, width=2)]}
    entries = legend(("#e45756", "StreamingLLM", box(100, 150, 80, 12)), ("#54a24b", "SnapKV", box(200, 150, 50, 12)))
    hidden = chart(marks=[lines], legends=[entries])
    assert geometry.hidden_lines(hidden) == ["the line of 'SnapKV' hides the line of 'StreamingLLM' and no text says so"]
    said = chart(marks=[lines], legends=[entries], texts=[text("legend label", "SnapKV = StreamingLLM",
                                                               box(100, 170, 120, 12))])
    assert geometry.hidden_lines(said) == []
    dashed = dict(lines, items=[lines["items"][0], {**lines["items"][1], "dashed": True}])  # the one below shows
    assert geometry.hidden_lines(chart(marks=[dashed], legends=[entries])) == []


def test_axis_text_over_the_plot_and_a_label_cut_short_are_found():
    over = chart(texts=[text("axis title", "requests", box(150, 50, 60, 12)), text("axis label", "MHA: 32 K…",
                                                                                     box(10, 20, 60, 12))])
    problems = geometry.chart_problems(over)
    assert any("axis title 'requests' lies over the plot" in p for p in problems)
    assert any("'MHA: 32 K…' is cut short" in p for p in problems)
    hidden = chart(texts=[text("axis title", "requests", box(150, 50, 60, 12), shown=False)])
    assert geometry.chart_problems(hidden) == []  # Vega hides overlapping labels: not drawn, not read


def test_alike_cells_read_as_one_record_count_as_many():
    """CHART_FACTS returns a mark's items alike in size and colour once, with their count `n`."""
    bars = [dict(item(box(0, 0, 0.5, 9), "#4c78a8"), n=1800), dict(item(box(0, 0, 0.5, 30), "#4c78a8"), n=90)]
    thin = chart(marks=[{"kind": "bar", "cell": 0, "items": bars}])  # a band 0.5 px wide, bars of two heights
    assert geometry.hairline_marks(thin) == ["1890 of 1890 bars are 0.50 px thick (at least 4 px reads as a bar)"]
    bars.append(dict(item(box(0, 0, 6, 30), "#4c78a8"), n=10))  # bands differ: each bar's thinner side
    assert geometry.hairline_marks(thin) == ["1890 of 1900 bars are 0.50 px thick (at least 4 px reads as a bar)"]
