"""The per-request and block-lifetime charts (kvviz.vllm.request_charts): the reasons kept in their
order, the lifetimes binned."""
import pandas as pd

from kvviz.vllm import request_charts
from kvviz.vllm.reasons import CODES


def test_the_request_charts_keep_the_reasons_order_and_bin_the_lifetimes():
    reasons = pd.DataFrame({"reason": list(CODES), "requests": range(len(CODES))})
    vega = request_charts.reasons_chart(reasons).to_dict()
    assert vega["encoding"]["y"]["sort"] == list(CODES) and vega["mark"]["type"] == "bar"
    gaps = request_charts.value_histogram(pd.DataFrame({"gap_s": [0.5, 1.5]}), "gap_s", "gap, s").to_dict()
    assert gaps["encoding"]["x"]["bin"] == {"maxbins": 20} and gaps["encoding"]["y"]["title"] == "gaps"
