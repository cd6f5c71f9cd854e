from agents import playbook
from harness.results import Bottleneck

MATMUL = [
    "BLOCK_M",
    "BLOCK_N",
    "BLOCK_K",
    "GROUP",
    "NUM_WARPS",
    "NUM_STAGES",
    "PROGRAMS_PER_SM",
    "TILE_ORDER",
]


def test_it_takes_the_bottleneck_from_the_profile_first():
    profile = {"bottleneck": "memory", "metrics": {"dram_pct": 91.0}}
    evaluation = {
        "tflops": 500.0,
        "device": {"peak_tflops": 800.0, "peak_gbps": 3000.0},
        "gbps": 10.0,
    }
    d = playbook.diagnose(profile, evaluation)
    assert d.bottleneck is Bottleneck.MEMORY and "dram_pct=91" in d.evidence


def test_it_falls_back_to_the_roofline_without_a_profile():
    def diagnose(tflops, gbps):
        ev = {"tflops": tflops, "gbps": gbps, "device": {"peak_tflops": 800.0, "peak_gbps": 3000.0}}
        return playbook.diagnose({"bottleneck": "unknown"}, ev).bottleneck

    assert diagnose(600.0, 300.0) is Bottleneck.COMPUTE
    assert diagnose(5.0, 2500.0) is Bottleneck.MEMORY
    assert diagnose(100.0, 600.0) is Bottleneck.LATENCY  # far from both roofs
    assert playbook.diagnose(None, None).bottleneck is Bottleneck.UNKNOWN


def test_it_moves_knobs_the_way_the_bottleneck_asks():
    compute = playbook.preferences(Bottleneck.COMPUTE, MATMUL)
    assert (
        compute["BLOCK_M"] == +1 and compute["NUM_WARPS"] == +1 and compute["PROGRAMS_PER_SM"] == +1
    )
    occupancy = playbook.preferences(Bottleneck.OCCUPANCY, MATMUL)
    assert occupancy["BLOCK_N"] == -1 and occupancy["NUM_STAGES"] == -1
    assert "TILE_ORDER" not in compute  # no role: left to the search
    assert playbook.preferences(Bottleneck.MEMORY, ["ROWS"]) == {"ROWS": +1}


def test_it_orders_families_by_tier():
    names = ["matmul_persistent_tma", "matmul_splitk", "matmul_tiled"]
    assert sorted(names, key=playbook.family_tier) == [
        "matmul_tiled",
        "matmul_splitk",
        "matmul_persistent_tma",
    ]
