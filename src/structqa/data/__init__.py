"""Readers that turn QA files into immutable Example records, plus sampling and splits."""

from structqa.data.mrqa import read_mrqa
from structqa.data.readers import READERS, detect_format, get_reader, read_examples
from structqa.data.records import Answer, DataError, Dataset, Example, ReadReport
from structqa.data.sampling import parse_train_size, train_subset, validation_split
from structqa.data.squad import read_squad

__all__ = [
    "READERS",
    "Answer",
    "DataError",
    "Dataset",
    "Example",
    "ReadReport",
    "detect_format",
    "get_reader",
    "parse_train_size",
    "read_examples",
    "read_mrqa",
    "read_squad",
    "train_subset",
    "validation_split",
]
