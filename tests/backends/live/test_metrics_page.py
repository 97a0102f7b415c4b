"""The `/metrics` scrape keeps only the series pipedeck maps, and reads them as from the whole page."""

from pipedeck.backends.live.metrics import mapped_lines, parse

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5072.0
# HELP vllm:request_prefill_time_seconds Histogram of time spent in PREFILL phase for request.
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.3",model_name="tiny"} 7.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 8.0
vllm:request_prefill_time_seconds_count{engine="0",model_name="tiny"} 8.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="tiny"} 1.5
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="tiny"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 8.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 8.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.4
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2e+09
"""


def test_the_scrape_keeps_the_mapped_series_and_drops_the_rest():
    kept = mapped_lines(PAGE)
    assert "prefill_time" not in kept and "process_resident" not in kept
    assert kept.count("# TYPE ") == 3 and "vllm:time_to_first_token_seconds_sum" in kept
    scrape = parse(PAGE)
    assert scrape.engine == "vllm"
    assert scrape.values["running"] == 3.0 and scrape.values["prompt_tokens_total"] == 5072.0
    ttft = scrape.values["ttft_s"]
    assert not isinstance(ttft, float) and (ttft.count, ttft.sum) == (8.0, 0.4)
