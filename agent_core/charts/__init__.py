"""Charts: rows shaped into series and drawn as PNG images with matplotlib.

Platform-agnostic and without tool concerns: `spec` is what a chart asks for, `shaping` turns
rows into series (pure Python), `fonts` finds a CJK-capable font, `drawing` renders. Only
`drawing` and `fonts` import matplotlib, and they are imported when a chart is drawn, so commands
that never draw start without it.
"""
