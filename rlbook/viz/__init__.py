"""Figures and widgets for the lessons, one module per topic (import the module you need).

Every widget is a thin ``ipywidgets.interact`` over a plotting function that the lesson also
calls once directly, so the static notebook shows the picture too. What a figure draws is computed
by the library (``rlbook.toys``, ``rlbook.preference_analysis``, ``rlbook.token_gradients``, …),
which never imports ``rlbook.viz``: these modules are leaves (they draw, never train or sample;
``tests/test_layers.py``). The trainers' live plot is ``rlbook.trainers.live``.
"""
