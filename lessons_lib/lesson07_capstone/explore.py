"""The explorer and the record protocol of lesson 07: NOT WRITTEN YET (issue 22).

`python -m lessons_lib.record` imports this module; with no top-level `record` it skips the lesson.
To do: a `Lesson` whose variants toggle each fix (model.FIXES), `explorer()`, `record(device, quick=False)`,
`targets(device, section)` and `LESSON`, copied from an existing lesson's explore.py.
"""
