"""Self-checking exercises: each lesson's "Check yourself" cells call a checker from here.

A checker runs the reader's function on test inputs, compares it with the library's reference,
and when they differ names the likely mistake (a missing ``detach``, the wrong KL direction, …).
It returns True or False and prints its verdict; given ``None`` (the exercise not yet attempted)
it says so and returns None, so a notebook with unanswered exercises still runs.
"""


def raises_not_implemented(fn, *args) -> bool:
    """True (and says so) when the reader's function is still the stub raising NotImplementedError."""
    try:
        fn(*args)
    except NotImplementedError:
        print("Not attempted yet: replace the `raise NotImplementedError` with your answer.")
        return True
    except Exception:  # any other failure is reported by the checker itself
        return False
    return False
