"""The exercise specs, one module per exercise (``exNN_name.py`` exposing ``EXERCISE``).

Modules here are discovered automatically: adding a file is all it takes to register
an exercise. Use :func:`attention_course.grading.registry.get_exercise` to look one up.
"""
