"""Both estimators pass scikit-learn's common checks.

The checks hand the estimators plain arrays, so they run with input_type="vectors",
and with small settings (MRMA with 2 weak models) to stay fast. What cannot apply is
declared through tags, each with its reason in the estimator's source:
``multi_class=True`` for both (each takes K classes and meets the multi-class checks)
and, for MRMA, ``poor_score`` (on the checks' 200 clients its
training accuracy falls short of 0.83). No check is expected to fail: a fixed
random_state makes a fit reproducible, which is all the checks ask.
"""

from __future__ import annotations

from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import parametrize_with_checks

from ldpfda.engine.classifier import LDPClassifier
from ldpfda.engine.estimator import MRMAClassifier

ESTIMATORS = [
    LDPClassifier(input_type="vectors"),
    MRMAClassifier(
        n_estimators=2, subsample_size=2, eval_fraction=0.5, input_type="vectors"
    ),
]

#: Checks that cannot apply, by estimator, with the reason (none today).
EXPECTED_FAILED_CHECKS: dict[str, dict[str, str]] = {
    "LDPClassifier": {},
    "MRMAClassifier": {},
}


def _expected(estimator) -> dict[str, str]:
    return EXPECTED_FAILED_CHECKS[type(estimator).__name__]


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected)
def test_scikit_learn_common_checks(estimator, check):
    check(estimator)


def test_the_tags_say_both_estimators_take_k_classes_and_which_scores_poorly():
    ldp, mrma = (get_tags(e).classifier_tags for e in ESTIMATORS)
    assert ldp.multi_class and mrma.multi_class
    assert not ldp.poor_score and mrma.poor_score
