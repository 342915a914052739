"""The chapters' experiments: tasks, training runs over seeds, measurements and
the tables of their results, one module per chapter (``experiments.seq2seq`` for
chapter 4, ...). The concept modules of :mod:`attention_course` hold what the
chapters explain and never import these; an experiment imports its own
chapter's module and earlier ones."""
