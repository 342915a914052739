"""Data sets made in code (nothing is downloaded), one module per kind of data."""

from attention_course.data.regression import RegressionData, make_regression_data, true_function

__all__ = ["RegressionData", "make_regression_data", "true_function"]
