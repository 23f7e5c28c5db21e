"""The issue-18 limits script: every column of one repeat, and its table."""

from __future__ import annotations

from ldpfda.experiments import limits


def test_one_repeat_scores_every_column_on_its_releases():
    errors = limits.repeat_errors(1.0, 0, 0.0)
    assert set(errors) == set(limits.COLUMNS)
    assert all(0.0 <= e <= 1.0 for e in errors.values())
    # 100,000 test points of a design with Bayes error 0.132: without noise the fit is
    # near the clean one, and every column that reads the releases beats a guess.
    assert errors["noiseless"] < errors["non_private"] + 0.01
    assert max(errors[c] for c in ("default", "slopes", "forced")) < 0.3
    assert errors["majority"] > 0.49


def test_the_table_has_a_cell_per_column_and_pairing(capsys):
    assert limits.main(["--repeats", "2", "--epsilons", "2"]) == 0
    head, rule, row = capsys.readouterr().out.splitlines()
    cells = row.strip("|").split("|")
    assert len(cells) == 1 + len(limits.COLUMNS) + 3 == len(head.strip("|").split("|"))
    assert "default − slopes, paired" in head
