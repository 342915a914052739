"""Data sets made in code (nothing is downloaded), one module per kind
of data."""

from attention_course.data.images import (
    ObjectImages,
    load_digits_images,
    make_object_images,
)
from attention_course.data.regression import (
    RegressionData,
    make_regression_data,
    true_function,
)
from attention_course.data.translation import (
    TranslationBatch,
    TranslationCorpus,
    TranslationLoader,
    Vocab,
    collate,
    make_loader,
    make_translation_corpus,
)

__all__ = [
    "RegressionData",
    "make_regression_data",
    "true_function",
    "TranslationBatch",
    "TranslationCorpus",
    "TranslationLoader",
    "Vocab",
    "collate",
    "make_loader",
    "make_translation_corpus",
    "ObjectImages",
    "load_digits_images",
    "make_object_images",
]
