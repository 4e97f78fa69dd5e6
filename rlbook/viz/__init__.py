"""Figures and widgets for the lessons, one module per topic (import the module you need).

Every widget is a thin ``ipywidgets.interact`` over a plotting function that the lesson also
calls once directly, so the static notebook shows the picture too.
"""
