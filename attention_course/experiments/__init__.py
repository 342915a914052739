"""The chapters' experiments: tasks, training runs and measurements, one module
per chapter, kept apart from the concept modules that the chapters explain (an
experiment may import its chapter's module and earlier ones; no concept module
imports an experiment)."""
