"""The one-dimensional k-NN mutual information used in the contextuality bootstrap equals scikit-learn's estimator
(the headline numbers still come from scikit-learn); the contingency-table plug-in MI equals a direct formula."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_selection import mutual_info_classif

from biaslab.metrics.contextuality.information import knn_mi_classif_bits, mi_table_bits, plugin_mutual_information_bits


@pytest.mark.parametrize("case", range(40))
def test_knn_mi_equals_scikit_learn(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(20, 400))
    labels = int(rng.integers(2, 4))
    y = rng.integers(0, labels, size=n)
    if case % 3 == 0:
        x = rng.integers(1, 8, size=n).astype(float)  # many ties, like a 1..7 rating
    else:
        x = rng.normal(size=n) + 0.8 * y  # informative
    expected = mutual_info_classif(x.reshape(-1, 1), y, discrete_features=[False], n_neighbors=3,
                                   random_state=case)[0] / np.log(2)
    assert knn_mi_classif_bits(x, y, seed=case) == pytest.approx(expected, abs=1e-12)


def test_knn_mi_is_informative_where_it_should_be():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=2000)
    assert knn_mi_classif_bits(rng.normal(size=2000) + 3 * y, y, seed=0) > 0.5
    assert knn_mi_classif_bits(rng.normal(size=2000), y, seed=0) < 0.02


def test_table_mi_equals_the_plug_in_formula():
    rng = np.random.default_rng(1)
    feature = rng.integers(0, 3, size=500)
    answer = (rng.random(500) < np.array([0.2, 0.5, 0.9])[feature]).astype(int)
    table = np.zeros((3, 2))
    np.add.at(table, (feature, answer), 1)
    assert mi_table_bits(table) == pytest.approx(plugin_mutual_information_bits(answer.astype(float), feature),
                                                 abs=1e-12)
