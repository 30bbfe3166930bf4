"""``after_step``, the tail every recipe's step loop shares: evaluations on their cadence, then ``end_step``."""

from distlab.training.loop import after_step


class FakeSession:
    """Records the steps ``end_step`` saw; asks to stop at ``stop_at`` and lowers ``steps`` to ``lower_to``."""

    def __init__(self, stop_at=None, lower_to=None):
        self.ended, self.stop_at, self.lower_to = [], stop_at, lower_to

    def end_step(self, step, steps):
        self.ended.append(step)
        return step == self.stop_at, self.lower_to or steps


def _run(session, steps, every, last_too=False, evaluate=None):
    evaluated, step, stopped = [], 0, False

    def record(at):
        evaluated.append(at)
        return None if evaluate is None else evaluate(at)

    while step < steps and not stopped:
        step += 1
        stopped, steps = after_step(session, step, steps, record, every, last_too=last_too)
    return evaluated, step, stopped


def test_evaluates_every_n_steps_and_leaves_the_last_to_the_final_evaluation():
    s = FakeSession()
    assert _run(s, 10, 5) == ([5], 10, False)
    assert s.ended == list(range(1, 11))


def test_last_too_evaluates_at_the_last_step():
    assert _run(FakeSession(), 10, 5, last_too=True)[0] == [5, 10]
    assert _run(FakeSession(), 10, 0, last_too=True)[0] == []  # every=0: never


def test_an_evaluation_cut_short_stops_before_end_step():
    s = FakeSession()
    assert _run(s, 10, 3, evaluate=lambda at: at != 6) == ([3, 6], 6, True)
    assert s.ended == [1, 2, 3, 4, 5]  # step 6 is saved by the evaluation's own stop handling, not end_step


def test_end_step_stops_and_lowers_steps():
    assert _run(FakeSession(stop_at=4), 10, 0) == ([], 4, True)
    assert _run(FakeSession(lower_to=7), 10, 0)[1] == 7
