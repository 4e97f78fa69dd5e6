"""Self-checking exercises: each lesson's "Check yourself" cells call a checker from here.

A checker runs the reader's function on test inputs, compares it with the library's reference,
and when they differ names the likely mistake (a missing ``detach``, the wrong KL direction, …).
It returns True or False and prints its verdict; given ``None`` or a function still raising
``NotImplementedError`` (the exercise not yet attempted) it says so and returns None, so a
notebook with unanswered exercises still runs. Most checkers are declared as data, a
``FunctionExercise`` (cases, reference, known mistakes → feedback); it and the plumbing the others
share (``_call``, ``_run``, ``_failed``, ``_not_attempted``) are in ``rlbook.exercises.framework``.
"""
