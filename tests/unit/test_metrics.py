import math

import pytest

from keel.balance.metrics import coefficient_of_variation, node_load, pve_imbalance, spread


def test_all_load_on_one_of_three_nodes_is_the_maximum_imbalance():
    # PVE's worked example: loads 1/3, 0, 0 -> CV 1.414, normalised 1.0
    assert coefficient_of_variation([1 / 3, 0, 0]) == pytest.approx(math.sqrt(2))
    assert pve_imbalance([1 / 3, 0, 0]) == pytest.approx(1.0)


@pytest.mark.parametrize("loads,expected", [
    ([0.5, 0.5, 0.5], 0.0), ([0.4], 0.0), ([], 0.0), ([0, 0, 0], 0.0),
    ([0.8, 0.2], 0.6), ([0.6, 0.4, 0.2], 0.2886751),
])
def test_pve_imbalance(loads, expected):
    assert pve_imbalance(loads) == pytest.approx(expected, abs=1e-6)


def test_imbalance_is_between_zero_and_one():
    import random
    rng = random.Random(3)
    for _ in range(500):
        loads = [rng.random() for _ in range(rng.randint(2, 12))]
        assert 0.0 <= pve_imbalance(loads) <= 1.0 + 1e-9


def test_node_load_weighs_cpu_and_memory_equally():
    assert node_load(0.2, 0.6) == pytest.approx(0.4)


def test_spread_is_proxlbs_balanciness_in_points():
    assert spread([0.80, 0.35, 0.50]) == pytest.approx(45.0)
    assert spread([]) == 0.0
