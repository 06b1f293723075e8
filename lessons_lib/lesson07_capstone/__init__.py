"""Lesson 07, the capstone: profile and fix a small model that has the pitfalls of lessons 01-06 in it.

model.py    the model with its pitfalls (Slow*), the fixed one (Fixed*), the data and both training loops
evidence.py the hunt with the course's tools (trace_ops, syncs): what each loop does per step; step_times
exercise.py the checker: which pitfalls remain, by trace and sync count (no clock)
"""
from .evidence import findings, pair, step_times
from .exercise import check
from .model import copy_weights, fixed_train, FIXES, make_data, Model, slow_train
