"""The run's last line: the fastest variant, its ratios, the paper's variant beside it."""
from pipeline.headline import MAX_CASE_LINES, fastest_lines


def row(case, variant, kind, ms, ok=True):
    return {"case": case, "variant": variant, "kind": kind, "median_ms": ms, "ok": ok}


def test_fastest_of_ours_with_ratios_and_the_papers_variant():
    rows = [row("A", "fused", "ours", 0.2), row("A", "rfft", "ours", 0.05),
            row("A", "dense_fp32", "baseline", 0.6), row("A", "dense_tf32", "baseline", 0.2)]
    (line,) = fastest_lines(rows, paper="fused")
    assert line == "A: fastest: rfft 0.05 ms a call; 12x dense_fp32, 4x dense_tf32; the paper's fused 0.2 ms (4x slower)"


def test_a_faster_baseline_is_named_and_a_failed_check_never_wins():
    rows = [row("B", "rfft", "ours", 1.0), row("B", "dft", "ours", 0.1, ok=False),
            row("B", "dense_tf32", "baseline", 0.5)]
    (line,) = fastest_lines(rows)
    assert line.startswith("B: fastest: dense_tf32 0.5 ms a call (a baseline); ours best: rfft 1 ms; 0.5x dense_tf32")


def test_training_reports_rank_by_epoch_time_and_the_paper_can_be_the_fastest():
    rows = [{"variant": "flow", "kind": "ours", "epoch_ms": 5.0}, {"variant": "stage", "kind": "baseline", "epoch_ms": 60.0}]
    assert fastest_lines(rows, paper="flow") == ["fastest: flow 5 ms an epoch; 12x stage; the paper's variant"]


def test_many_cases_give_one_counting_line():
    rows = []
    for i in range(MAX_CASE_LINES + 2):
        rows += [row(f"c{i}", "a" if i % 3 else "b", "ours", 1.0), row(f"c{i}", "base", "baseline", 2.0 if i else 0.5)]
    (line,) = fastest_lines(rows)
    assert line.startswith(f"fastest of ours over {MAX_CASE_LINES + 2} cases: a in 4, b in 2; a baseline was faster in 1")


def test_no_time_column_or_no_variant_of_ours_gives_nothing():
    assert fastest_lines([{"variant": "x", "kind": "ours", "acc": 1.0}]) == []
    assert fastest_lines([row("A", "base", "baseline", 1.0)]) == []


def test_a_report_timed_in_seconds_is_ranked_and_printed_in_ms():
    """sparse_dnn's rows carry ``time_s``: the line ranks by it and prints milliseconds."""
    base = {"network": "hpec", "N": 1024, "L": 120, "images": 1200, "ok": True}
    rows = [dict(base, variant="snig", kind="ours", time_s=0.0073, x_vs_bf=1.36),
            dict(base, variant="cluster", kind="ours", time_s=0.0022, x_vs_bf=4.5),
            dict(base, variant="bf", kind="baseline", time_s=0.0099)]
    (line,) = fastest_lines(rows, "snig")
    assert "fastest: cluster 2.2 ms a pass" in line and "4.5x bf" in line and "the paper's snig 7.3 ms (3.32x slower)" in line


def test_the_line_quotes_the_measure_its_ratio_is_made_of():
    """wide's rows: epoch_ms is an epoch's wall time, gpu_ms its kernels' device time, and the
    x_vs_ columns of the GPU variants are GPU-time ratios: time and ratio are both GPU time, and a
    baseline without a GPU time (the CPU reference) is compared by wall time, named as such."""
    rows = [{"variant": "flow", "kind": "ours", "epoch_ms": 7.147, "gpu_ms": 4.536, "x_vs_stage": 18.6},
            {"variant": "stage", "kind": "baseline", "epoch_ms": 88.0, "gpu_ms": 84.27},
            {"variant": "cpu", "kind": "baseline", "epoch_ms": 714.7}]
    (line,) = fastest_lines(rows, "flow", {"epoch_ms": "wall time an epoch"})
    assert line == ("fastest: flow 4.536 ms GPU time an epoch; 18.6x stage, 100x cpu (wall time an epoch); "
                    "the paper's variant")


def test_the_launch_floor_is_never_the_fastest():
    rows = [row("N=5", "fewhot", "ours", 0.0046), row("N=5", "cusparse", "baseline", 0.0175),
            row("N=5", "launch_floor", "floor", 0.0027, ok=None)]
    (line,) = fastest_lines(rows)
    assert line.startswith("N=5: fastest: fewhot 0.0046 ms a call; 3.8x cusparse"), line


def test_an_unstable_ratio_is_never_a_plain_ratio():
    rows = [dict(row("A", "cpu_fft", "ours", 1.0), x_vs_cpu_dense=41.2, ratio_spread=0.41, ratio_unstable="yes"),
            row("A", "cpu_dense", "baseline", 41.2)]
    (line,) = fastest_lines(rows)
    assert "; 41.2x cpu_dense" not in line
    assert "ratio unstable (41.2x cpu_dense, the rounds' ratios spread 41 %" in line and "quiet machine" in line
