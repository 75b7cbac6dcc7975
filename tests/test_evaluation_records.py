"""The flags an evaluation records as typed fields, read from the notes of rows stored before them."""

from __future__ import annotations

from kernelband.evaluation.records import ALONE_NOTE, NCU_SKIPPED, EvalResult, Outcome, evaluated_again_alone


def _old_row(notes: list[str]) -> dict:
    """A row as stored before `ncu_skipped` and `retried_alone` were fields: they are not in it."""
    row = EvalResult(task="t", outcome=Outcome.OK, notes=notes).to_dict()
    del row["ncu_skipped"], row["retried_alone"]
    return row


def test_an_old_rows_notes_give_its_flags():
    alone = ALONE_NOTE.format(first="torch.OutOfMemoryError: CUDA out of memory", closed=2)
    old = EvalResult.from_dict(_old_row([NCU_SKIPPED, alone]))
    assert old.ncu_skipped and old.retried_alone and evaluated_again_alone(old)
    plain = EvalResult.from_dict(_old_row(["timing: something else"]))
    assert not plain.ncu_skipped and not plain.retried_alone and not evaluated_again_alone(plain)


def test_a_new_rows_flags_are_its_fields_not_its_notes():
    flagged = EvalResult(task="t", outcome=Outcome.OK, ncu_skipped=True, retried_alone=True)
    again = EvalResult.from_dict(flagged.to_dict())
    assert again.ncu_skipped and again.retried_alone and evaluated_again_alone(again)
    # a note alone no longer sets a stored flag: the field says it
    noted = EvalResult(task="t", outcome=Outcome.OK, notes=[NCU_SKIPPED])
    assert not EvalResult.from_dict(noted.to_dict()).ncu_skipped


def test_an_evaluation_that_skips_ncu_by_choice_says_so_in_its_field():
    from kernelband.evaluation.evaluator import Evaluator
    from kernelband.tasks import load_task

    task = load_task("examples:vector_add")
    with Evaluator(mode="interpreter", warm=1, use_ncu=True) as ev:
        result = ev.evaluate(task, profile=False)
    assert result.ok, result.detail
    assert result.ncu_skipped and NCU_SKIPPED in result.notes and not result.retried_alone
